"""Host processes as /proc shows them: the one scanner tests use to find what a command left running.

Confined commands live in their own PID namespace, so a `$!` they report is not a host pid; tests
find their processes by a marker argument instead (`sleep 6061`).
"""

from __future__ import annotations

import os
from pathlib import Path


def _state(pid: int | str) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def parent(pid: int | str) -> int | None:
    """The parent pid /proc gives, or None when the process is gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a slow init to reap it."""
    return _state(pid) not in (None, "Z", "X")


def process_count() -> int:
    """How many processes the host has (a fork bomb's mark), less those of the other pytest-xdist
    workers of this run: their tests start processes of their own meanwhile (the crash trials
    start dozens), which are not this test's doing. Everything else on the host counts, including
    whatever left this process's tree."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            parents[int(entry)] = parent(entry)
    others = _sibling_workers(parents)
    count = 0
    for pid in parents:
        seen, up = 0, pid
        while up is not None and up not in others and seen < 64:
            up, seen = parents.get(up), seen + 1
        count += up not in others
    return count


def _sibling_workers(parents: dict[int, int | None]) -> set[int]:
    """The other xdist workers of this run (children of our controller), or none outside xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return set()
    controller = os.getppid()
    return {pid for pid, ppid in parents.items() if ppid == controller and pid != os.getpid()}


def host_pids(marker: str, *, command: str | None = None) -> list[int]:
    """Host pids of live processes with `marker` as an argument; with `command`, only `command marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        wanted = args[:2] == [command.encode(), marker.encode()] if command else marker.encode() in args
        if wanted and alive(int(entry)):
            found.append(int(entry))
    return found


def host_pids_naming(text: str) -> list[int]:
    """Host pids of live processes with `text` anywhere in their command line (a shell running a
    script that contains it, say)."""
    found = []
    needle = text.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline and alive(int(entry)):
            found.append(int(entry))
    return found


def named(comm: str) -> list[int]:
    """Host pids whose process name (/proc's comm) is `comm`, zombies included: a zombie keeps its
    name but has no command line."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat[stat.find("(") + 1:stat.rfind(")")] == comm:
            found.append(int(entry))
    return found
