"""The Landlock path's child side: what runs between fork and exec.

Landlock confines files (and TCP), but it makes no namespaces, so three things are done here:
- a keeper process stays between nanobot and the command. It is a child subreaper
  (PR_SET_CHILD_SUBREAPER): whatever the command leaves behind (`nohup`, `setsid`, a double
  fork) is re-parented to it, and when the command's shell exits the keeper kills all of
  them before it exits itself. That is the "nothing outlives the command" a PID namespace
  gives bubblewrap. When nanobot dies, even by SIGKILL, the kernel sends the keeper SIGTERM
  (PR_SET_PDEATHSIG), and it does the same;
- where we may (root, or an ordinary user allowed user namespaces; Linux 5.12+), a private mount namespace makes every mount read-only
  but the workspace and the private tmp, and `memory/` read-only again inside the workspace
  (Landlock cannot take a subfolder back, nor does it cover chmod, chown or utime), and a
  private network namespace takes away every socket family, UDP included;
- a command allowed the network, where the private namespaces work, gets a network namespace of its
  own with only loopback up and nanobot's egress proxy listening in it (`egress_listener`): the
  listening socket is made there and handed to nanobot, which serves it from the host's side;
- the command itself drops every capability (root keeps none), sets no_new_privs, takes its
  rlimits, enters the Landlock domain and loads the seccomp filter (no setuid/setgid bits).

Everything here runs in a freshly forked, single-threaded child: only syscalls, no imports.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from nanobot.sandbox import landlock, seccomp
from nanobot.sandbox.limits import apply_rlimits
from nanobot.sandbox.policy import Limits

_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS, _CLONE_NEWNET, _CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_CHILD_SUBREAPER = 1, 24, 36
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def drop_capabilities() -> None:
    """Empty the bounding, ambient and current sets, so even uid 0 execs with no capabilities."""
    for cap in range(64):
        if (
            _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22
        ):  # EINVAL: past the last cap
            break
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 1
_MOUNT_ATTR_NOSUID = 2
_libc.syscall.restype = ctypes.c_long


def _set_read_only(path: bytes, *, read_only: bool, recursive: bool) -> None:
    """Read-only or writable; nosuid either way (a setuid bit means nothing inside the sandbox)."""
    attr = _MountAttr(
        (_MOUNT_ATTR_RDONLY if read_only else 0) | _MOUNT_ATTR_NOSUID,
        0 if read_only else _MOUNT_ATTR_RDONLY,
        0,
        0,
    )
    rc = _libc.syscall(
        _SYS_MOUNT_SETATTR,
        ctypes.c_int(_AT_FDCWD),
        ctypes.c_char_p(path),
        ctypes.c_uint(_AT_RECURSIVE if recursive else 0),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    _check(0 if rc == 0 else -1, f"mount_setattr {path.decode(errors='replace')}")


def mount_setattr_available() -> bool:
    """mount_setattr (Linux 5.12+): an invalid call fails with EBADF/EINVAL, not ENOSYS, where it exists."""
    attr = _MountAttr(0, 0, 0, 0)
    rc = _libc.syscall(
        _SYS_MOUNT_SETATTR,
        ctypes.c_int(-1),
        ctypes.c_char_p(b""),
        ctypes.c_uint(0),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    return rc == 0 or ctypes.get_errno() != 38


def enter_user_namespace() -> None:
    """A user namespace mapping our own uid and gid: lets an ordinary user make mount and network
    namespaces. The uid stays the same, so the workspace stays ours and nothing else becomes so."""
    uid, gid = os.getuid(), os.getgid()
    _check(_libc.unshare(_CLONE_NEWUSER), "unshare user namespace")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def user_namespace_mounts_work() -> bool:
    """Whether an ordinary user may make the private mounts here (some systems forbid user namespaces)."""
    pid = os.fork()
    if pid == 0:
        try:
            enter_user_namespace()
            _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET), "unshare")
            _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount private")
            _set_read_only(b"/", read_only=True, recursive=True)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _bind(source: bytes, target: bytes) -> None:
    _check(
        _libc.mount(source, target, None, _MS_BIND | _MS_REC, None),
        f"bind {target.decode(errors='replace')}",
    )


def _private_mounts(
    workspace: Path,
    tmp: Path,
    read_only: tuple[Path, ...],
    shown: tuple[Path, ...],
    *,
    new_net: bool,
) -> None:
    """Every mount read-only but the workspace and the private tmp (shown at /tmp), and
    `read_only` inside the workspace again: Landlock does not cover chmod, chown or utime,
    nor can it take back a subfolder; a read-only mount does both. Folders of `shown` (and the
    workspace) that lie under /tmp are bound again on top of the private tmp."""
    _check(_libc.unshare(_CLONE_NEWNS | (_CLONE_NEWNET if new_net else 0)), "unshare")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount private")
    ws = os.fsencode(workspace)
    for path in (workspace, *read_only):
        _bind(os.fsencode(path), os.fsencode(path))
    under_tmp = [p for p in (workspace, *shown) if p.is_relative_to("/tmp") and p.is_dir()]
    fds = [
        os.open(p, os.O_PATH | os.O_CLOEXEC) for p in under_tmp
    ]  # the workspace fd: its bind, memory/ included
    _bind(os.fsencode(tmp), b"/tmp")
    for path, fd in zip(
        under_tmp, fds
    ):  # the private tmp covered them: show them again at their paths
        os.makedirs(path, exist_ok=True)
        _bind(f"/proc/self/fd/{fd}".encode(), os.fsencode(path))
        os.close(fd)
    _set_read_only(b"/", read_only=True, recursive=True)
    for folder in (ws, b"/tmp"):  # not recursive: memory/ (a mount beneath) stays read-only
        _set_read_only(folder, read_only=False, recursive=False)
    os.chdir(
        os.getcwd()
    )  # the current folder was entered before the binds: enter it again, on them


EGRESS_PORT = 3128  # where nanobot's egress proxy listens inside a command's own network namespace
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def egress_listener(channel_fd: int, *, new_namespace: bool) -> None:
    """In a forked child: (in a new network namespace when `new_namespace`) bring loopback up, listen
    on 127.0.0.1:EGRESS_PORT and send that socket to nanobot over the AF_UNIX socket `channel_fd`.
    The command then reaches nothing but this namespace's loopback, where the proxy answers."""
    if new_namespace:
        _check(_libc.unshare(_CLONE_NEWNET), "unshare network namespace")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ctl:
        flags = struct.unpack_from(
            "16sh", fcntl.ioctl(ctl.fileno(), _SIOCGIFFLAGS, struct.pack("16sh", b"lo", 0))
        )[1]
        fcntl.ioctl(ctl.fileno(), _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener,
        socket.socket(fileno=channel_fd) as channel,
    ):
        listener.bind(("127.0.0.1", EGRESS_PORT))
        listener.listen(128)
        socket.send_fds(channel, [b"L"], [listener.fileno()])


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


