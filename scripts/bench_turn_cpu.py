"""CPU of one nanobot turn as the test suite runs it, thousands of times over.

    python scripts/bench_turn_cpu.py [--reps 50] [--mode inproc|fork|both] [--profile PREFIX]

inproc: `open_assistant(load_config(path), "cli:direct")`, one turn against the local fake LLM
server, `aclose()`, in this process (as tests/test_python_api.py and tests/agent do). fork: a child
forked from a process that imported what tests/forkserver.py preloads, running `nanobot agent -m hi`
through runpy as the fork server's children do (tests/cli); its CPU is what wait4 reports for it,
and the share spent after the command returned (the interpreter's exit). cli (only when asked):
`nanobot agent -m hi` in this process through tests/cli_runner.py (the `nanobot_run` fixture).
Each repetition gets a fresh home and config file, as each test does. Prints the mean CPU
milliseconds per turn (user+system) after two warm-up turns; --profile writes cProfile stats of
all repetitions to PREFIX-inproc.prof / PREFIX-fork.prof (read them with `python -m pstats`).
Nothing touches the network or ~/.nanobot.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _home(base: Path, n: int, api_base: str) -> tuple[Path, dict[str, str]]:
    home = base / f"h{n}"
    nanobot_home = home / ".nanobot"
    nanobot_home.mkdir(parents=True)
    config = nanobot_home / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "custom/test-model", "provider": "custom"}},
                "providers": {"custom": {"apiKey": "sk-test-key-123456", "apiBase": api_base}},
            }
        )
    )
    config.chmod(0o600)
    env = {"HOME": str(home), "NANOBOT_HOME": str(nanobot_home), "NO_PROXY": "127.0.0.1,localhost"}
    return config, env


def _set_env(env: dict[str, str]) -> None:
    for scheme in ("HTTP", "HTTPS", "ALL"):
        os.environ.pop(f"{scheme}_PROXY", None)
        os.environ.pop(f"{scheme.lower()}_proxy", None)
    os.environ.update(env)


def _in_process(
    base: Path,
    api_base: str,
    reps: int,
    profile: str | None,
    mode: str,
    turn: Callable[[Path], None],
) -> float:
    """The CPU seconds of `turn(config)` in this process, each run in a fresh home, averaged over
    `reps` after two warm-up runs (profiled with `profile`)."""
    profiler = cProfile.Profile() if profile else None
    spent = []
    for n in range(reps + 2):
        config, env = _home(base / mode, n, api_base)
        _set_env(env)
        start = time.process_time()
        if profiler and n >= 2:
            profiler.enable()
        turn(config)
        if profiler:
            profiler.disable()
        spent.append(time.process_time() - start)
    if profiler and profile:
        profiler.dump_stats(f"{profile}-{mode}.prof")
    return sum(spent[2:]) / reps


def inproc(base: Path, api_base: str, reps: int, profile: str | None) -> float:
    import nanobot

    async def turn(config_path: Path) -> None:
        assistant = nanobot.open_assistant(nanobot.load_config(config_path), "cli:direct")
        try:
            await assistant.conversation.send("hi", emit=lambda event: None)
        finally:
            await assistant.aclose()

    return _in_process(
        base, api_base, reps, profile, "inproc", lambda config: asyncio.run(turn(config))
    )


def cli(base: Path, api_base: str, reps: int, profile: str | None) -> float:
    """`nanobot agent -m hi` run in this process by tests/cli_runner.py (the `nanobot_run` fixture)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from cli_runner import run_cli

    def turn(config: Path) -> None:
        done = run_cli("agent", "-m", "hi")
        if done.returncode != 0:
            raise SystemExit(f"an in-process run exited {done.returncode}: {done.stderr}")

    return _in_process(base, api_base, reps, profile, "cli", turn)


def fork(base: Path, api_base: str, reps: int, profile: str | None) -> float:
    sys.path.insert(0, str(ROOT / "tests"))
    import runpy

    import forkserver

    forkserver._preload(forkserver.PRELOAD)  # as the helper does, gc.freeze() included
    spent: list[float] = []
    exits: list[float] = []  # CPU after the command returned: the interpreter's exit
    stats: list[str] = []
    for n in range(reps + 2):
        config, env = _home(base / "fork", n, api_base)
        workspace = config.parent / "workspace"
        workspace.mkdir()
        pid = os.fork()
        # the child: becomes `python -m nanobot agent -m hi`, as forkserver._become does
        if pid == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            _set_env(env)
            os.chdir(workspace)
            sys.argv = ["-m", "agent", "-m", "hi"]
            profiler = cProfile.Profile() if profile and n >= 2 else None
            if profiler:
                profiler.enable()
            try:
                runpy._run_module_as_main("nanobot")  # type: ignore[attr-defined]
            finally:
                if profiler:
                    profiler.disable()
                    profiler.dump_stats(str(base / f"child{n}.prof"))
                own = resource.getrusage(resource.RUSAGE_SELF)
                (base / f"child{n}.cpu").write_text(str(own.ru_utime + own.ru_stime))
        _, status, usage = os.wait4(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the forked run {n} exited {os.waitstatus_to_exitcode(status)}")
        spent.append(usage.ru_utime + usage.ru_stime)
        exits.append(spent[-1] - float((base / f"child{n}.cpu").read_text()))
        if profile and n >= 2:
            stats.append(str(base / f"child{n}.prof"))
    if profile and stats:
        pstats.Stats(*stats).dump_stats(f"{profile}-fork.prof")
    print(f"fork: of which {sum(exits[2:]) / reps * 1000:.1f} ms after the command returned (exit)")
    return sum(spent[2:]) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--mode", choices=("inproc", "cli", "fork", "both"), default="both")
    parser.add_argument("--profile", help="write cProfile stats to PREFIX-inproc/fork.prof")
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-m", "nanobot.fakellm", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert server.stdout is not None
    api_base = server.stdout.readline().strip() + "/v1"
    load = os.getloadavg()[0]
    # no `with` or `finally` here: a forked child leaves through these frames (its SystemExit)
    base = Path(tempfile.mkdtemp(prefix="bench-turn-"))
    results = {}
    if args.mode in ("fork", "both"):  # first: the fork parent must not have run a turn
        results["fork"] = fork(base, api_base, args.reps, args.profile)
    if args.mode in ("inproc", "both"):
        results["inproc"] = inproc(base, api_base, args.reps, args.profile)
    if args.mode == "cli":
        results["cli"] = cli(base, api_base, args.reps, args.profile)
    shutil.rmtree(base)
    server.terminate()
    server.wait()
    for mode, seconds in results.items():
        print(f"{mode}: {seconds * 1000:.1f} ms CPU per turn ({args.reps} turns, load {load:.2f})")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"this process: {usage.ru_utime + usage.ru_stime:.2f} CPU-s", file=sys.stderr)


if __name__ == "__main__":
    main()
