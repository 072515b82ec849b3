"""A fork server for tests that start many real `python -m nanobot` processes.

A fresh `python -m nanobot agent -m ...` spends about a second of CPU importing nanobot, the CLI
and both SDKs before its turn begins. `ForkServer` pays that once: it starts one helper process
that imports them and then waits, single-threaded, for requests. Each `popen(argv, ...)` makes the
helper fork a child that becomes `python -m nanobot` with that argv, environment, folder and
standard streams, and runs it through runpy exactly as `-m` does. The child is a real, separate
process with its own pid: it can be SIGKILLed at any moment, it writes its own files, and its exit
code (or the signal that killed it, as a negative returncode) comes back as `subprocess.Popen`
reports it. `spawn(argv, ...)` starts it as pexpect does: in a new session whose controlling
terminal is a new pty, returned with pexpect's interface (`ForkedTerminal`). `ForkServers` (and
`shared()`, the `nanobot_forkserver` fixture) start a server per distinct interpreter setting.

What the child gets, as a fresh interpreter would:
- argv (`sys.argv`, `sys.orig_argv`), the environment (`os.environ` and the C environment, TZ
  re-read), the current folder (also as `sys.path[0]`, as `-m` puts it), the umask;
- descriptors 0, 1 and 2 from the caller and no other descriptor of the helper; new `sys.stdin`,
  `sys.stdout` and `sys.stderr` built by CPython's rules (line-buffered on a terminal, unbuffered
  with PYTHONUNBUFFERED, `backslashreplace` on stderr);
- the signal handlers, exit handlers and logging a fresh interpreter has after its imports (the
  helper only imports, and builds tiktoken's cl100k encoding as a first count would, and checks
  that this started no thread and changed no handler);
- a reseeded `random` (CPython's own at-fork hook), and the interpreter's normal exit: non-daemon
  threads joined, exit handlers run, streams flushed, an uncaught exception printed with exit 1,
  an uncaught KeyboardInterrupt re-raised as SIGINT;
- the imported objects are frozen out of the garbage collector (`gc.freeze()`, as pre-fork servers
  do), so no collection copies the shared pages; cyclic garbage made while importing is never freed.

What it cannot get, so `popen` refuses instead of differing silently: a different value of any
variable the interpreter reads at start (PYTHON*, the locale's LANG/LC_*), or of any variable a
module read while the helper imported (the helper records those reads). Start the server with the
environment the children will share. What stays different: the string hash seed is the helper's,
`os.getppid()` is the helper, `/proc/<pid>/cmdline` is the helper's command line, and modules are
already imported (a test of which modules start-up imports, or of start-up time, must use a plain
subprocess).
"""

from __future__ import annotations

import fcntl
import gc
import importlib
import io
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

if (
    __name__ == "__main__"
):  # the helper: its children would carry pexpect, which nanobot never imports
    fdspawn = object
else:
    from pexpect.fdpexpect import fdspawn

# What `agent -m` and the chat import on either wire (measured with PYTHONPROFILEIMPORTTIME), so
# a child imports nothing of weight.
PRELOAD = (
    "nanobot.cli.app",
    "nanobot.cli.chat",
    "nanobot.app",
    "nanobot.providers.openai_compat",
    "nanobot.providers.anthropic",
    "openai",
    "openai.resources.chat",
    "openai.types.chat",
    "anthropic",
    "anthropic.resources.messages",
    "anthropic.types",
    # imported on the way through a turn
    "nanobot.cli.input_text",
    "nanobot.cli.status_view",
    "nanobot.cli.usage",
    "nanobot.skills",
    "nanobot.tools.cron",
    "nanobot.tools.files",
    "nanobot.tools.recall",
    "nanobot.tools.web",
    "httpcore2",
    "h11",
    "yaml",
    "jsonschema",
    "anyio._backends._asyncio",  # the first request's lock (httpcore2) loads anyio's backend
    "nanobot.memory.prompt_files",
    "nanobot.calibration_file",
    "rich._emoji_codes",  # the first print of an answer
    # and by the chat: the prompt, markdown on a terminal, reminders
    "nanobot.cli.approval_prompt",
    "nanobot.cli.chat_reminders",
    "nanobot.cli.input_history",
    "nanobot.cli.markdown_stream",
    "nanobot.cli.serve",
    "nanobot.cron.runner",
    "prompt_toolkit",
    "prompt_toolkit.shortcuts",
    "prompt_toolkit.patch_stdout",
    "rich.markdown",
    "rich.syntax",
    # "module:function" imports the module and calls the function: tiktoken's cl100k ranks, which
    # each child would otherwise parse again on its first count (0.3 CPU-s); tiktoken keeps the
    # encoding it built, so the child's `tiktoken.get_encoding` returns it, the same ranks and code
    "nanobot.tokens:load_offline_encoding",
)