def _kill_command(pid: int) -> None:
    """The keeper's SIGTERM: SIGKILL the command, unless it already ended (then nothing to do)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _keep(command_pid: int) -> None:
    """The keeper: wait for the command, kill what it left, exit with the command's status."""
    os.closerange(0, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 4096)
    signal.signal(signal.SIGTERM, lambda *_: _kill_command(command_pid))
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
    if os.WIFSIGNALED(status):  # die of the same signal, so nanobot reports it as the command's
        if os.WTERMSIG(status) not in (
            signal.SIGKILL,
            signal.SIGSTOP,
        ):  # those two cannot be (and are) default
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


@dataclass
class LandlockLaunch:
    """What the child needs, prepared in the parent (fds opened, paths computed)."""

    ruleset_fd: int
    limits: Limits
    cgroup_fd: int  # -1 when there is no cgroup
    private_mounts: (
        bool  # root: read-only memory/ and (when no network) a private network namespace
    )
    new_net: bool
    read_only: tuple[Path, ...]
    nproc: bool
    workspace: Path = Path("/nonexistent")
    tmp: Path = Path("/nonexistent")
    user_namespace: bool = (
        False  # an ordinary user: enter a user namespace first, for the private mounts
    )
    shown: tuple[
        Path, ...
    ] = ()  # read-only folders that must stay visible (toolchains, PATH, working_dir)
    seccomp: bytes | None = (
        None  # sandbox/seccomp.py's filter (no setuid/setgid bits), where the ABI is known
    )
    egress_fd: int = (
        -1
    )  # network through nanobot's proxy in a namespace of its own: where to send the listener

    def __call__(self) -> None:  # preexec_fn
        if self.cgroup_fd >= 0:
            os.write(self.cgroup_fd, b"0")
        # nanobot gone (even SIGKILLed): the keeper gets SIGTERM, which it catches to kill the command
        # and then everything left behind; a SIGKILL here would orphan what the command started
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if self.private_mounts:
            if self.user_namespace:
                enter_user_namespace()
            _private_mounts(
                self.workspace, self.tmp, self.read_only, self.shown, new_net=self.new_net
            )
        if self.egress_fd >= 0:  # the private mounts made the network namespace (new_net)
            egress_listener(self.egress_fd, new_namespace=False)
        _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "subreaper")
        pid = os.fork()
        if pid:
            _keep(pid)  # never returns
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        apply_rlimits(self.limits, nproc=self.nproc)
        if os.geteuid() == 0:
            drop_capabilities()
        landlock.restrict_self(self.ruleset_fd)
        if self.seccomp:  # after restrict_self, which set no_new_privs
            seccomp.install(self.seccomp)
