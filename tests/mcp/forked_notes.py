"""notes_server.py, forked from a helper that imported the MCP SDK once.

`python forked_notes.py SOCKET [stdio | streamable-http PORT | sse PORT]` acts as
`python notes_server.py ...`: SOCKET is a fork server (tests/forkserver.py) that preloaded the
SDK, which this process asks for a child running `python notes_server.py ...` on our stdin, stdout
and stderr, with our environment and folder; then it waits for the child and leaves as it left
(its exit code, or the signal that ended it). SIGTERM, SIGINT and SIGHUP sent to us go on to the
server, and we keep no copy of its stdio, so a stdio client sees the pipes close when the server
ends. Where the helper cannot give the server what a fresh process would get (see forkserver.py),
the server starts here instead, as a fresh interpreter.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # tests/, for forkserver
import forkserver  # noqa: E402

SERVER = str(Path(__file__).with_name("notes_server.py"))


def main() -> None:
    argv = [sys.executable, SERVER, *(sys.argv[2:] or ["stdio"])]
    try:
        child = forkserver.ForkServer.attach(sys.argv[1]).popen(
            argv, stdin=0, stdout=1, stderr=2, cwd=os.getcwd()
        )
    except forkserver.ForkServerError:
        os.execv(sys.executable, argv)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda sig, _frame: child.send_signal(sig))
    code = child.wait()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
