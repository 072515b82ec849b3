"""A small launcher process that forks Landlock commands, so nanobot itself never forks.

The Landlock path needs code between fork and exec (keeper.py). Run in nanobot, that is a
fork() of the whole interpreter: its page tables, and a copy of every page either side
writes while the keeper lives, which is as long as the command. A pytest-sized process pays
about 20 ms of CPU per command for it. The launcher is a fresh `python -I -S` that imports
only keeper.py and its few modules (a few MB), started once on the first Landlock command;
it forks each command's keeper from there (about a millisecond), runs the same hook, and
reports the keeper's exit status.

Two socket pairs join them: `ctl` carries one request (argv, env, cwd, the hook; the pipe,
ruleset and cgroup fds as SCM_RIGHTS) and its reply (the pid, or why the start failed);
`status` carries "(pid, wait status)" as each keeper exits. When nanobot goes away, even by
SIGKILL, the launcher sees `ctl` close, sends every keeper SIGTERM (each kills its command
and what it left, as when nanobot dies in the in-process path) and exits.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from nanobot.errors import LauncherError, LauncherUnavailable
from nanobot.sandbox.keeper import LandlockLaunch
from nanobot.sandbox.launcher_proc import MAX_MSG as _MAX_MSG
from nanobot.sandbox.launcher_proc import READY as _READY
from nanobot.sandbox.launcher_proc import STATUS as _STATUS

_READY_WITHIN = 20.0  # seconds; a python start on a loaded machine can take a few


# --- nanobot's side ------------------------------------------------------------------------------
_BOOT = (
    "import sys; sys.path.append(sys.argv[1]); from nanobot.sandbox.launcher_proc import serve; "
    "serve(int(sys.argv[2]), int(sys.argv[3]))"
)

ENABLED = (
    True  # False: fork in nanobot itself, as before the launcher (scripts/bench_exec.py compares)
)


class _Connection:
    """One launcher process: its control socket, and who waits for which keeper's exit."""

    def __init__(self) -> None:
        ctl, ctl_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        status, status_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        root = str(Path(__file__).resolve().parents[2])
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    _BOOT,
                    root,
                    str(ctl_child.fileno()),
                    str(status_child.fileno()),
                ],
                pass_fds=(ctl_child.fileno(), status_child.fileno()),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # a failed start says so through `ctl`
                start_new_session=True,  # Ctrl-C in the chat is nanobot's to handle
                env={},  # each request carries its command's environment; none of nanobot's keys sit here
            )
        except OSError as exc:
            for sock in (ctl, status):
                sock.close()
            raise LauncherUnavailable(f"the exec launcher could not be started: {exc}") from exc
        finally:
            ctl_child.close()
            status_child.close()
        ctl.settimeout(_READY_WITHIN)
        try:
            ready = ctl.recv(len(_READY))
        except OSError:
            ready = b""
        ctl.settimeout(None)
        if ready != _READY:
            self.proc.kill()
            self.proc.wait()
            ctl.close()
            status.close()
            raise LauncherUnavailable("the exec launcher did not start")
        self.ctl = ctl
        self.alive = True
        self.owner = os.getpid()
        self.lock = threading.Lock()
        self.waiters: dict[int, Callable[[int], None]] = {}
        self.early: dict[int, int] = {}
        threading.Thread(
            target=self._read_status, args=(status,), name="nanobot-launcher-status", daemon=True
        ).start()

    def _read_status(self, status: socket.socket) -> None:
        with status:
            while True:
                try:
                    msg = status.recv(_STATUS.size)
                except OSError:
                    msg = b""
                if len(msg) != _STATUS.size:
                    break
                pid, st = _STATUS.unpack(msg)
                with self.lock:
                    waiter = self.waiters.pop(pid, None)
                    if waiter is None:
                        self.early[pid] = st
                if waiter is not None:
                    waiter(st)
        with self.lock:  # the launcher died: its keepers got SIGTERM and killed their commands
            self.alive = False
            waiters, self.waiters = self.waiters, {}
        for waiter in waiters.values():
            waiter(signal.SIGKILL)  # the wait status of "killed by SIGKILL"
        self.ctl.close()
        self.proc.wait()

    def start(self, request: bytes, fds: list[int], on_exit: Callable[[int], None]) -> int:
        with self.lock:
            try:
                self.ctl.sendmsg(
                    [request],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))],
                )
                reply = self.ctl.recv(_MAX_MSG)
            except OSError as exc:
                self.alive = False
                raise LauncherError(f"the exec launcher is gone ({exc})") from exc
            if not reply:
                self.alive = False
                raise LauncherError("the exec launcher exited")
            kind, value = pickle.loads(reply)
            if kind != "ok":
                raise LauncherError(value)
            pid = int(value)
            early = self.early.pop(pid, None)
            if early is None:
                self.waiters[pid] = on_exit
        if early is not None:
            on_exit(early)
        return pid


