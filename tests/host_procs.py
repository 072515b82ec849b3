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


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_table() -> dict[int, tuple[int | None, str]]:
    """Every process now: pid -> (parent pid, start time in ticks since boot). A pid with its start
    time names one process even after the pid is reused."""
    table: dict[int, tuple[int | None, str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat_fields(entry)) is not None:
            table[int(entry)] = (int(fields[1]), fields[19])
    return table


def strays_since(before: dict[int, tuple[int | None, str]]) -> list[int]:
    """Processes born since `before` (a `process_table()`) that are this test's doing or nobody's:
    still in this process's tree, or orphans reparented to init or to one of our ancestors (where an
    escaped fork bomb lands). Not counted: the trees of the other xdist workers and of any process
    that was already running elsewhere on the host (a pip install beside the suite, the fork
    servers)."""
    now = process_table()
    parents = {pid: ppid for pid, (ppid, _) in now.items()}
    others = _sibling_workers(parents)
    ours = {1, os.getpid()}
    up: int | None = os.getppid()
    while up and up not in ours:
        ours.add(up)
        up = parents.get(up)
    strays = []
    for pid, (_, started) in now.items():
        if before.get(pid, (None, None))[1] == started:
            continue  # it was there before
        walk: int | None = pid
        for _ in range(64):
            walk = parents.get(walk) if walk is not None else None
            if walk is None or walk in others:
                break
            if walk in ours:
                strays.append(pid)
                break
            if before.get(walk, (None, None))[1] == now[walk][1]:
                break  # under a process that was already running elsewhere
    return strays


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
