"""What finding the workspace's git repositories (nanobot/policy/repos.py) costs exec per command.

Builds a throwaway workspace of --files files (default 50,000) in folders of 50, with a git
repository at the top, one nested and one deeper, plus a node_modules tree (skipped), then times:
- the first walk of a session (every folder listed),
- a later walk (folders unchanged since: one stat each),
- what exec adds per command: the snapshot before, the read-only paths, the comparison after
  (three walks, and reading each repository's config).
Prints wall and CPU milliseconds (median of --runs) and the load average, which on a shared
machine inflates wall time.

    python scripts/bench_repos.py [--files 50000] [--runs 20]
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _workspace(base: Path, files: int) -> Path:
    ws = base / "ws"
    per_folder = 50
    for n in range(files):
        folder = ws / f"pkg{n // 1000}" / f"mod{n // per_folder % 20}"
        if n % per_folder == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{n}.txt").write_text("x\n")
    for n in range(2000):
        folder = ws / "node_modules" / f"dep{n // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"index{n}.js").write_text("x\n")
    if shutil.which("git"):
        for repo in (ws, ws / "pkg0" / "vendored", ws / "pkg1" / "mod3" / "deeper"):
            repo.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    old = (
        time.time() - 3600
    )  # an hour-old workspace: its folders' listings may be kept between walks
    for dirpath, _, _ in os.walk(ws):
        os.utime(dirpath, (old, old))
    return ws


def _time(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(runs):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - w) * 1000)
        cpus.append((time.process_time() - c) * 1000)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    from nanobot.policy import repos
    from nanobot.policy.protected import exec_read_only
    from nanobot.policy.watch import changes_since, take_snapshot

    with tempfile.TemporaryDirectory() as tmp:
        ws = _workspace(Path(tmp), args.files)
        entries = sum(len(d) + len(f) for _, d, f in os.walk(ws))
        repos._listings.clear()
        cold_wall, cold_cpu = _time(lambda: repos.find_repos(ws), 1)
        found = repos.find_repos(ws)
        warm_wall, warm_cpu = _time(lambda: repos.find_repos(ws), args.runs)

        def per_command() -> None:  # as exec does it: one walk before the command, one after
            found = repos.find_repos(ws)
            before = take_snapshot(ws, contents=False, repos=found)
            exec_read_only(ws, found)
            changes_since(ws, before, contents=False)

        cmd_wall, cmd_cpu = _time(per_command, args.runs)
        print(
            f"workspace: {args.files:,} files ({entries:,} entries in all, node_modules with 2,000 files skipped)"
        )
        print(
            f"repositories found: {', '.join(found.git_dirs)}; complete: {found.complete}; "
            f"entries looked at: {found.seen:,} (cap {repos.MAX_ENTRIES:,}, depth {repos.MAX_DEPTH})"
        )
        print(f"first walk of a session:  {cold_wall:7.1f} ms wall  {cold_cpu:7.1f} ms CPU")
        print(f"later walk (median):      {warm_wall:7.1f} ms wall  {warm_cpu:7.1f} ms CPU")
        print(
            f"exec's added work per command (snapshot + read-only paths + comparison, median): "
            f"{cmd_wall:.1f} ms wall  {cmd_cpu:.1f} ms CPU"
        )
        print(
            f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores"
        )


if __name__ == "__main__":
    main()