class Launcher:
    """nanobot's handle on the launcher: started on first use, started again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self.unavailable = False

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        hook: LandlockLaunch,
        fds: list[int],
        on_exit: Callable[[int], None],
    ) -> int:
        """Start `argv` under `hook` with fds [stdout, stderr]; on_exit(wait status) runs on another thread."""
        request = pickle.dumps({"argv": argv, "env": env, "cwd": cwd, "hook": hook})
        passed = [*fds, hook.ruleset_fd] + [
            fd for fd in (hook.cgroup_fd, hook.egress_fd) if fd >= 0
        ]
        return self.ensure().start(request, passed, on_exit)

    def ensure(self) -> _Connection:
        """The running launcher, started (again) if needed; LauncherUnavailable when none can be."""
        with self._lock:
            if self.unavailable:
                raise LauncherUnavailable("the exec launcher could not be started")
            if self._conn is not None and self._conn.owner != os.getpid():
                self._conn = (
                    None  # a fork of the process that started it: that launcher is not ours
                )
            if self._conn is None or not self._conn.alive:
                try:
                    self._conn = _Connection()
                except LauncherUnavailable:
                    self.unavailable = True  # not tried again for every command
                    raise
            return self._conn

    def close(self, timeout: float = 5.0) -> None:
        """Stop the launcher (it SIGTERMs any keeper left) and reap it, so its CPU is counted as
        nanobot's; the next start makes a new one. Runs at exit."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is None or conn.owner != os.getpid():
            return
        conn.ctl.close()
        try:
            conn.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            conn.proc.kill()
            conn.proc.wait()


_launcher = Launcher()
atexit.register(_launcher.close)


def close() -> None:
    _launcher.close()


def available() -> bool:
    """Whether Landlock commands go through the launcher (starting it if needed); False: fork here."""
    if not ENABLED:
        return False
    try:
        _launcher.ensure()
    except LauncherUnavailable:
        return False
    return True


class _Pipe(asyncio.Protocol):
    def __init__(self, proc: LaunchedProcess, fd: int) -> None:
        self.proc, self.fd = proc, fd

    def data_received(self, data: bytes) -> None:
        self.proc.protocol.pipe_data_received(self.fd, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.proc.pipe_closed()


class LaunchedProcess:
    """The part of asyncio's SubprocessTransport exec uses, for a command the launcher started."""

    def __init__(self, protocol: asyncio.SubprocessProtocol) -> None:
        self.protocol = protocol
        self.pid = -1
        self.returncode: int | None = None
        self._open_pipes = 2
        self._transports: list[asyncio.BaseTransport] = []
        self._done = False

    def get_pid(self) -> int:
        return self.pid

    def get_returncode(self) -> int | None:
        return self.returncode

    def exited(self, status: int) -> None:  # on the event loop
        self.returncode = os.waitstatus_to_exitcode(status)
        self.protocol.process_exited()
        self._maybe_done()

    def pipe_closed(self) -> None:
        self._open_pipes -= 1
        self._maybe_done()

    def _maybe_done(self) -> None:
        if not self._done and self.returncode is not None and self._open_pipes <= 0:
            self._done = True
            self.protocol.connection_lost(None)

    def close(self) -> None:
        for transport in self._transports:
            transport.close()
        if self.returncode is None and self.pid > 0:
            try:
                os.kill(
                    self.pid, signal.SIGKILL
                )  # as asyncio's transport does: the keeper (its command follows)
            except ProcessLookupError:
                pass


async def launch(
    protocol_factory: Callable[[], asyncio.SubprocessProtocol],
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    hook: LandlockLaunch,
) -> tuple[LaunchedProcess, Any]:
    """Like loop.subprocess_exec (stdin /dev/null, stdout and stderr piped, a new session), through
    the launcher. Like it, the start holds the event loop until the command has exec'd (or failed)."""
    loop = asyncio.get_running_loop()
    protocol = protocol_factory()
    proc = LaunchedProcess(protocol)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)

    def on_exit(status: int) -> None:
        try:
            loop.call_soon_threadsafe(proc.exited, status)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    try:
        proc.pid = _launcher.start(argv, env, cwd, hook, [out_w, err_w], on_exit)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    for fd, rd in ((1, out_r), (2, err_r)):
        transport, _ = await loop.connect_read_pipe(
            partial(_Pipe, proc, fd), os.fdopen(rd, "rb", buffering=0)
        )
        proc._transports.append(transport)
    return proc, protocol
