"""A real pseudo-terminal with a screen emulator behind it: what a user would see, scrollback included."""

from __future__ import annotations

import os
import re
import sys
import time

import pexpect
import pyte

import forkserver


class Terminal:
    """Runs `nanobot ...` in a pty of `columns` x `rows`; `lines()` is the scrollback plus the screen."""

    def __init__(
        self,
        *args: str,
        columns: int = 80,
        rows: int = 24,
        env: dict | None = None,
        timeout: float = 30,
    ) -> None:
        self.columns, self.rows, self.timeout = columns, rows, timeout
        self.screen = pyte.HistoryScreen(columns, rows, history=100_000, ratio=0.001)
        self.stream = pyte.ByteStream(self.screen)
        full_env = {
            **os.environ,
            **(env or {}),
            "TERM": "xterm",
            "COLUMNS": str(columns),
            "LINES": str(rows),
            "PYTHONUNBUFFERED": "1",
            "PROMPT_TOOLKIT_NO_CPR": "1",
        }
        # a real process in a real pty, forked from a helper that has imported nanobot (tests/forkserver.py)
        self.child = forkserver.shared().spawn(
            [sys.executable, "-m", "nanobot", *args],
            env=full_env,
            dimensions=(rows, columns),
            timeout=timeout,
        )
        self.raw = b""

    def _pump(self, wait: float) -> bool:
        try:
            data = self.child.read_nonblocking(65536, timeout=wait)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self.raw += data
        self.stream.feed(data)
        return True

    def wait_for(self, text: str) -> None:
        """Read until `text` is on the screen (or in the scrollback)."""
        deadline = time.monotonic() + self.timeout
        while text not in self.text():
            if time.monotonic() > deadline or not self._pump(0.2):
                if text in self.text():
                    return
                raise AssertionError(f"{text!r} never appeared; screen:\n{self.text()}")

    def wait_for_drawn(self, text: str) -> None:
        """Read until `text` has been drawn, even if it was drawn over since (a spinner's label): the
        output is searched as it came, without its escape sequences, however the reads split it."""
        deadline = time.monotonic() + self.timeout
        while text not in self.drawn():
            if time.monotonic() > deadline or not self._pump(0.2):
                if text in self.drawn():
                    return
                raise AssertionError(f"{text!r} was never drawn; screen:\n{self.text()}")

    def drawn(self) -> str:
        return re.sub(
            r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])",
            "",
            self.raw.decode("utf-8", "replace"),
        )

    def wait_for_count(self, text: str, count: int) -> None:
        deadline = time.monotonic() + self.timeout
        while self.text().count(text) < count:
            if time.monotonic() > deadline or not self._pump(0.2):
                raise AssertionError(f"{text!r} not seen {count} times; screen:\n{self.text()}")

    def send(self, line: str) -> None:
        self.child.send(line + "\r")

    def paste(self, text: str) -> None:
        """Paste `text` and press Enter, as a terminal sends a paste (bracketed: one event, not a
        key press per character, which takes prompt_toolkit about half a millisecond each)."""
        self.child.send("\x1b[200~" + text + "\x1b[201~")
        self.child.send("\r")

    def finish(self) -> int | None:
        """Read until the program exits; its exit status."""
        deadline = time.monotonic() + self.timeout
        while self._pump(0.2):
            if time.monotonic() > deadline:
                self.child.terminate(force=True)
                raise AssertionError(f"still running; screen:\n{self.text()}")
        self.child.close()
        return self.child.exitstatus

    def lines(self) -> list[str]:
        def text(line) -> str:
            return "".join(line[x].data for x in range(self.columns)).rstrip()

        lines = [text(line) for line in self.screen.history.top]
        lines += [text(self.screen.buffer[y]) for y in range(self.rows)]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    def text(self) -> str:
        return "\n".join(self.lines())

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