_MAX_MESSAGE = 1 << 20

# CPU seconds of the children this process collected from servers it did not start (another
# process's: they run outside this process's cgroup); scripts/suite_cpu.py adds them to each test.
attached_children_cpu = 0.0


def _interpreter_variable(name: str) -> bool:
    """Read by the interpreter itself at start-up (a fork cannot take a new value)."""
    return name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE")


# ------------------------------------------------------------------------------------------------
# the helper process (this file run as a script)


class _Reads:
    """Records the environment variables modules read while they are imported."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.whole = False
        environ_type = type(os.environ)
        self._saved = (environ_type.__getitem__, environ_type.__iter__)
        getitem, iterate = self._saved
        reads = self

        def recording_getitem(env: Any, key: str) -> str:
            reads.names.add(key)
            return getitem(env, key)

        def recording_iter(env: Any) -> Any:
            reads.whole = True
            return iterate(env)

        environ_type.__getitem__ = recording_getitem  # type: ignore[method-assign]
        environ_type.__iter__ = recording_iter  # type: ignore[method-assign]

    def stop(self) -> None:
        environ_type = type(os.environ)
        environ_type.__getitem__, environ_type.__iter__ = self._saved  # type: ignore[method-assign]


def _handlers() -> dict[int, Any]:
    found = {}
    for sig in signal.valid_signals():
        try:
            found[int(sig)] = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
    return found


def _preload(modules: Sequence[str]) -> dict[str, Any]:
    """Import `modules`; what the helper tells each client about what it may not change."""
    handlers = _handlers()
    reads = _Reads()
    try:
        # as nanobot imports the SDKs (its first request installs this): their re-export packages load
        # on demand, here and in each child
        from nanobot.providers import _sdk_on_demand

        _sdk_on_demand.install()
        for name in modules:
            module, _, function = name.partition(":")
            imported = importlib.import_module(module)
            if function:
                getattr(imported, function)()
    finally:
        reads.stop()
    if threading.active_count() != 1:
        raise RuntimeError(f"importing started threads: {threading.enumerate()}")
    changed = [sig for sig, handler in _handlers().items() if handlers.get(sig) is not handler]
    if changed:
        raise RuntimeError(f"importing changed signal handlers: {changed}")
    if reads.whole:
        raise RuntimeError("a module copied the whole environment while it was imported")
    # what is imported stays, shared by every child: no collection walks it (and so copies it page
    # by page into the child), at run time or at exit, where a full collection would cost a child
    # half a second
    gc.freeze()
    names = reads.names - _rederived()
    return {
        "read": {k: os.environ.get(k) for k in names},
        "interpreter": {k: v for k, v in os.environ.items() if _interpreter_variable(k)},
    }


def _rederived() -> set[str]:
    """Variables read at start-up that the child derives again from its own environment."""
    import site

    # HOME names the user site-packages (site, sysconfig); with the user site off (a venv) that is
    # only a pair of paths, re-derived in _user_base
    return set() if site.ENABLE_USER_SITE else {"HOME"}


def _user_base() -> None:
    import site
    import sysconfig

    site.USER_BASE = site.USER_SITE = None
    base = site.getuserbase()
    site.getusersitepackages()
    config = getattr(sysconfig, "_CONFIG_VARS", None)
    if config and "userbase" in config:
        config["userbase"] = base


def _std_stream(
    fd: int, name: str, *, write: bool, buffered: bool, encoding: str, errors: str
) -> io.TextIOWrapper:
    """sys.stdin/stdout/stderr on `fd`, made the way CPython's create_stdio makes them."""
    raw_or_buffer: Any = open(
        fd, "wb" if write else "rb", -1 if buffered or not write else 0, closefd=False
    )
    raw = raw_or_buffer.raw if hasattr(raw_or_buffer, "raw") else raw_or_buffer
    raw.name = name
    line_buffering = buffered and (raw.isatty() or fd == 2)
    stream = io.TextIOWrapper(
        raw_or_buffer,
        encoding=encoding,
        errors=errors,
        newline="\n",
        line_buffering=line_buffering,
        write_through=not buffered,
    )
    stream.mode = "w" if write else "r"  # type: ignore[misc]
    return stream


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: turn into `python -m <module> <args>` and run it."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    if request.get("session"):
        os.setsid()  # as Popen(start_new_session=True), and pexpect, which then takes the terminal
    if request.get("terminal"):
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    keep = {0, 1, 2}
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the descriptor listdir used
    # the helper's own streams show how this interpreter makes them (-u / PYTHONUNBUFFERED, locale)
    how = {"buffered": not sys.stdout.write_through, "encoding": sys.stdout.encoding}
    errors = sys.stdout.errors
    sys.stdin = sys.__stdin__ = _std_stream(0, "<stdin>", write=False, errors=errors, **how)
    sys.stdout = sys.__stdout__ = _std_stream(1, "<stdout>", write=True, errors=errors, **how)
    sys.stderr = sys.__stderr__ = _std_stream(
        2, "<stderr>", write=True, errors="backslashreplace", **how
    )
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    _user_base()
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    argv = request["argv"]
    sys.orig_argv = list(argv)
    import runpy

    if argv[1] != "-m":  # `python script.py args`: the script's folder leads sys.path
        sys.argv = argv[1:]
        if not sys.flags.safe_path:
            sys.path[0] = os.path.dirname(os.path.realpath(argv[1]))
        runpy.run_path(argv[1], run_name="__main__")
        return
    sys.argv = ["-m", *argv[3:]]
    if not sys.flags.safe_path:
        sys.path[0] = os.getcwd()
    runpy._run_module_as_main(argv[2])  # type: ignore[attr-defined]  # what `python -m` calls


