"""What the after-command check of protected paths (nanobot/policy/watch.py) adds to every exec call.

Builds a throwaway workspace like a real one (the prompt-file templates, the bundled skills copied
into skills/, a git repository with a few hundred commits' worth of files, a .vscode folder) and
times one snapshot before a command plus one comparison after it, the work exec adds per call.

    python scripts/bench_protected.py [--runs 200] [--skills-copies 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _workspace(base: Path, copies: int) -> Path:
    ws = base / "ws"
    shutil.copytree(ROOT / "workspace", ws)
    for i in range(copies):
        shutil.copytree(ROOT / "skills", ws / "skills" / f"set{i}")
    (ws / ".vscode").mkdir()
    (ws / ".vscode" / "settings.json").write_text("{}\n")
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
        for n in range(300):
            (ws / f"file{n}.txt").write_text(f"{n}\n")
        subprocess.run(["git", "add", "-A"], cwd=ws, check=True)
        subprocess.run(
            ["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "x"],
            cwd=ws,
            check=True,
        )
    old = (
        time.time() - 3600
    )  # an hour-old workspace, as real ones are: the repository search may keep its listings
    for folder in [ws, *(p for p in ws.rglob("*") if p.is_dir() and not p.is_symlink())]:
        os.utime(folder, (old, old))
    return ws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--skills-copies", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NANOBOT_HOME"] = str(Path(tmp) / "home")
        from nanobot.policy.watch import changes_since, take_snapshot

        ws = _workspace(Path(tmp), args.skills_copies)
        print(
            f"protected paths watched: {len(take_snapshot(ws))} (skills files: "
            f"{sum(1 for p in (ws / 'skills').rglob('*') if p.is_file())})"
        )
        for contents, where in (
            (False, "read-only in the sandbox (bwrap, Landlock with mounts)"),
            (True, "contents kept (Landlock without mounts, no sandbox)"),
        ):
            times = []
            for _ in range(args.runs):
                start = time.process_time()
                before = take_snapshot(ws, contents=contents)
                assert changes_since(ws, before, contents=contents) == []
                times.append((time.process_time() - start) * 1000)
            print(
                f"snapshot + compare per exec call (CPU), {where}: median {statistics.median(times):.2f} ms, "
                f"p95 {sorted(times)[int(len(times) * 0.95) - 1]:.2f} ms over {args.runs} runs"
            )


if __name__ == "__main__":
    main()
