"""A real pseudo-terminal with a screen emulator behind it: what a user would see, scrollback included."""

from __future__ import annotations

import os
import re
import sys
import time
from collections import deque

import pexpect
import pyte

import forkserver


class Scrollback(pyte.Screen):
    """pyte's screen keeping the lines that scroll off its top (`history`), as pyte's HistoryScreen
    does for a terminal that is never paged back: HistoryScreen wraps every attribute read of the
    screen in Python code, which was most of the time spent feeding it the output."""

    def __init__(self, columns: int, rows: int, history: int) -> None:
        self.history: deque = deque(maxlen=history)
        super().__init__(columns, rows)

    def reset(self) -> None:
        super().reset()
        self.history.clear()

    def erase_in_display(self, how: int = 0, *args, **kwargs) -> None:
        super().erase_in_display(how, *args, **kwargs)
        if how == 3:  # the scrollback too
            self.history.clear()

    def index(self) -> None:
        top, bottom = self.margins or pyte.screens.Margins(0, self.lines - 1)
        if self.cursor.y == bottom:
            self.history.append(self.buffer[top])
        super().index()


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
        self.timeout = timeout
        self._start_screen(columns, rows)
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

    def _start_screen(self, columns: int, rows: int) -> None:
        self.columns, self.rows = columns, rows
        self.screen = Scrollback(columns, rows, history=100_000)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        # what `lines()` and `drawn()` last made, dropped when new output arrives: a wait polls five
        # times a second and compares after each read, and rendering the screen is the costly part
        self._lines: list[str] | None = None
        self._text: str | None = None
        self._drawn: str | None = None
        # a line that scrolled into the history never changes again: each is rendered once
        self._history: dict[int, tuple[object, str]] = {}

    def _pump(self, wait: float) -> bool:
        try:
            data = self.child.read_nonblocking(65536, timeout=wait)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        self._feed(data)
        return True

    def _feed(self, data: bytes) -> None:
        self.raw += data
        self.stream.feed(data)
        self._lines = self._text = self._drawn = None

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
        if self._drawn is None:
            self._drawn = re.sub(
                r"\x1b(\[[0-9;?]*[ -/]*[@-~]|[()][0-9A-Za-z]|[=>78])",
                "",
                self.raw.decode("utf-8", "replace"),
            )
        return self._drawn

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

    def _row(self, line) -> str:
        """One line as text: pyte keeps only the cells written to (a missing one is a blank)."""
        cells = [" "] * self.columns
        for x, char in line.items():
            if x < self.columns:
                cells[x] = char.data
        return "".join(cells).rstrip()

    def lines(self) -> list[str]:
        if self._lines is None:
            lines = []
            for line in self.screen.history:
                seen = self._history.get(id(line))
                if seen is None or seen[0] is not line:
                    seen = self._history[id(line)] = (line, self._row(line))
                lines.append(seen[1])
            lines += [self._row(self.screen.buffer[y]) for y in range(self.rows)]
            while lines and not lines[-1]:
                lines.pop()
            self._lines = lines
        return list(self._lines)

    def text(self) -> str:
        if self._text is None:
            self._text = "\n".join(self.lines())
        return self._text

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
