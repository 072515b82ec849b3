"""Confinement overhead per exec call: median of N runs of `true` under each mechanism.

Runs the real ExecTool in a throwaway home and workspace (nothing in ~/.nanobot is touched).
"none" is the baseline (the same tool, no sandbox, approval skipped); the overhead of a
mechanism is its median minus the baseline's. Target: 15 ms or less.

    python scripts/bench_confinement.py [--runs 100] [--command true] [--corpus]

--corpus also times the benign corpus (tests/security/benign_corpus.py, ~190 everyday commands)
under each mechanism, straight through the exec tool, with the default policy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path


async def _measure(tool, command: str, runs: int) -> tuple[float, float]:
    """(median wall ms, mean CPU ms) per call; CPU counts nanobot and every child process.

    CPU time is what the call costs whatever else the machine is doing; on a busy machine the
    wall time is mostly waiting for a core.
    """
    await tool.run(command=command)  # warm-up: first spawn, probe caches
    times = []
    cpu0 = os.times()
    for _ in range(runs):
        t0 = time.perf_counter()
        await tool.run(command=command)
        times.append((time.perf_counter() - t0) * 1000)
    cpu1 = os.times()
    cpu = sum(
        getattr(cpu1, f) - getattr(cpu0, f)
        for f in ("user", "system", "children_user", "children_system")
    )
    return statistics.median(times), cpu * 1000 / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--command", default="true")
    parser.add_argument("--corpus", action="store_true", help="also time the benign corpus")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nanobot-bench-") as tmp:
        home = Path(tmp) / "home"
        ws = Path(tmp) / "workspace"
        home.mkdir()
        ws.mkdir()
        os.environ["HOME"] = str(home)
        os.environ["NANOBOT_HOME"] = str(home / ".nanobot")
        from nanobot.sandbox import choose
        from nanobot.tools.base import ToolContext
        from nanobot.tools.exec_rules import ExecRules
        from nanobot.tools.shell import ExecTool

        results = {}
        for mode in ("none", "bwrap", "landlock"):
            conf = choose(mode)
            if mode != "none" and conf.mechanism != mode:
                print(f"{mode:9} unavailable: {conf.detail}")
                continue
            ctx = ToolContext(
                workspace=ws,
                confinement=conf,
                exec_rules=ExecRules(network=False, unconfined_ok=True),
            )
            results[mode] = asyncio.run(_measure(ExecTool(ctx), args.command, args.runs))
        base, base_cpu = results.get("none", (0.0, 0.0))
        load = os.getloadavg()
        print(
            f"exec {args.command!r}, {args.runs} runs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
            f"{os.cpu_count()} cores"
        )
        for mode, (ms, cpu) in results.items():
            extra = (
                ""
                if mode == "none"
                else (
                    f"  overhead {ms - base:+.1f} ms wall, {cpu - base_cpu:+.1f} ms CPU "
                    "(target <= 15 ms)"
                )
            )
            print(f"{mode:9} median {ms:6.1f} ms wall, {cpu:5.1f} ms CPU per call{extra}")
        if args.corpus:
            for mode in results:
                _time_corpus(mode, Path(tmp) / f"corpus-{mode}")


def _time_corpus(mode: str, ws: Path) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "security"))
    from benign_corpus import COMMANDS, prepare, runnable
    from nanobot.errors import ToolError
    from nanobot.sandbox import choose
    from nanobot.tools.base import ToolContext
    from nanobot.tools.exec_rules import ExecRules
    from nanobot.tools.shell import ExecTool

    ws.mkdir()
    prepare(ws)
    commands = runnable(COMMANDS)
    tool = ExecTool(
        ToolContext(
            workspace=ws, confinement=choose(mode), exec_rules=ExecRules(unconfined_ok=True)
        )
    )

    async def run_all() -> int:
        failed = 0
        for command in commands:
            try:
                out = await tool.run(command=command)
                failed += not out.rstrip().endswith("[exit code: 0]")
            except ToolError:
                failed += 1
        return failed

    t0 = time.perf_counter()
    failed = asyncio.run(run_all())
    load = os.getloadavg()[0]
    print(
        f"benign corpus under {mode:9}: {len(commands)} commands in {time.perf_counter() - t0:5.1f} s "
        f"({failed} failed), load {load:.2f}"
    )


if __name__ == "__main__":
    main()