def _serve(
    listener: socket.socket, hello: dict[str, Any]
) -> tuple[dict[str, Any], list[int]] | None:
    """Answer requests until stdin closes; returns (request, fds) in a forked child, None at the end."""
    conns: dict[int, socket.socket] = {}  # fd -> client connection waiting for its child's exit
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    poller = select.poll()
    poller.register(0, select.POLLIN)
    poller.register(listener.fileno(), select.POLLIN)
    while True:
        for fd, _ in poller.poll():
            if fd == 0:
                if os.read(0, 4096):
                    continue
                for pidfd, (pid, _conn) in children.items():  # the test process is gone
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    os.waitpid(pid, 0)
                return None
            if fd == listener.fileno():
                conn, _ = listener.accept()
                conn.sendall(json.dumps(hello).encode())
                conns[conn.fileno()] = conn
                poller.register(conn.fileno(), select.POLLIN)
            elif fd in conns:
                conn = conns.pop(fd)
                poller.unregister(fd)
                try:
                    data, fds, _, _ = socket.recv_fds(conn, _MAX_MESSAGE, 3)
                except OSError:
                    data, fds = b"", []
                if not data or len(fds) != 3:
                    conn.close()
                    for extra in fds:
                        os.close(extra)
                    continue
                request = json.loads(data)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    for other in conns.values():
                        other.close()
                    for pidfd in children:
                        os.close(pidfd)
                    return request, fds
                for received in fds:
                    os.close(received)
                pidfd = os.pidfd_open(pid)
                socket.send_fds(conn, [json.dumps({"pid": pid}).encode()], [pidfd])
                children[pidfd] = (pid, conn)
                poller.register(pidfd, select.POLLIN)
            elif fd in children:
                pid, conn = children.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status, usage = os.wait4(pid, 0)
                ended = {
                    "returncode": os.waitstatus_to_exitcode(status),
                    "cpu": usage.ru_utime + usage.ru_stime,  # the child's and what it waited for
                }
                try:
                    conn.sendall(json.dumps(ended).encode())
                except OSError:
                    pass  # the client stopped listening
                conn.close()


