"""Turns agent events into what the user sees: streamed text, spinner, tool hints, errors."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from nanobot.agent.events import (
    Event,
    Notice,
    Retrying,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnDone,
)
from nanobot.cli.errors import say

if TYPE_CHECKING:
    from rich.status import Status  # the spinner's; Console.status() imports it when one is drawn

    from nanobot.cli.markdown_stream import MarkdownStream

# rich.markdown (with markdown-it and pygments, ~40 ms) is imported only when an answer is drawn as
# markdown on a terminal: a piped one-shot answer is written as plain text without it


class Renderer:
    """Renders one turn. `markdown` re-renders the streamed answer live; plain mode writes raw text."""

    def __init__(
        self,
        console: Console,
        *,
        markdown: bool,
        progress: Console | None = None,
        stream_text: bool = True,
        spinner: bool = True,
    ) -> None:
        self.console = console
        self.progress = progress or console  # hints and spinner (stderr in one-shot mode)
        self.markdown = markdown and console.is_terminal
        self.stream_text = stream_text
        self.spinner = spinner
        self.buffer = ""
        self._live: MarkdownStream | None = None
        self._status: Status | None = None
        self._waiting: Waiting | None = None  # the spinner's label (and since when it has waited)
        self._wrote_plain = False
        self._held: list[Notice] = []  # notices that came while an answer streamed

    # spinner -----------------------------------------------------------------------------
    def thinking(self, label: str = "thinking…") -> None:
        if not (self.spinner and self.progress.is_terminal):
            return
        self._end_text()
        self._show_spinner(Waiting(label))

    def _show_spinner(self, waiting: Waiting) -> None:
        self._waiting = waiting
        if self._status is None:
            self._status = self.progress.status(waiting, spinner="dots")
            self._status.start()
        else:
            self._status.update(waiting)

    def _stop_spinner(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _say(self, console: Console, markup: str) -> None:
        """One of nanobot's lines while the spinner may be up: the spinner is taken down first and
        put back after, still counting. Printed over a live spinner, rich moves the cursor back over
        the frame it last drew; in the spinner's first tick it has drawn none yet, and a frame drawn
        meanwhile stayed in front of the line ("⠋ thinking…the model returned…")."""
        waiting = self._waiting if self._status is not None else None
        self._stop_spinner()
        say(console, markup)
        if waiting is not None:
            self._show_spinner(waiting)

    # streamed text -----------------------------------------------------------------------
    def _text(self, chunk: str) -> None:
        if not self.stream_text:
            self.buffer += chunk
            return
        self._stop_spinner()
        self.buffer += chunk
        if self.markdown:
            if self._live is None:
                from nanobot.cli.markdown_stream import MarkdownStream

                self._live = MarkdownStream(self.console)
            self._live.update(self.buffer)
        else:
            self.console.file.write(chunk)
            self.console.file.flush()
            self._wrote_plain = True

    def _end_text(self) -> None:
        if self._live is not None:
            self._live.finish()
            self._live = None
        elif self._wrote_plain and not self.buffer.endswith("\n"):
            self.console.file.write("\n")
            self.console.file.flush()
        self._wrote_plain = False
        if self.stream_text:
            self.buffer = ""
        held, self._held = self._held, []
        for notice in held:
            self._notice(notice)

    # events ------------------------------------------------------------------------------
    def __call__(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self._text(event.text)
        elif isinstance(event, ToolStarted):
            self._end_text()
            self._stop_spinner()
            say(self.progress, f"[dim cyan]  ↳ {escape(event.hint)}[/dim cyan]")
            self.thinking(f"running {event.name}…")
        elif isinstance(event, ToolFinished):
            self._stop_spinner()
            if event.is_error:
                say(self.progress, f"[dim red]    ✗ {escape(event.preview)}[/dim red]")
            self.thinking()
        elif isinstance(event, Retrying):
            cut_short = self.stream_text and bool(self.buffer.strip())
            self._end_text()  # a partial answer stays visible; the retried answer starts on its own line
            self.buffer = ""
            if (
                cut_short
            ):  # the half answer above is marked as such, not left to read as a whole one
                self._say(
                    self.console, "[dim yellow]  … (the answer above was cut off here)[/dim yellow]"
                )
            self._say(
                self.progress,
                f"[dim yellow]  {escape(event.reason)}; retrying in {event.delay:.0f}s "
                f"(attempt {event.attempt + 1})[/dim yellow]",
            )
        elif isinstance(event, Notice):
            if self.stream_text and self.buffer:  # a background line waits for the answer's end
                self._held.append(event)
            else:
                self._end_text()
                self._notice(event)
        elif isinstance(event, TurnDone):
            self.finish()
            if not self.stream_text and event.outcome.content:
                self.show_answer(event.outcome.content)
            if event.outcome.error:  # a failed turn always says so, foreground or background
                self.show_error(event.outcome.error)

    def _notice(self, event: Notice) -> None:
        style = {"warning": "yellow", "error": "bold red"}.get(event.level, "dim")
        self._say(self.progress, f"[{style}]{escape(event.text)}[/{style}]")

    def show_error(self, text: str) -> None:
        from nanobot.cli.errors import report_text

        report_text(text, console=self.progress)  # the one format: error line, then the hint line

    def show_answer(self, text: str) -> None:
        """Print a whole answer at once (for turns that were not streamed)."""
        if self.markdown:
            from rich.markdown import Markdown

            self.console.print(
                Markdown(text), soft_wrap=False
            )  # soft_wrap would cut lines at the width
        else:
            self.console.print(text, markup=False, highlight=False, emoji=False)

    def finish(self) -> None:
        self._stop_spinner()
        self._end_text()


class Waiting:
    """The spinner's label; past a few seconds it says how long it has been waiting (redrawn each tick)."""

    QUIET_SECONDS = 3

    def __init__(self, label: str) -> None:
        self.label = label
        self.started = time.monotonic()

    def __rich__(self) -> Text:
        waited = int(time.monotonic() - self.started)
        if waited < self.QUIET_SECONDS:
            return Text(self.label, style="dim")
        shown = f"{waited}s" if waited < 60 else f"{waited // 60}m {waited % 60:02d}s"
        return Text(f"{self.label} {shown} (Ctrl-C to stop)", style="dim")


def escape(text: str) -> str:
    from rich.markup import escape as _escape

    return _escape(text)


def print_hanging(console: Console, line: str, *, indent: int) -> None:
    """A plain `label  value` line word-wrapped to the terminal, continuation lines indented
    under the value (the stdout console soft-wraps, which would break words at the edge)."""
    import textwrap

    from rich.text import Text

    width = max(console.width, indent + 20)
    wrapped = textwrap.fill(
        line, width=width, subsequent_indent=" " * indent, break_on_hyphens=False
    )
    console.print(Text(wrapped), highlight=False, soft_wrap=True)
