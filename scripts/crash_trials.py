"""Kill a real `nanobot agent -m` at random moments, many times, and count lost turns.

Runs the engine of tests/session/test_crash_durability.py (same aims, same checks) against local fake LLM
servers, in a throwaway NANOBOT_HOME; nothing touches the network or your ~/.nanobot.

    python scripts/crash_trials.py                 # 200 trials
    python scripts/crash_trials.py -n 60 --seed 7 --chains 3 --workers 3
    python scripts/crash_trials.py -n 1000 --fork   # each trial forked from a helper that imported nanobot

Prints how many trials ran, how many turns were acknowledged (their answer reached stdout) and how
many of those were lost (must be 0), plus every failed check. Exit code 1 if anything failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nanobot.provider_table import scrubbed_env_names

REPO = Path(__file__).resolve().parent.parent


def load_engine():
    spec = importlib.util.spec_from_file_location(
        "crash_engine", REPO / "tests" / "session" / "test_crash_durability.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def quiet_killed_clients() -> None:
    """A killed client resets its idle keep-alive connection; don't print a traceback for each one."""
    import socketserver

    original = socketserver.BaseServer.handle_error

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        original(self, request, client_address)

    socketserver.BaseServer.handle_error = handle_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "-n",
        "--trials",
        type=int,
        default=200,
        help="number of killed-or-raced turns (default 200)",
    )
    parser.add_argument(
        "--chains", type=int, default=4, help="sessions run side by side (default 4)"
    )
    parser.add_argument(
        "--workers", type=int, default=3, help="chains run at the same time (default 3)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="base random seed (default: the test's seed)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary homes for inspection"
    )
    parser.add_argument(
        "--fork",
        action="store_true",
        help="fork each trial's process from a helper that imported nanobot once "
        "(tests/forkserver.py, as the test does): about a fifth of the CPU per trial",
    )
    args = parser.parse_args(argv)

    engine = load_engine()
    quiet_killed_clients()
    seed = engine.BASE_SEED if args.seed is None else args.seed
    chains = max(1, min(args.chains, args.trials))
    per_chain = math.ceil(args.trials / chains)
    root = Path(tempfile.mkdtemp(prefix="nanobot-crash-"))
    # keep the child processes away from the real home and real keys
    for name in [
        *scrubbed_env_names(os.environ),
        *(n for n in os.environ if n.lower().endswith("_proxy")),
    ]:
        os.environ.pop(name, None)
    os.environ.update(
        HOME=str(root), NANOBOT_HOME=str(root / "unused"), NO_PROXY="127.0.0.1,localhost"
    )
    print(
        f"running {chains} x {per_chain} trials, seed {seed}, {args.workers} at a time, in {root}",
        flush=True,
    )
    start = time.monotonic()
    servers = None
    if args.fork:
        sys.path.insert(0, str(REPO / "tests"))
        from forkserver import ForkServers

        servers = ForkServers()
    try:
        stats = engine.run_trials(
            chains,
            per_chain,
            root,
            [sys.executable, "-m", "nanobot"],
            base_seed=seed,
            workers=args.workers,
            start=servers.popen if servers else subprocess.Popen,
        )
    finally:
        if servers is not None:
            servers.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - start
    print(f"trials: {stats.trials}")
    print(f"killed mid-turn: {stats.killed}")
    print(f"acknowledged turns: {stats.acked}")
    print(f"lost acknowledged turns: {stats.lost}")
    print(f"next-turn requests checked: {stats.next_requests_checked}")
    print(f"interrupted tool calls closed in the next request: {stats.interrupted_closed}")
    print(f"torn last lines: {stats.torn_lines}")
    print(
        f"streamed answers fully shown, killed before the closing newline: {stats.streamed_seen_not_acked} "
        f"({stats.streamed_shown_not_saved} not saved)"
    )
    print("aims: " + ", ".join(f"{k}={v}" for k, v in sorted(stats.aims.items())))
    print(f"time: {elapsed:.0f}s")
    if stats.failures:
        print(f"\n{len(stats.failures)} failed checks:")
        for failure in stats.failures:
            print("  " + failure)
    return 1 if stats.failures or stats.lost else 0


if __name__ == "__main__":
    sys.exit(main())
