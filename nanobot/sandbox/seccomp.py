"""A seccomp filter for exec: no setuid or setgid bit can be set from inside the sandbox.

A command may run as root (nanobot run by root), and root owns what it creates: `chmod 4755`
on a workspace file would leave a setuid-root program behind for anyone to run later, outside
the sandbox. Mount options (nosuid) only stop the bit from acting inside the sandbox, so the
bit is refused where it is set: chmod, fchmod, fchmodat(2) with S_ISUID or S_ISGID, and
open/openat/creat/mkdir(at)/mknod(at) creating something with them, fail with EPERM. openat2
(its mode sits in a struct a filter cannot read) and io_uring_setup (its requests bypass the
filter) fail with ENOSYS, as on an older kernel; so does every syscall of a foreign ABI (a
32-bit program on a 64-bit kernel), whose numbers this filter does not know.

With `tcp_only` (a command whose network goes through nanobot's egress proxy, tools/egress_proxy.py)
it also refuses, with EPERM, every IPv4/IPv6 socket but TCP (no UDP, so no DNS of its own, no raw or
ICMP sockets), packet sockets, and TCP Fast Open's sendto/sendmsg(MSG_FASTOPEN), which connects
without connect(); Landlock then limits TCP connect to the proxy's port. AF_UNIX stays.

Known on x86_64 and aarch64; elsewhere `program()` is None and status says the bits are not
blocked. File capabilities (security.capability) need CAP_SETFCAP, which commands never have:
bubblewrap and the Landlock path both start them with no capabilities.
Pure ctypes and the standard library: the exec launcher imports it (launcher.py).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from functools import lru_cache

__all__ = ["install", "program", "missing"]

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_EPERM, _ENOSYS = 1, 38
_SET_ID_BITS = 0o6000  # S_ISUID | S_ISGID
_O_CREAT, _O_TMPFILE = 0o100, 0o20000000
_X32_BIT = 0x40000000

# (syscall number, index of its mode argument, index of its flags argument or -1)
_ARCHES: dict[str, tuple[int, list[tuple[int, int, int]], list[int]]] = {
    "x86_64": (
        0xC000003E,
        [
            (90, 1, -1),
            (91, 1, -1),
            (268, 2, -1),
            (452, 2, -1),  # chmod fchmod fchmodat fchmodat2
            (2, 2, 1),
            (257, 3, 2),
            (85, 1, -1),  # open openat creat
            (83, 1, -1),
            (258, 2, -1),
            (133, 1, -1),
            (259, 2, -1),  # mkdir mkdirat mknod mknodat
        ],
        [437, 425],
    ),  # openat2 io_uring_setup
    "aarch64": (
        0xC00000B7,
        [
            (52, 1, -1),
            (53, 2, -1),
            (452, 2, -1),  # fchmod fchmodat fchmodat2
            (56, 3, 2),
            (34, 2, -1),
            (33, 2, -1),  # openat mkdirat mknodat
        ],
        [437, 425],
    ),
}


# (socket, [(sendto / sendmsg / sendmmsg, index of its flags argument)])
_NET_CALLS: dict[str, tuple[int, list[tuple[int, int]]]] = {
    "x86_64": (41, [(44, 3), (46, 2), (307, 3)]),
    "aarch64": (198, [(206, 3), (211, 2), (269, 3)]),
}
_AF_INET, _AF_INET6, _AF_PACKET, _SOCK_STREAM, _IPPROTO_TCP = 2, 10, 17, 1, 6
_SOCK_TYPE_MASK, _MSG_FASTOPEN = 0xF, 0x20000000
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _arg(index: int) -> int:
    return 16 + 8 * index  # seccomp_data.args[index], its low 32 bits (little-endian)


def _tcp_only(socket_nr: int, sends: list[tuple[int, int]]) -> list[bytes]:
    deny, allow = _insn(_RET, _ERRNO | _EPERM), _insn(_RET, _ALLOW)
    block = [  # socket(domain, type, protocol): jumps count the instructions skipped
        _insn(_LD_W_ABS, _arg(0)),
        _insn(_JEQ, _AF_PACKET, 8, 0),  # -> deny
        _insn(_JEQ, _AF_INET, 1, 0),  # -> type
        _insn(_JEQ, _AF_INET6, 0, 7),  # else -> allow (AF_UNIX, netlink, ...)
        _insn(_LD_W_ABS, _arg(1)),
        _insn(_AND, _SOCK_TYPE_MASK),  # without SOCK_NONBLOCK / SOCK_CLOEXEC
        _insn(_JEQ, _SOCK_STREAM, 0, 3),  # else -> deny
        _insn(_LD_W_ABS, _arg(2)),
        _insn(_JEQ, 0, 2, 0),  # -> allow
        _insn(_JEQ, _IPPROTO_TCP, 1, 0),  # -> allow, else deny (SCTP, MPTCP)
        deny,
        allow,
    ]
    out = [_insn(_LD_W_ABS, 0), _insn(_JEQ, socket_nr, 0, len(block)), *block]
    for nr, flags in sends:
        out += [
            _insn(_LD_W_ABS, 0),
            _insn(_JEQ, nr, 0, 4),
            _insn(_LD_W_ABS, _arg(flags)),
            _insn(_JSET, _MSG_FASTOPEN, 0, 1),
            deny,
            allow,
        ]
    return out


@lru_cache(maxsize=8)
def program(machine: str | None = None, *, tcp_only: bool = False) -> bytes | None:
    """The filter as raw sock_filter instructions, or None where this machine's ABI is not known
    or the kernel has no seccomp filters (then loading one would stop every command).
    `tcp_only`: also no socket but TCP and AF_UNIX (see the module docstring)."""
    machine = machine or platform.machine()
    known = _ARCHES.get(machine)
    if known is None or not _kernel_filters():
        return None
    arch, mode_calls, refused = known
    out = [
        _insn(_LD_W_ABS, 4),  # seccomp_data.arch
        _insn(_JEQ, arch, 1, 0),
        _insn(_RET, _ERRNO | _ENOSYS),
        _insn(_LD_W_ABS, 0),  # seccomp_data.nr
        _insn(_JGE, _X32_BIT, 0, 1),
        _insn(_RET, _ERRNO | _ENOSYS),
    ]
    for nr in refused:
        out += [_insn(_LD_W_ABS, 0), _insn(_JEQ, nr, 0, 1), _insn(_RET, _ERRNO | _ENOSYS)]
    if tcp_only:
        out += _tcp_only(*_NET_CALLS[machine])
    for nr, mode, flags in mode_calls:
        block = []
        if flags >= 0:  # open(at): the mode counts only when it creates
            block += [
                _insn(_LD_W_ABS, _arg(flags)),
                _insn(_JSET, _O_CREAT | _O_TMPFILE, 1, 0),
                _insn(_RET, _ALLOW),
            ]
        block += [
            _insn(_LD_W_ABS, _arg(mode)),
            _insn(_JSET, _SET_ID_BITS, 0, 1),
            _insn(_RET, _ERRNO | _EPERM),
            _insn(_RET, _ALLOW),
        ]
        out += [_insn(_LD_W_ABS, 0), _insn(_JEQ, nr, 0, len(block))] + block
    out.append(_insn(_RET, _ALLOW))
    return b"".join(out)


def _kernel_filters() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            return any(
                line.startswith("Seccomp_filters:") or line.startswith("Seccomp:") for line in fh
            )
    except OSError:
        return False


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2


def install(code: bytes) -> None:
    """In the command's process, after no_new_privs: load the filter (raises OSError if refused)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(code, len(code))
    prog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp: {os.strerror(err)}")


def missing() -> str:
    """Why this machine gets no filter (for the status line), or "" when it gets one."""
    if program() is not None:
        return ""
    machine = platform.machine() or "unknown"
    if machine not in _ARCHES:
        return f"no seccomp filter for {machine}, only for {' and '.join(_ARCHES)}"
    return "the kernel has no seccomp filters"
