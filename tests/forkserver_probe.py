"""`python -m forkserver_probe WHAT` (from tests/), or `python tests/forkserver_probe.py WHAT`: prints, as JSON, the process state a fork
server child must share with a fresh interpreter, then ends the way WHAT says. tests/test_forkserver.py
runs it both ways and compares."""

from __future__ import annotations

import atexit
import gc
import json
import logging
import os
import random
import signal
import sys
import threading
import time


def _stream(s) -> dict:
    return {
        "fileno": s.fileno(),
        "isatty": s.isatty(),
        "encoding": s.encoding,
        "errors": s.errors,
        "line_buffering": s.line_buffering,
        "write_through": s.write_through,
        "newlines": s.newlines,
        "name": s.buffer.raw.name if hasattr(s.buffer, "raw") else s.buffer.name,
        "mode": s.mode,
    }


def _handlers() -> dict:
    found = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        found[
            signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(int(sig))
        ] = handler if isinstance(handler, int) else getattr(handler, "__qualname__", repr(handler))
    return found


def _terminal() -> list | None:
    """The settings of the terminal on stdin (modes, control characters, size), if it is one."""
    if not os.isatty(0):
        return None
    import termios

    attrs = termios.tcgetattr(0)
    return [
        *attrs[:6],
        [c if isinstance(c, int) else c.decode("latin-1") for c in attrs[6]],
        list(os.get_terminal_size(0)),
    ]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def state() -> dict:
    return {
        "argv": sys.argv[1:],
        "argv0": os.path.basename(sys.argv[0]),
        "orig_argv": sys.orig_argv[1:],
        "path0": sys.path[0],
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": _umask(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))[
            :-1
        ],  # less the one listdir used
        "stdin": _stream(sys.stdin),
        "stdout": _stream(sys.stdout),
        "stderr": _stream(sys.stderr),
        "dunder_streams_are_the_streams": [
            sys.__stdin__ is sys.stdin,
            sys.__stdout__ is sys.stdout,
            sys.__stderr__ is sys.stderr,
        ],
        "signals": _handlers(),
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "threads": threading.active_count(),
        "main_thread": threading.current_thread() is threading.main_thread(),
        "exit_handlers": atexit._ncallbacks(),
        "gc_enabled": gc.isenabled(),
        "root_logger": [logging.getLogger().level, len(logging.getLogger().handlers)],
        "flags": list(sys.flags),
        "main_module": getattr(sys.modules["__main__"].__spec__, "name", None),  # None for a script
        "tz": [time.timezone, time.tzname],
        "pgid_is_parents": os.getpgid(0) == os.getpgid(os.getppid()),
        "executable": sys.executable,
        "session_leader": os.getsid(0) == os.getpid(),
        "foreground": os.tcgetpgrp(0) == os.getpgrp() if os.isatty(0) else None,
        "terminal": _terminal(),
        "random": random.random(),  # a new value in every process
    }


def main() -> None:
    what = sys.argv[1]
    if what == "state":
        print(json.dumps(state()))
        return
    if what == "ending":
        # what the interpreter does at exit: joins this thread, runs the handler, flushes stdout
        atexit.register(lambda: print("exit handler ran", file=sys.stderr))
        threading.Thread(
            target=lambda: (time.sleep(0.2), print("thread finished", file=sys.stderr))
        ).start()
        sys.stdout.write("unflushed, no newline")
        return
    if what == "exit":
        sys.exit(int(sys.argv[2]))
    if what == "raise":
        raise RuntimeError("the probe failed")
    if what == "interrupt":
        raise KeyboardInterrupt
    if what == "sleep":
        # a suite started under nohup hands its children SIGHUP ignored; the tests want the hangup
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        print("sleeping", flush=True)
        time.sleep(60)
    if what == "count":
        # nanobot's first exact count, and whether tiktoken had the encoding built before it
        import tiktoken.registry
        from nanobot import tokens

        built = tokens.OFFLINE_ENCODING in tiktoken.registry.ENCODINGS
        text = "Grüße aus Köln: 日本語のテキスト, def f(x): return x ** 2  # done"
        print(
            json.dumps(
                {
                    "built": built,
                    "count": tokens.count_text(text),
                    "estimator": tokens.estimator_name(),
                }
            )
        )


if __name__ == "__main__":
    main()
