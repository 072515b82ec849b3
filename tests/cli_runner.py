"""Run the real `nanobot` command inside the test process, as if it were a child process.

`run_cli("agent", "-m", "hi")` calls the console-script entry point (`nanobot.cli.app:main`) with
that argv and returns a `subprocess.CompletedProcess` (returncode, stdout, stderr as text), so a
test written against `subprocess.run([... "-m", "nanobot", ...])` changes by one line and runs in
milliseconds instead of paying Python's start-up and the SDK imports on every call.

What a child process would get, the command gets here:
- argv, the environment (the test's, plus `env`), the current folder (`cwd`);
- stdin, stdout and stderr as real files (not terminals), at the Python level *and* on file
  descriptors 0, 1 and 2, so `sys.stdout.buffer`, `fileno()` and programs the command starts
  write where a pipe would take them; stdout and stderr are decoded like `text=True` does;
- the exit code: `sys.exit(n)`, or 1 with the traceback on stderr for an uncaught exception;
- a fresh copy of the process-wide state nanobot keeps (the masker's known secrets, the
  one-per-process caches listed in `_FRESH`), and a logging handler standing in for the one
  Python uses when nothing is configured (warnings and errors on stderr).

And the test process gets everything back afterwards: environment, folder, argv, the standard
streams and descriptors, signal handlers, logging, the process-wide state, and the command groups
mounted on the typer app. Non-daemon threads the command started are joined, as an interpreter
does at exit; an `atexit` handler it registers fails the test (nothing would run it here).

What only a real process shows stays with `subprocess` and `pexpect`: signals and Ctrl-C, a
terminal, a closed stdin, undecodable argv, which modules start-up imports, two processes at once.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any


def _fresh_state() -> list[tuple[Any, str, Callable[[], Any]]]:
    """(module, attribute, value in a new process) for the state nanobot keeps per process."""
    from nanobot import secrets_mask, tokens
    from nanobot.cli import memory_groups
    from nanobot.sandbox import limits
    from nanobot.tools import shell
    from nanobot.usage import meter

    return [
        (secrets_mask, "_known", set),  # exact secret values remembered when a config loads
        (secrets_mask, "_known_re", lambda: None),
        (
            memory_groups,
            "_config_cache",
            list,
        ),  # the config, loaded once per `memory`/`history` command
        (shell, "_STARTED_GROUPS", set),  # process groups exec started (what a signal kills)
        (
            limits,
            "_swept",
            set,
        ),  # cgroup folders swept of dead commands' leftovers, once per process
        (tokens, "_counters", dict),  # the shared token counters and their per-message caches
        (tokens, "_loader", tokens._Loader),
        (
            meter,
            "_METERS",
            dict,
        ),  # the usage ledger's open file and today's spend, per nanobot home
    ]


def _file(data: bytes = b"") -> int:
    """A descriptor on an unnamed file, opened for appending: what the command and the programs it
    starts write there lands at the end whoever writes it, as on a pipe."""
    fd, path = tempfile.mkstemp(prefix="nanobot-cli-")
    os.unlink(path)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_APPEND)
    return fd


def _writer(fd: int, *, errors: str, line_buffering: bool) -> io.TextIOWrapper:
    # like Python's own streams on a pipe: stdout block-buffered, stderr line-buffered
    raw = io.FileIO(os.dup(fd), "w")
    return io.TextIOWrapper(
        io.BufferedWriter(raw), encoding="utf-8", errors=errors, line_buffering=line_buffering
    )


def _text(fd: int) -> str:
    size = os.fstat(fd).st_size
    data = os.pread(fd, size, 0)
    # as subprocess.run(text=True) decodes: the locale's UTF-8, universal newlines
    return io.TextIOWrapper(
        io.BytesIO(data), encoding="utf-8", errors="strict", newline=None
    ).read()


@contextlib.contextmanager
def _on_descriptors(fds: Sequence[int], streams: Sequence[io.TextIOWrapper]) -> Iterator[None]:
    """`fds` on descriptors 0, 1, 2 and `streams` as sys.stdin, sys.stdout, sys.stderr."""
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        sys.stdin, sys.stdout, sys.stderr = streams
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for target, saved in enumerate(saved_fds):
            os.dup2(saved, target)
            os.close(saved)


@contextlib.contextmanager
def _environment(
    env: Mapping[str, str] | None, cwd: str | os.PathLike[str] | None
) -> Iterator[None]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


@contextlib.contextmanager
def _process_state() -> Iterator[None]:
    fresh = _fresh_state()
    saved = [(module, name, getattr(module, name)) for module, name, _ in fresh]
    for module, name, new in fresh:
        setattr(module, name, new())
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@contextlib.contextmanager
def _signal_handlers() -> Iterator[None]:
    saved = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if handler is not None:
            saved[sig] = handler
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)


@contextlib.contextmanager
def _logging_to(stderr: io.TextIOWrapper) -> Iterator[None]:
    """Python's last-resort handler (WARNING and above, the bare message) on the command's stderr."""
    root = logging.getLogger()
    saved_root = (root.level, root.handlers[:])
    known = {
        name: (lg.level, lg.handlers[:], lg.propagate, lg.disabled)
        for name, lg in logging.Logger.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    handler = logging.StreamHandler(stderr)
    handler.setLevel(logging.WARNING)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.setLevel(saved_root[0])
        root.handlers[:] = saved_root[1]
        for name, lg in logging.Logger.manager.loggerDict.items():
            if not isinstance(lg, logging.Logger):
                continue
            level, handlers, propagate, disabled = known.get(
                name, (logging.NOTSET, [], True, False)
            )
            if lg.level != level:  # each setLevel clears every logger's cache: only where it moved
                lg.setLevel(level)
            lg.handlers[:] = handlers
            lg.propagate, lg.disabled = propagate, disabled


@contextlib.contextmanager
def _at_exit(argv: Sequence[str]) -> Iterator[None]:
    """Fails on an exit handler the command registers (a module's import-time one is fine: a new
    process would register it too), and releases the file locks it still holds, as exit does."""
    from nanobot.fsio import held_locks

    held_before = {id(lock) for lock in held_locks()}
    registered: list[str] = []
    register = atexit.register

    def watched(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        caller = sys._getframe(1)
        if caller.f_code.co_name != "<module>":
            registered.append(
                f"{getattr(func, '__qualname__', func)} from {caller.f_code.co_filename}"
            )
        return register(func, *args, **kwargs)

    atexit.register = watched
    try:
        yield
    finally:
        atexit.register = register
        for lock in held_locks():
            if id(lock) not in held_before:
                lock.release()
    if registered:
        raise AssertionError(
            f"`nanobot {' '.join(argv[1:])}` registered exit handlers {registered}, which only "
            "a real process runs: test it through subprocess"
        )


@contextlib.contextmanager
def _typer_groups() -> Iterator[None]:
    from nanobot.cli.app import app

    saved = app.registered_groups[:]
    try:
        yield
    finally:
        app.registered_groups[:] = saved


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def _main() -> int:
    from nanobot.cli.app import main

    try:
        main()
    except SystemExit as exc:
        return _exit_code(exc)
    except Exception:  # what the interpreter does with an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def run_cli(
    *args: str | bytes | os.PathLike[str],
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`nanobot *args` in this process; `env` is added to the test's environment (as the
    `{**os.environ, **env}` of a subprocess call), `input` is stdin (empty when None)."""
    argv = ["nanobot", *(os.fsdecode(a) for a in args)]
    data = input.encode("utf-8") if isinstance(input, str) else (input or b"")
    fds = [_file(data), _file(), _file()]
    stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(os.dup(fds[0]), "r")), encoding="utf-8")
    stdout = _writer(fds[1], errors="strict", line_buffering=False)
    stderr = _writer(fds[2], errors="backslashreplace", line_buffering=True)
    threads_before = set(threading.enumerate())
    saved_argv = sys.argv
    try:
        with (
            _environment(env, cwd),
            _signal_handlers(),
            _process_state(),
            _typer_groups(),
            _at_exit(argv),
            _on_descriptors(fds, (stdin, stdout, stderr)),
            _logging_to(stderr),
        ):
            sys.argv = argv
            try:
                code = _main()
            finally:
                sys.argv = saved_argv
            for thread in set(threading.enumerate()) - threads_before:
                if not thread.daemon:
                    thread.join()  # the interpreter waits for these before it exits
            stdout.flush()
            stderr.flush()
        return subprocess.CompletedProcess(argv, code, _text(fds[1]), _text(fds[2]))
    finally:
        for stream in (stdin, stdout, stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.close()
        for fd in fds:
            os.close(fd)
