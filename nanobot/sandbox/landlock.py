"""A small ctypes binding to Landlock (Linux 5.13+): three syscalls and their structs.

Why ctypes and not a package: the kernel interface is three stable syscalls with two
structs; the packages on PyPI wrap the same calls with less control over ABI versions
(network rules need ABI 4, scopes ABI 6) and add a dependency to review. The ruleset is
built in the parent (nothing there is restricted by it); the child only calls
`restrict_self` between fork and exec.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from nanobot.errors import LandlockError

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # the same on every architecture
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS = 38

# file system rights (the ABI that introduced each is in the comment)
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = EXECUTE | READ_FILE | READ_DIR
_FILE_ONLY = (
    EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
)  # rights a rule on a non-directory may carry


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi_version() -> int:
    """The kernel's Landlock ABI (0 when Landlock is missing or disabled)."""
    try:
        version = _libc.syscall(
            _SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        )
    except (AttributeError, OSError):
        return 0
    return max(0, int(version))


def fs_rights(abi: int) -> int:
    """Every file system right this ABI knows."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    if abi >= 5:
        rights |= IOCTL_DEV
    return rights


class Ruleset:
    """An open ruleset fd: handle all fs rights (none when not `fs`) and TCP when `block_tcp`, then
    add grants."""

    def __init__(self, abi: int, *, block_tcp: bool, fs: bool = True) -> None:
        self.abi = abi
        self.all_fs = fs_rights(abi) if fs else 0
        net = NET_BIND_TCP | NET_CONNECT_TCP if block_tcp and abi >= 4 else 0
        scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0
        attr = _RulesetAttr(self.all_fs, net, scoped)
        size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
        fd = _libc.syscall(
            _SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)
        )
        if fd < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
        self.fd = int(fd)
        os.set_inheritable(self.fd, False)

    def allow(self, path: Path, rights: int) -> bool:
        """Grant `rights` beneath `path`; False when the path cannot be opened (it is skipped)."""
        return self.allow_all((path,), rights) == 1

    def allow_all(self, paths: Iterable[Path], rights: int) -> int:
        """Grant `rights` beneath each of `paths` (those that cannot be opened are skipped); returns
        how many rules were added. One loop with the syscall's arguments made once: a Landlock
        command adds about 200 rules (every entry of / and /etc around the hidden ones)."""
        attr = _PathBeneathAttr(0, -1)
        args = (
            _SYS_ADD_RULE,
            ctypes.c_int(self.fd),
            ctypes.c_int(_RULE_PATH_BENEATH),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        rights &= self.all_fs
        added = 0
        for path in paths:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                granted = rights if stat.S_ISDIR(os.fstat(pfd).st_mode) else rights & _FILE_ONLY
                if not granted:
                    continue
                attr.allowed_access, attr.parent_fd = granted, pfd
                if _libc.syscall(*args) < 0:
                    err = ctypes.get_errno()
                    raise LandlockError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
                added += 1
            finally:
                os.close(pfd)
        return added

    def allow_port(self, port: int) -> None:
        """Allow TCP connect to `port` (on any address) through a `block_tcp` ruleset (ABI 4)."""
        attr = _NetPortAttr(NET_CONNECT_TCP, port)
        rc = _libc.syscall(
            _SYS_ADD_RULE,
            ctypes.c_int(self.fd),
            ctypes.c_int(_RULE_NET_PORT),
            ctypes.byref(attr),
            ctypes.c_uint32(0),
        )
        if rc < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_add_rule port {port}: {os.strerror(err)}")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def restrict_self(ruleset_fd: int) -> None:
    """In the child: no new privileges, then enforce the ruleset on this process and its children."""
    # A failure raises: the child then reports it and exits, the command never runs unconfined.
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"no_new_privs: {os.strerror(err)}")
    if _libc.syscall(_SYS_RESTRICT, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_restrict_self: {os.strerror(err)}")
