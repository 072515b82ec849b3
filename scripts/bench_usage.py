"""Two figures for the usage ledger (issue 33): what it adds to each provider call, and how long
`nanobot usage` takes on a year of records.

1. Overhead per call: a MeteredProvider around a provider that answers at once, against that
   provider called directly; the difference is the limit check (today's spend, read from what
   the ledger gained) plus the append. Target: under 1 ms.
2. `nanobot usage` on 100,000 calls spread over 365 days (rotated files dated as they would be),
   in process (the report) and as the real command (Python start-up included).

Everything happens in a temporary NANOBOT_HOME, never the real ~/.nanobot.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def overhead(calls: int) -> tuple[float, float]:
    """(median µs of the metered call, median µs of the bare call)."""
    from nanobot.config import UsageLimits
    from nanobot.messages import Message
    from nanobot.providers.base import LLMResponse, Provider, Usage
    from nanobot.usage.meter import MeteredProvider, UsageMeter

    class Instant(Provider):
        async def chat(self, messages: list[Message], **kwargs: Any) -> LLMResponse:
            return LLMResponse("ok", usage=Usage(1200, 80, cache_read_tokens=1000))

    bare = Instant("m")
    meter = UsageMeter(UsageLimits())
    metered = MeteredProvider(
        bare, meter, source="chat", session="cli:direct", model="openai/gpt-4.1"
    )
    messages: list[Message] = [{"role": "user", "content": "hi"}]

    async def run() -> tuple[list[float], list[float]]:
        with_meter, without = [], []
        for _ in range(calls):
            start = time.perf_counter()
            await metered.chat(messages)
            with_meter.append(time.perf_counter() - start)
            start = time.perf_counter()
            await bare.chat(messages)
            without.append(time.perf_counter() - start)
        return with_meter, without

    with_meter, without = asyncio.run(run())
    meter.close()
    return statistics.median(with_meter) * 1e6, statistics.median(without) * 1e6


def write_year(records: int) -> None:
    """`records` calls spread evenly over the last 365 days, rotated as the ledger rotates them."""
    from nanobot.usage.ledger import Ledger, UsageRecord, rotated_files

    rng = random.Random(33)
    ledger = Ledger()
    now = time.time()
    sources = ["chat", "one-shot", "subagent", "consolidation", "cron", "heartbeat"]
    models = ["anthropic/claude-sonnet-4-5", "openai/gpt-4.1", "openrouter/qwen3"]
    dated: dict[str, float] = {}
    for i in range(records):
        t = now - 365 * 86_400 * (1 - i / records)
        source = rng.choice(sources)
        ledger.append(
            UsageRecord(
                t=t,
                session="cli:direct" if source in ("chat", "one-shot") else f"cron:{i % 7}",
                source=source,
                model=rng.choice(models),
                prompt=rng.randint(500, 60_000),
                completion=rng.randint(10, 2_000),
                cache_read=rng.randint(0, 40_000),
                ms=rng.randint(300, 20_000),
                job=None if source in ("chat", "one-shot") else "j",
            )
        )
        if i % 500 == 0:
            for path in rotated_files(ledger.dir):
                dated.setdefault(
                    path.name, t
                )  # a rotated file was last written when it was rotated
    ledger.close()
    for name, t in dated.items():
        os.utime(ledger.dir / name, (t, t))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--calls", type=int, default=5000, help="metered calls to time (default 5000)"
    )
    parser.add_argument(
        "--records", type=int, default=100_000, help="records in the year (default 100000)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nanobot-bench-usage-") as home:
        os.environ["NANOBOT_HOME"] = home
        metered, bare = overhead(args.calls)
        print(
            f"ledger overhead per call: {metered - bare:.1f} µs (metered {metered:.1f} µs, bare {bare:.1f} µs; "
            f"median of {args.calls:,} calls; target < 1,000 µs)"
        )
        for path in Path(home, "usage").glob("*.jsonl"):
            path.unlink()
        start = time.perf_counter()
        write_year(args.records)
        written = time.perf_counter() - start
        size = sum(p.stat().st_size for p in Path(home, "usage").glob("*.jsonl"))
        files = len(list(Path(home, "usage").glob("*.jsonl")))
        print(
            f"a year of records: {args.records:,} calls, {size / 1e6:.1f} MB in {files} file(s) "
            f"(written in {written:.1f} s, {written / args.records * 1e6:.1f} µs each)"
        )

        from nanobot.usage.report import usage_report

        samples = []
        for _ in range(5):
            start = time.perf_counter()
            periods = usage_report(prices={})
            samples.append(time.perf_counter() - start)
        print(
            f"usage report in process: {statistics.median(samples) * 1000:.0f} ms median of 5 "
            f"({periods[-1].total.calls:,} calls in the last 30 days)"
        )
        env = {**os.environ, "NANOBOT_HOME": home}
        cli = []
        for fmt in (["--json"], []):
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "nanobot", "usage", *fmt],
                env=env,
                capture_output=True,
                text=True,
            )
            cli.append(time.perf_counter() - start)
            if done.returncode != 0:
                print(done.stderr, file=sys.stderr)
                return 1
        print(
            f"`nanobot usage --json`: {cli[0] * 1000:.0f} ms, `nanobot usage`: {cli[1] * 1000:.0f} ms "
            "(whole command, Python start-up included)"
        )
        for path in Path(home, "usage").glob("usage-*.jsonl"):
            os.utime(path)  # every file looks recent: all of them must be read
        start = time.perf_counter()
        usage_report(prices={})
        print(
            f"worst case (every file recently written, {args.records:,} lines scanned): "
            f"{(time.perf_counter() - start) * 1000:.0f} ms in process"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