def _helper_main() -> None:
    listener = socket.socket(fileno=int(sys.argv[1]))
    modules = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else list(PRELOAD)
    try:
        hello = _preload(modules)
    except BaseException as exc:  # told to every client, which raises it in the test
        hello = {"error": f"{type(exc).__name__}: {exc}"}
    child = _serve(listener, hello)
    if child is not None:
        _become(*child)


# ------------------------------------------------------------------------------------------------
# the test side


class ForkServerError(RuntimeError):
    """The fork server cannot start this command the way a fresh process would start."""


def _differences(hello: dict[str, dict[str, str | None]], env: Mapping[str, str]) -> list[str]:
    """The variables of `env` a child forked from the server that said `hello` could not see."""
    interpreter = hello["interpreter"]
    names = {k for k in env if _interpreter_variable(k)} | set(interpreter)
    differs = {k for k in names if env.get(k) != interpreter.get(k)}
    differs |= {k for k, v in hello["read"].items() if env.get(k) != v}
    return sorted(differs)


def _stdio(spec: Any, default_fd: int, closers: list[int]) -> tuple[int, int | None]:
    """(descriptor the child gets, our end of a pipe or None) for a Popen-style stdio argument."""
    if spec is None:
        try:
            os.fstat(default_fd)
            return default_fd, None
        except (
            OSError
        ):  # this process has none (CI may run without stdin): the child gets /dev/null
            spec = subprocess.DEVNULL
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR)
        closers.append(fd)
        return fd, None
    if spec == subprocess.PIPE:
        r, w = os.pipe()
        theirs, ours = (r, w) if default_fd == 0 else (w, r)
        closers.append(theirs)
        return theirs, ours
    if isinstance(spec, int):
        return spec, None
    return spec.fileno(), None


