"""The Landlock launcher's own side: the loop that runs in the small process (launcher.py).

Kept apart from launcher.py, nanobot's side, so that the launcher imports only this, keeper.py
and their few modules: no asyncio, subprocess or threading (about 12 MB and 60 ms less per
launcher, and a smaller process to fork for every command). The protocol is described in
launcher.py.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import struct
from dataclasses import replace
from typing import Any

from nanobot.sandbox.keeper import LandlockLaunch

STATUS = struct.Struct("=ii")  # pid, raw wait status
READY = b"ready"  # the launcher's first message: it imported what it needs
MAX_MSG = 1 << 20


def _child(request: dict[str, Any], fds: list[int], errpipe: int) -> None:
    """In the forked child: become the command's keeper (the hook forks it) or the command."""
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()  # own process group: nanobot's killpg reaches the keeper, the command and its children
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        os.chdir(request["cwd"])
        hook: LandlockLaunch = request["hook"]
        cgroup = fds[3] if hook.cgroup_fd >= 0 else -1
        egress = fds[3 + (hook.cgroup_fd >= 0)] if hook.egress_fd >= 0 else -1
        hook = replace(hook, ruleset_fd=fds[2], cgroup_fd=cgroup, egress_fd=egress)
        hook()  # returns only in the command (the keeper never returns)
        os.closerange(3, errpipe)
        os.closerange(errpipe + 1, 1 << 16)
        argv = request["argv"]
        os.execve(argv[0], argv, request["env"])
    except BaseException as exc:  # noqa: BLE001  # anything: report it, never run unconfined
        try:
            os.write(errpipe, f"{type(exc).__name__}: {exc}".encode(errors="replace")[:4000])
        finally:
            os._exit(255)


def _start(request: dict[str, Any], fds: list[int]) -> tuple[str, Any]:
    rd, wr = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        _child(request, fds, wr)
    os.close(wr)
    chunks = []
    while chunk := os.read(
        rd, 4096
    ):  # EOF: the command exec'd (the keeper closed its copy at start)
        chunks.append(chunk)
    os.close(rd)
    if chunks:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        return "error", b"".join(chunks).decode(errors="replace")
    return "ok", pid


def serve(ctl_fd: int, status_fd: int) -> None:
    """The launcher's loop: start what `ctl` asks for, report exits on `status`, end with nanobot."""
    ctl = socket.socket(fileno=ctl_fd)
    status = socket.socket(fileno=status_fd)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    keepers: set[int] = set()
    ctl.send(READY)

    def reap() -> None:
        while keepers:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in keepers:
                keepers.discard(pid)
                try:
                    status.send(STATUS.pack(pid, st))
                except OSError:  # nanobot is gone; `ctl` says so next
                    pass

    try:
        while True:
            ready, _, _ = select.select([ctl, wake_r], [], [])
            if wake_r in ready:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                reap()
            if ctl in ready:
                msg, ancdata, _, _ = ctl.recvmsg(
                    MAX_MSG, socket.CMSG_SPACE(16 * 4), socket.MSG_CMSG_CLOEXEC
                )
                if not msg:
                    return  # nanobot is gone
                fds: list[int] = []
                for level, kind, data in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds += list(
                            struct.unpack(f"{len(data) // 4}i", data[: len(data) - len(data) % 4])
                        )
                try:
                    reply = _start(pickle.loads(msg), fds)
                except Exception as exc:  # noqa: BLE001  # a failed start is reported, the launcher lives on
                    reply = ("error", f"{type(exc).__name__}: {exc}")
                finally:
                    for fd in fds:
                        os.close(fd)
                if reply[0] == "ok":
                    keepers.add(reply[1])
                ctl.send(pickle.dumps(reply))
                reap()  # a command that ended before the SIGCHLD was seen
    finally:
        for pid in keepers:  # the keeper kills its command and whatever it left behind
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
