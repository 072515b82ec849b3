"""How long `nanobot agent -m` keeps the user after its answer when the summariser misbehaves.

A throwaway home (never the real ~/.nanobot) holds a session over its 8,192-token window, so
each run consolidates; the fake server answers the turn at once and the consolidation call:

  hangs     never answers (the connection stays open)
  down      503 every time (the provider's retries, then the outage)
  refuses   answers without calling save_memory (a model that gets it wrong)

with the shipped defaults (consolidationTimeoutSeconds 90, consolidationExitWaitSeconds 20).
Printed per case: seconds from the answer on stdout to the process exit, the consolidation calls
the server received, and what HISTORY.md and the session pointer show afterwards.

    python scripts/bench_compaction.py [--runs N] [--case hangs|down|refuses]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from nanobot.fakellm import Reply  # noqa: E402

from bench_workload import BenchHome, is_consolidation, nanobot_argv, prose  # noqa: E402

CASES = {
    "hangs": lambda: Reply.error(500, delay=3600),
    "down": lambda: Reply.error(503, message="service unavailable"),
    "refuses": lambda: Reply.text("Here is a summary: we talked about many things."),
}


def _session(home: BenchHome, turns: int = 40) -> None:
    import random

    rng = random.Random(4)
    path = home.session_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        {
            "_type": "metadata",
            "key": "cli:direct",
            "created_at": "2026-01-05T10:00:00",
            "updated_at": "2026-01-05T10:00:00",
            "metadata": {},
            "last_consolidated": 0,
        }
    ]
    for i in range(turns):
        lines += [
            {
                "role": "user",
                "content": f"turn {i}: " + prose(rng, 300),
                "timestamp": "2026-01-05T10:00:00",
            },
            {
                "role": "assistant",
                "content": f"answer {i}: " + prose(rng, 300),
                "timestamp": "2026-01-05T10:00:00",
            },
        ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _pointer(path: Path) -> int:
    meta = [
        r for r in map(json.loads, path.read_text().splitlines()) if r.get("_type") == "metadata"
    ]
    return int(meta[-1]["last_consolidated"])


def run_case(case: str) -> dict:
    with BenchHome(context_window=8192) as home:
        _session(home)
        answer = "the answer is here"

        def respond(rec):
            return CASES[case]() if is_consolidation(rec) else Reply.text(answer)

        home.server.responder = respond
        started = time.monotonic()
        proc = subprocess.Popen(
            [*nanobot_argv(), "agent", "-m", "still there?"],
            env=home.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the answer (stdout is a pipe: printed whole, then flushed)
        answered = time.monotonic()
        proc.wait(timeout=600)
        ended = time.monotonic()
        history = home.workspace / "memory" / "HISTORY.md"
        text = history.read_text() if history.exists() else ""
        return {
            "answered": answer in line,
            "answer_s": answered - started,
            "exit_after_answer_s": ended - answered,
            "calls": sum(1 for r in home.server.requests if is_consolidation(r)),
            "raw": text.count("RAW archive"),
            "pointer": _pointer(home.session_path()),
            "code": proc.returncode,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    args = parser.parse_args(argv)
    print(
        "command: python scripts/bench_compaction.py "
        + " ".join(argv if argv is not None else sys.argv[1:])
    )
    print(
        f"{'case':8} {'exit after answer (s): median / max':36} {'consolidation calls':20} "
        f"{'RAW entries':12} {'pointer after':13}"
    )
    for case in args.case or sorted(CASES):
        results = [run_case(case) for _ in range(args.runs)]
        assert all(r["answered"] and r["code"] == 0 for r in results), results
        exits = [r["exit_after_answer_s"] for r in results]
        print(
            f"{case:8} {statistics.median(exits):>8.1f} / {max(exits):<25.1f} "
            f"{'/'.join(str(r['calls']) for r in results):20} {'/'.join(str(r['raw']) for r in results):12} "
            f"{'/'.join(str(r['pointer']) for r in results):13}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