class ForkedProcess:
    """A `python -m nanobot` child of the fork server, with the part of `subprocess.Popen`'s
    interface tests use: pid, returncode, stdin/stdout/stderr, poll, wait, send_signal, kill,
    terminate, communicate."""

    def __init__(
        self,
        conn: socket.socket,
        pid: int,
        pidfd: int,
        args: list[str],
        pipes: tuple[int | None, int | None, int | None],
        text: bool,
        attached: bool = False,
    ) -> None:
        self._conn, self.pid, self._pidfd, self.args = conn, pid, pidfd, args
        self._attached = attached  # its server is another process's
        self.returncode: int | None = None
        self._lock = threading.Lock()
        modes = ("wb", "rb", "rb")
        streams: list[IO[Any] | None] = []
        for fd, mode in zip(pipes, modes):
            if fd is None:
                streams.append(None)
            elif text:
                streams.append(open(fd, mode[0], encoding="utf-8", errors="strict"))
            else:
                streams.append(open(fd, mode, buffering=0 if mode == "rb" else -1))
        self.stdin, self.stdout, self.stderr = streams
        self._text = text

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            ready, _, _ = select.select([self._conn], [], [], timeout)
            if not ready:
                return None
            data = self._conn.recv(_MAX_MESSAGE)
            self._conn.close()
            os.close(self._pidfd)
            if not data:
                raise ForkServerError("the fork server went away before the child ended")
            ended = json.loads(data)
            if self._attached:
                global attached_children_cpu
                attached_children_cpu += ended["cpu"]
            self.returncode = int(ended["returncode"])
            return self.returncode

    def poll(self) -> int | None:
        return self._collect(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self.returncode is None:
                try:
                    signal.pidfd_send_signal(self._pidfd, sig)  # no pid reuse can misdirect it
                except ProcessLookupError:
                    pass  # already ended, not yet reported

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(
        self, input: str | bytes | None = None, timeout: float | None = None
    ) -> tuple[Any, Any]:
        results: dict[str, Any] = {}

        def drain(name: str, stream: IO[Any]) -> None:
            results[name] = stream.read()
            stream.close()

        readers = [
            threading.Thread(target=drain, args=(name, s), daemon=True)
            for name, s in (("out", self.stdout), ("err", self.stderr))
            if s is not None
        ]
        for reader in readers:
            reader.start()
        if self.stdin is not None:
            try:
                if input:
                    self.stdin.write(input)
                self.stdin.close()
            except BrokenPipeError:
                pass
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader in readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return results.get("out"), results.get("err")


class ForkedTerminal(fdspawn):
    """The pexpect side of a child in a pseudo-terminal: `pexpect.spawn`'s interface (expect, send,
    sendcontrol, sendintr, sendeof, isalive, kill, terminate, wait, close, exitstatus, signalstatus,
    pid, child_fd, getwinsize/setwinsize) over a fork server child."""

    def __init__(
        self, proc: ForkedProcess, master: int, *, encoding: str | None, timeout: float
    ) -> None:
        super().__init__(master, args=proc.args, timeout=timeout, encoding=encoding, use_poll=True)
        self.proc = proc
        self.pid = proc.pid
        self.exitstatus: int | None = None
        self.signalstatus: int | None = None
        self.status: int | None = None
        self.terminated = False

    def _ended(self, code: int) -> None:
        if code < 0:
            self.exitstatus, self.signalstatus = None, -code
        else:
            self.exitstatus, self.signalstatus = code, None
        self.status = code
        self.terminated = True

    def send(self, s: str | bytes) -> int:
        if (
            self.delaybeforesend is not None
        ):  # pexpect.spawn waits 50 ms before each send; tests time by it
            time.sleep(self.delaybeforesend)
        return super().send(s)

    def isalive(self) -> bool:
        code = self.proc.poll()
        if code is None:
            return True
        self._ended(code)
        return False

    def kill(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def terminate(self, force: bool = False) -> bool:
        """As pexpect: SIGHUP, SIGCONT, SIGINT, then (with force) SIGKILL, until the child ends."""
        for sig in (signal.SIGHUP, signal.SIGCONT, signal.SIGINT) + (
            (signal.SIGKILL,) if force else ()
        ):
            if not self.isalive():
                return True
            self.proc.send_signal(sig)
            try:
                self._ended(self.proc.wait(timeout=self.delayafterterminate))
                return True
            except subprocess.TimeoutExpired:
                continue
        return not self.isalive()

    def wait(self) -> int | None:
        self._ended(self.proc.wait())
        return self.exitstatus

    def close(self, force: bool = True) -> None:
        if self.child_fd != -1:
            os.close(self.child_fd)
            self.child_fd = -1
            time.sleep(self.delayafterclose)  # as pexpect.spawn: the child may leave on the hangup
        self.closed = True
        if self.isalive() and force:
            self.terminate(force=True)
        if not self.isalive():
            return
        self.wait()

    def _control(self, index: int, default: str) -> int:
        """Send the terminal's character for `index` (VINTR, VEOF), as a str (both modes take one)."""
        try:
            char = termios.tcgetattr(self.child_fd)[6][index]
        except termios.error:
            return self.send(default)
        return self.send(char.decode("latin-1") if isinstance(char, bytes) else chr(char))

    def sendintr(self) -> int:
        return self._control(termios.VINTR, "\x03")

    def sendeof(self) -> int:
        return self._control(termios.VEOF, "\x04")

    def sendcontrol(self, char: str) -> int:
        char = char.lower()
        code = ord(char)
        if 97 <= code <= 122:
            return self.send(chr(code - 96))
        specials = {
            "@": 0,
            "`": 0,
            "[": 27,
            "{": 27,
            "\\": 28,
            "|": 28,
            "]": 29,
            "}": 29,
            "^": 30,
            "~": 30,
            "_": 31,
            "?": 127,
        }
        return self.send(chr(specials[char])) if char in specials else 0

    def getwinsize(self) -> tuple[int, int]:
        rows, columns, _, _ = struct.unpack(
            "HHHH", fcntl.ioctl(self.child_fd, termios.TIOCGWINSZ, b"\0" * 8)
        )
        return rows, columns

    def setwinsize(self, rows: int, columns: int) -> None:
        fcntl.ioctl(self.child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


class ForkServer:
    """One helper process that has imported nanobot; `popen` forks a fresh-acting child from it.

    `env` is the environment the helper starts with (default: this process's); every child's
    environment must agree with it on what the helper could not re-read (see the module's docstring).
    Use as a context manager, or call `close()`; the helper also ends when this process does."""

    def __init__(
        self, env: Mapping[str, str] | None = None, preload: Sequence[str] = PRELOAD
    ) -> None:
        self.preload = tuple(preload)
        self._dir = tempfile.mkdtemp(prefix="nanobot-forkserver-")
        self._path = str(Path(self._dir) / "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(self._path)
        listener.listen(64)
        self._log = open(Path(self._dir) / "helper.log", "w+b")
        self._helper: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, __file__, str(listener.fileno()), ",".join(preload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=dict(os.environ if env is None else env),
            pass_fds=[listener.fileno()],
            cwd="/",
        )
        listener.close()

    @property
    def path(self) -> str:
        """Where the helper listens: another process reaches it with `ForkServer.attach(path)`."""
        return self._path

    @classmethod
    def attach(cls, path: str) -> ForkServer:
        """A client of the helper another process started (its `path`): popen, run and spawn work;
        it starts and closes nothing."""
        client = cls.__new__(cls)
        client._path, client._helper = path, None
        return client

    def accepts(self, env: Mapping[str, str]) -> bool:
        """Whether a child with environment `env` can be forked from this server."""
        return not self._differences(env)

    def _differences(self, env: Mapping[str, str]) -> list[str]:
        conn = self._connect()
        try:
            return _differences(self._hello(conn), env)
        finally:
            conn.close()

    def _connect(self) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(self._path)
        return conn

    def _hello(self, conn: socket.socket) -> dict[str, dict[str, str | None]]:
        ready, _, _ = select.select([conn], [], [], 120)
        data = conn.recv(_MAX_MESSAGE) if ready else b""
        if not data:
            if self._helper is None:  # attached: the log is the starter's
                raise ForkServerError(f"the fork server at {self._path} is not answering")
            self._log.seek(0)
            raise ForkServerError(
                f"the fork server is not answering; its stderr: {self._log.read()[-4000:]!r}"
            )
        hello = json.loads(data)
        if "error" in hello:
            raise ForkServerError(f"the fork server could not prepare: {hello['error']}")
        return hello

    def popen(
        self,
        argv: Sequence[str],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        text: bool = False,
        start_new_session: bool = False,
        _terminal: bool = False,
    ) -> ForkedProcess:
        """Like `subprocess.Popen(argv, ...)` for argv = [sys.executable, "-m", "nanobot", *args] (or
        another module: it is imported in the child, unless the server preloaded it), or
        [sys.executable, "script.py", *args]."""
        argv = [os.fsdecode(a) for a in argv]
        module = len(argv) >= 3 and argv[1] == "-m"
        script = len(argv) >= 2 and not argv[1].startswith("-")
        if not (module or script) or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
            raise ForkServerError(
                f"the fork server runs `{sys.executable} -m <module> ...` or "
                f"`{sys.executable} <script> ...`, not {argv[:3]}"
            )
        env = dict(os.environ if env is None else env)
        conn = self._connect()
        fixed = self._hello(conn)
        differs = _differences(fixed, env)
        if differs:
            conn.close()
            raise ForkServerError(
                f"these variables must have the values the fork server started with, "
                f"which it can no longer re-read: {differs}; start a ForkServer with them"
            )
        closers: list[int] = []
        try:
            child_in, our_in = _stdio(stdin, 0, closers)
            child_out, our_out = _stdio(stdout, 1, closers)
            if stderr == subprocess.STDOUT:
                child_err, our_err = child_out, None
            else:
                child_err, our_err = _stdio(stderr, 2, closers)
            request = {
                "argv": argv,
                "env": env,
                "cwd": os.fspath(cwd) if cwd is not None else os.getcwd(),
                "umask": _umask(),
                "session": start_new_session or _terminal,
                "terminal": _terminal,
            }
            socket.send_fds(conn, [json.dumps(request).encode()], [child_in, child_out, child_err])
            ready, _, _ = select.select([conn], [], [], 60)
            data, fds, _, _ = (
                socket.recv_fds(conn, _MAX_MESSAGE, 1) if ready else (b"", [], 0, None)
            )
        finally:
            for fd in closers:
                os.close(fd)
        if not data or len(fds) != 1:
            for fd in (our_in, our_out, our_err):
                if fd is not None:
                    os.close(fd)
            raise ForkServerError("the fork server did not start the child")
        return ForkedProcess(
            conn,
            json.loads(data)["pid"],
            fds[0],
            argv,
            (our_in, our_out, our_err),
            text,
            attached=self._helper is None,
        )

    def spawn(
        self,
        argv: Sequence[str],
        *,
        dimensions: tuple[int, int] = (24, 80),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        encoding: str | None = None,
        timeout: float = 30,
    ) -> ForkedTerminal:
        """Like `pexpect.spawn(argv[0], argv[1:], ...)`: the child in a new session whose controlling
        terminal is a new pseudo-terminal of `dimensions` (rows, columns); returns its pexpect side."""
        master, slave = os.openpty()
        rows, columns = dimensions
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        try:
            proc = self.popen(
                argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, _terminal=True
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return ForkedTerminal(proc, master, encoding=encoding, timeout=timeout)

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | bytes | None = None,
        timeout: float | None = None,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[Any]:
        """Like `subprocess.run(argv, capture_output=True, ...)`."""
        proc = self.popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kwargs,
        )
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)

    def close(self) -> None:
        if self._helper is None:
            return  # attached: the starter closes it
        if self._helper.stdin and not self._helper.stdin.closed:
            self._helper.stdin.close()  # the helper kills what is still running and exits
        try:
            self._helper.wait(timeout=30)
        finally:
            self._log.close()
            for name in ("socket", "helper.log"):
                Path(self._dir, name).unlink(missing_ok=True)
            os.rmdir(self._dir)

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Fork servers another process started for this one and its children to use (the whole suite's
# controller starts one for its xdist workers: tests/conftest.py): JSON, [{"path", "preload"}].
SHARED_SERVERS = "TESTS_FORKSERVERS"


def offer(servers: Sequence[ForkServer]) -> None:
    """Let the processes this one starts from now on use `servers` (see SHARED_SERVERS)."""
    os.environ[SHARED_SERVERS] = json.dumps(
        [{"path": s.path, "preload": list(s.preload)} for s in servers]
    )


def _offered() -> list[ForkServer]:
    servers = []
    for entry in json.loads(os.environ.get(SHARED_SERVERS) or "[]"):
        server = ForkServer.attach(entry["path"])
        server.preload = tuple(entry["preload"])
        servers.append(server)
    return servers


class ForkServers:
    """Fork servers started as needed: `popen` uses one whose start-up environment agrees with the
    child's (the first child with new interpreter settings, PYTHONUNBUFFERED say, starts one). Those
    another process offered (`offer`) come first."""

    def __init__(self) -> None:
        self._servers: list[ForkServer] = _offered()
        self._lock = threading.Lock()

    def server_for(
        self, env: Mapping[str, str] | None = None, preload: Sequence[str] = PRELOAD
    ) -> ForkServer:
        """A server that preloaded `preload` and accepts `env` (started with `env` if none does)."""
        env = dict(os.environ if env is None else env)
        with self._lock:
            for server in self._servers:
                if server.preload == tuple(preload) and server.accepts(env):
                    return server
            server = ForkServer(env=env, preload=preload)
            self._servers.append(server)
            return server

    def popen(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> ForkedProcess:
        return self.server_for(env).popen(argv, env=env, **kwargs)

    def run(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[Any]:
        return self.server_for(env).run(argv, env=env, **kwargs)

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kwargs: Any
    ) -> ForkedTerminal:
        return self.server_for(env).spawn(argv, env=env, **kwargs)

    def close(self) -> None:
        with self._lock:
            servers, self._servers = self._servers, []
        for server in servers:
            server.close()


_shared: ForkServers | None = None
_shared_lock = threading.Lock()


def shared() -> ForkServers:
    """The test process's fork servers (the `nanobot_forkserver` fixture; helpers such as
    tests/cli/terminal.py take them from here). The session's end closes them."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ForkServers()
        return _shared


def close_shared() -> None:
    global _shared
    with _shared_lock:
        servers, _shared = _shared, None
    if servers is not None:
        servers.close()


def _umask() -> int:
    """This process's umask, read without setting it (another thread may be creating files)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Umask:"):
            return int(line.split()[1], 8)
    raise ForkServerError("/proc/self/status shows no umask")


if __name__ == "__main__":
    _helper_main()
