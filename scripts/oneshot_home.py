"""Throwaway homes on the local fake LLM server, and the one-shot commands to time in them.

    python scripts/oneshot_home.py [--venv VENV ...] [--peer VENV ...] [--seconds 600]

For this checkout's nanobot, each --venv (this project installed elsewhere, e.g. an older commit
with `pip install .`) and each --peer (HKUDS's nanobot, e.g. `pip install nanobot-ai==0.1.4.post6`),
it makes a home with the same config and a 10-message session, all pointed at fake servers, and
prints one line per nanobot, in that order: an `env -i ...` command that runs
`agent -m hi` there, each time in the home as it was after one warm-up run. Time those lines
with any whole-process timer (`/usr/bin/time -v`, or runs alternated pair by pair); copying the
home back costs a few milliseconds, the same for each; the server stays up until --seconds pass or Ctrl-C. Nothing touches the
network or ~/.nanobot. This prints commands; it is not a test.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_workload import BenchHome, nanobot_argv, write_session  # noqa: E402


def command(argv: list[str], home: BenchHome) -> str:
    """A shell command that puts the home back as it was after one warm-up run (so the session does
    not grow from run to run) and then runs `agent -m hi` there with a clean environment."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home.root),
        "NANOBOT_HOME": str(home.home),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    run = [
        "env",
        "-i",
        *(f"{k}={v}" for k, v in env.items()),
        *argv,
        "agent",
        "-m",
        "hi",
        "--no-markdown",
    ]
    subprocess.run(run, capture_output=True, timeout=120)  # the warm-up: first-run setup, bytecode
    snapshot = home.root / "snapshot"
    shutil.copytree(home.home, snapshot, symlinks=True)
    reset = f"rm -rf {shlex.quote(str(home.home))} && cp -a {shlex.quote(str(snapshot))} {shlex.quote(str(home.home))}"
    return shlex.join(["sh", "-c", f"{reset} && exec {shlex.join(run)}"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--venv", action="append", default=[], help="a venv with this project installed"
    )
    parser.add_argument(
        "--peer", action="append", default=[], metavar="VENV", help="a venv with nanobot-ai"
    )
    parser.add_argument("--seconds", type=float, default=600.0, help="how long the server stays up")
    args = parser.parse_args()
    homes: list[BenchHome] = []
    try:
        ours = BenchHome()
        homes.append(ours)
        write_session(ours.session_path(), "cli:direct", 10, tail=40)
        print(command(nanobot_argv(), ours), flush=True)
        for venv in args.venv:
            home = BenchHome()
            homes.append(home)
            write_session(home.session_path(), "cli:direct", 10, tail=40)
            print(command([str(Path(venv) / "bin" / "nanobot")], home), flush=True)
        for venv in args.peer:
            home = BenchHome()
            homes.append(home)
            write_session(home.session_path(), "cli:direct", 10, tail=40)
            theirs = (
                home.workspace / "sessions" / "cli_direct.jsonl"
            )  # where nanobot 0.1.x keeps it
            theirs.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(home.session_path(), theirs)
            print(command([str(Path(venv) / "bin" / "nanobot")], home), flush=True)
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        for home in homes:
            home.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
