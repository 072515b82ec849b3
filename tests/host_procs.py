"""Host processes as /proc shows them: the one scanner tests use to find what a command left running.

Confined commands live in their own PID namespace, so a `$!` they report is not a host pid; tests
find their processes by a marker argument instead (`sleep 6061`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
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


def host_listing() -> str:
    """Every process as `pid ppid command`, for a failure message that says what was counted."""
    rows = []
    for pid, cmdline in sorted(_each("cmdline")):
        command = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()[:160]
        rows.append(f"{pid:>7} {parent(pid) or 0:>7} {command or '[kernel]'}")
    return "\n".join(row for row in rows if not row.endswith("[kernel]"))


def _sibling_workers(parents: dict[int, int | None]) -> set[int]:
    """The other xdist workers of this run (children of our controller), or none outside xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return set()
    controller = os.getppid()
    return {pid for pid, ppid in parents.items() if ppid == controller and pid != os.getpid()}


def _each(name: str) -> Iterator[tuple[int, bytes]]:
    """(pid, the bytes of /proc/<pid>/<name>) for every process still there when it is read."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/{name}", "rb", buffering=0) as file:
                    data = file.read()
            except OSError:
                continue
            yield int(entry), data


def host_pids(marker: str, *, command: str | None = None) -> list[int]:
    """Host pids of live processes with `marker` as an argument; with `command`, only `command marker`."""
    want = [command.encode(), marker.encode()] if command else None
    found = []
    for pid, cmdline in _each("cmdline"):
        args = cmdline.split(b"\0")
        if (args[:2] == want if want else marker.encode() in args) and alive(pid):
            found.append(pid)
    return found


def host_pids_naming(text: str) -> list[int]:
    """Host pids of live processes with `text` anywhere in their command line (a shell running a
    script that contains it, say)."""
    needle = text.encode()
    return [pid for pid, cmdline in _each("cmdline") if needle in cmdline and alive(pid)]


def named(comm: str) -> list[int]:
    """Host pids whose process name (/proc's comm) is `comm`, zombies included: a zombie keeps its
    name but has no command line."""
    return [
        pid
        for pid, stat in _each("stat")
        if stat[stat.find(b"(") + 1 : stat.rfind(b")")] == comm.encode()
    ]
