"""Streams a markdown answer to the terminal so that all of it stays readable.

A rich `Live` can only redraw what is still on the screen: an answer taller than the terminal
leaves stale copies in the scrollback, and a console built with `soft_wrap=True` cuts every
paragraph at the terminal's width. So finished blocks (those followed by a blank line and a new
block, outside code fences) are printed once, for good, wrapped to the width; only the block
still being written is live, and only its last screenful is shown until it is finished.
"""

from __future__ import annotations

import re
import time

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def split_finished(text: str) -> tuple[str, str]:
    """(finished blocks, the block still being written). Cuts only at a blank line outside a code
    fence that is followed by an unindented line, so a list item's continuation is never cut off."""
    lines = text.split("\n")
    fence: str | None = None
    cut = 0  # index of the first line that is not finished
    blank_at: int | None = None
    for i, line in enumerate(lines[:-1]):  # the last piece may be a half-written line
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            if blank_at is not None:
                cut = blank_at
            blank_at = None
            fence = match.group(1)
            continue
        if not line.strip():
            blank_at = i if blank_at is None else blank_at
        elif blank_at is not None:
            if not line.startswith((" ", "\t")):
                cut = blank_at
            blank_at = None
    if cut == 0:
        return "", text
    return "\n".join(lines[:cut]), "\n".join(lines[cut:]).lstrip("\n")


class _Tail:
    """The last `height` lines of a markdown block (the newest text), wrapped to the width, and
    the line the cursor waits on."""

    def __init__(self, markdown: Markdown, height: int) -> None:
        self.markdown = markdown
        self.height = height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # wrapped between words like the printed blocks: the console soft-wraps (for the prompt's
        # sake), which would leave a long paragraph on one line, cut at the edge, until it ends
        wrapped = options.update(height=None, no_wrap=False, overflow="fold")
        lines = console.render_lines(self.markdown, wrapped, pad=False)
        for line in lines[-self.height :]:
            yield from line
            yield Segment.line()
        # the cursor waits on a line of its own: a "^C" the terminal echoes after a full-width line
        # would start a new line the live display does not know of, and its erasing would leave
        # the top line (a heading) behind on screen
        yield Segment(" ")


class MarkdownStream:
    """Feed it the growing answer; call `finish` once the answer is complete."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.printed = 0  # characters of the answer already printed for good
        self.text = ""
        self._blocks = 0
        self._live: Live | None = None
        self._drawn_at = 0.0

    def update(self, text: str) -> None:
        """`text` is the whole answer so far."""
        grew_a_line = "\n" in text[len(self.text) :]
        self.text = text
        tail = text[self.printed :]
        if (
            grew_a_line
        ):  # a block can only finish at a new line; scanning on every word would be quadratic
            done, tail = split_finished(tail)
            if done:
                self._print(done)
                self.printed = len(text) - len(tail)
        if tail.strip():
            self._show_live(tail)

    def finish(self) -> None:
        if self._live is not None:
            self._live.update("")
            self._live.stop()
            self._live = None
        rest = self.text[self.printed :]
        if rest.strip():
            self._print(rest)
        self.printed = len(self.text)

    def _print(self, block: str) -> None:
        if self._live is not None:
            self._live.update("")  # the live copy is replaced by the printed one
        if self._blocks:
            self.console.print()  # the blank line markdown puts between blocks
        self.console.print(Markdown(block), soft_wrap=False)
        self._blocks += 1

    def _show_live(self, tail: str) -> None:
        height = max(3, self.console.size.height - 2)
        renderable = _Tail(Markdown(tail), height)
        # drawn from this thread only (no refresh thread racing the permanent prints), at most ~12/s
        if self._live is None:
            self._live = Live(
                renderable,
                console=self.console,
                auto_refresh=False,
                transient=True,
                vertical_overflow="visible",
            )
            self._live.start()
            self._live.refresh()
            self._drawn_at = time.monotonic()
        elif time.monotonic() - self._drawn_at >= 1 / 12:
            self._live.update(renderable, refresh=True)
            self._drawn_at = time.monotonic()
        else:
            self._live.update(renderable)
