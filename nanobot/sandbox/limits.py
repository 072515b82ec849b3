"""Resource limits for a confined command: rlimits, and a pids cgroup where we may make one.

Why a cgroup: RLIMIT_NPROC is not checked for root (nor for CAP_SYS_RESOURCE), and it
counts every process of the user, not of the command. A pids cgroup counts exactly the
command's tree, holds for root, cannot be left without write access to the cgroup file
system (the sandbox shows it read-only), and lets us kill the whole tree at the end.
Where no cgroup can be made (no controller, no permission), RLIMIT_NPROC still bounds a
non-root user; `describe` says which one holds.
"""

from __future__ import annotations

import itertools
import os
import resource
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from nanobot.sandbox.policy import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


def stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/<pid>/stat's fields after the command name, the state first (Z: a zombie, X: dead);
    None when the process is gone. (The name may hold spaces and parentheses: cut at the last ")".)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def is_running(fields: list[bytes] | None) -> bool:
    """From stat_fields: there, and neither a zombie nor dead."""
    return fields is not None and fields[:1] not in ([b"Z"], [b"X"])


def apply_rlimits(limits: Limits, *, nproc: bool) -> None:
    """In the child, before exec: file size, data size, no core dumps (and processes if asked)."""
    pairs = [
        (resource.RLIMIT_FSIZE, limits.file_size),
        (resource.RLIMIT_DATA, limits.memory),
        (resource.RLIMIT_CORE, 0),
    ]
    if nproc:
        pairs.append((resource.RLIMIT_NPROC, limits.processes))
    for which, value in pairs:
        try:
            soft, hard = resource.getrlimit(which)
            cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (cap, cap))
        except (ValueError, OSError):
            pass


def nproc_counts_command_only() -> bool:
    """RLIMIT_NPROC bounds the command only for a non-root user in a fresh user namespace."""
    return os.geteuid() != 0


def _own_path(controller: str) -> tuple[Path, str] | None:
    """Where our process sits for `controller`: (mount dir, path), cgroup v1 or v2."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            mount = CGROUP_ROOT / controller
            if mount.is_dir():
                return mount, path.lstrip("/")
    for line in lines:
        if line.startswith("0::"):
            path = line[3:].lstrip("/")
            base = CGROUP_ROOT
            if (base / "cgroup.controllers").exists():
                return base, path
    return None


@dataclass
class PidsCgroup:
    """One command's pids cgroup: enter it from the child, kill everything in it, remove it."""

    path: Path
    limit: int  # its pids.max: tasks alive at once

    @classmethod
    def create(cls, limits: Limits) -> PidsCgroup | None:
        where = _own_path("pids")
        if where is None:
            return None
        mount, own = where
        parent = mount / own if own else mount
        _remove_stale(parent)
        try:
            if mount == CGROUP_ROOT:  # v2: the controller must be enabled for our children
                if "pids" not in (parent / "cgroup.subtree_control").read_text().split():
                    return None
            path = _new_folder(parent)
        except OSError:
            return None
        cg = cls(path, limits.processes)
        try:
            (path / "pids.max").write_text(str(limits.processes))
            if mount == CGROUP_ROOT and (path / "memory.max").exists():
                (path / "memory.max").write_text(str(limits.memory))
        except OSError:
            cg.remove()
            return None
        return cg

    def open_procs(self) -> int:
        """An fd on cgroup.procs, opened before the fork; the child writes "0" to it to enter."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def refused(self) -> int:
        """How many forks the limit has refused so far (pids.events' "max" count; 0 if unreadable)."""
        try:
            words = (self.path / "pids.events").read_text().split()
            return int(words[words.index("max") + 1])
        except (OSError, ValueError, IndexError):
            return 0

    def kill_all(self, within: float = 5.0, *, spare: int | None = None) -> bool:
        """SIGKILL every process in the cgroup until it is empty; True when it emptied.

        `spare`: one process left alive (the Landlock keeper, a subreaper): it reaps what dies
        here, where otherwise the zombies would wait for PID 1, which in a container may be late
        or never."""
        kill_file = self.path / "cgroup.kill"
        deadline = time.monotonic() + within
        while True:
            pids = [pid for pid in self.pids() if pid != spare]
            if not pids:
                return True
            if spare is None and kill_file.exists():
                try:
                    kill_file.write_text("1")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)

    def remove(self, within: float = 2.0) -> None:
        # rmdir fails with EBUSY until the kernel has released the last task, usually a few ms
        # after it was reaped: poll often at first (a fixed 10 ms sleep cost ~5 ms per command)
        deadline = time.monotonic() + within
        pause = 0.0005
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(pause)
                pause = min(pause * 2, 0.01)


def _new_folder(parent: Path) -> Path:
    """A new `nanobot-exec-<pid>-<n>` folder under `parent`. A name can be taken already: by a
    folder that a nanobot killed mid-command left, whose pid this process now has."""
    for _ in range(64):
        path = parent / f"nanobot-exec-{os.getpid()}-{next(_counter)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"every nanobot-exec-{os.getpid()}-* name tried under {parent} is taken")


_swept: set[Path] = set()


def _remove_stale(parent: Path) -> None:
    """Once per process: remove the cgroups left by nanobot processes that died mid-command, and
    kill what is still inside one. Nothing should be: a command dies with its nanobot. But bwrap
    has a known race (containers/bubblewrap#633): killed during its setup, it can leave the
    sandbox's init waiting forever, in its command's cgroup."""
    for path in left_by_dead_processes(parent):
        stale = PidsCgroup(path, 0)
        stale.kill_all(within=1.0)
        stale.remove(within=0.5)


def left_by_dead_processes(parent: Path) -> list[Path]:
    """`parent`'s `nanobot-exec-<pid>-...` entries whose process is gone, once per process and
    folder (the later calls return nothing): what a nanobot killed mid-command left behind."""
    if parent in _swept:
        return []
    _swept.add(parent)
    try:
        entries = list(parent.glob("nanobot-exec-*"))
    except OSError:
        return []
    stale = []
    for path in entries:
        try:
            pid = int(path.name.split("-")[2])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            stale.append(path)
    return stale


def cgroup_available(limits: Limits) -> bool:
    cg = PidsCgroup.create(limits)
    if cg is None:
        return False
    cg.remove()
    return True
