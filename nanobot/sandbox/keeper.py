"""The Landlock path's child side: what runs between fork and exec.

Landlock confines files (and TCP), but it makes no namespaces, so three things are done here:
- a keeper process stays between nanobot and the command. It is a child subreaper
  (PR_SET_CHILD_SUBREAPER): whatever the command leaves behind (`nohup`, `setsid`, a double
  fork) is re-parented to it, and when the command's shell exits the keeper kills all of
  them before it exits itself. That is the "nothing outlives the command" a PID namespace
  gives bubblewrap;
- where we may (root), a private mount namespace makes `memory/` read-only (Landlock can
  grant a folder but cannot take a subfolder back) and a private network namespace takes
  away every socket family, UDP included;
- the command itself drops every capability (root keeps none), sets no_new_privs, takes its
  rlimits and enters the Landlock domain.

Everything here runs in a freshly forked, single-threaded child: only syscalls, no imports.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from nanobot.sandbox import landlock
from nanobot.sandbox.limits import apply_rlimits
from nanobot.sandbox.policy import Limits

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS, _CLONE_NEWNET = 0x00020000, 0x40000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER = 1, 24, 36
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def drop_capabilities() -> None:
    """Empty the bounding, ambient and current sets, so even uid 0 execs with no capabilities."""
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last cap
            break
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _private_mounts(read_only: tuple[Path, ...], *, new_net: bool) -> None:
    _check(_libc.unshare(_CLONE_NEWNS | (_CLONE_NEWNET if new_net else 0)), "unshare")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount private")
    for path in read_only:
        p = os.fsencode(path)
        _check(_libc.mount(p, p, None, _MS_BIND | _MS_REC, None), f"bind {path}")
        _check(_libc.mount(None, p, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None), f"read-only {path}")


def _children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _kill_descendants() -> None:
    """SIGKILL every child until none is left; orphans of killed ones land here and go next round."""
    while True:
        kids = _children()
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG if kids else 0)[0] > 0:
                pass
        except ChildProcessError:
            return


def _keep(command_pid: int) -> None:
    """The keeper: wait for the command, kill what it left, exit with the command's status."""
    os.closerange(0, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 4096)
    signal.signal(signal.SIGTERM, lambda *_: os.kill(command_pid, signal.SIGKILL))
    status = 0
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == command_pid:
            status = st
            break
    _kill_descendants()
    if os.WIFSIGNALED(status):
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


@dataclass
class LandlockLaunch:
    """What the child needs, prepared in the parent (fds opened, paths computed)."""

    ruleset_fd: int
    limits: Limits
    cgroup_fd: int  # -1 when there is no cgroup
    private_mounts: bool  # root: read-only memory/ and (when no network) a private network namespace
    new_net: bool
    read_only: tuple[Path, ...]
    nproc: bool

    def __call__(self) -> None:  # preexec_fn
        if self.cgroup_fd >= 0:
            os.write(self.cgroup_fd, b"0")
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if self.private_mounts:
            _private_mounts(self.read_only, new_net=self.new_net)
        _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
        pid = os.fork()
        if pid:
            _keep(pid)  # never returns
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        apply_rlimits(self.limits, nproc=self.nproc)
        if os.geteuid() == 0:
            drop_capabilities()
        landlock.restrict_self(self.ruleset_fd)
