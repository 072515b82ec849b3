"""The one error reporter of the CLI. Every failure the user sees has the same shape:

    error: <what went wrong, naming the file, key or URL>
    hint: <what to do about it>

Typed errors (nanobot.errors) carry their exit code: 1 runtime, 2 usage or config;
an OSError that reaches the edge is reported like a StorageError (exit 1).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from nanobot.errors import NanobotError, storage_error

if TYPE_CHECKING:
    from rich.console import Console

# rich is imported when something is printed, not with this module: the read-only commands
# (`history grep`, `memory show`) import it only on a terminal or on an error.


def _stderr() -> Console:
    from rich.console import Console

    console = Console(stderr=True, highlight=False)
    console.soft_wrap = (
        not console.is_terminal
    )  # a terminal wraps at words; a log keeps whole lines
    return console


def say(console: Console, markup: str) -> None:
    """Print one of nanobot's own lines (an error, warning, retry, notice, receipt, question header).
    On a terminal it is wrapped between words: the chat's consoles soft-wrap, for streamed answers,
    which lets the terminal cut a long line mid-word. Piped, each line stays whole. An indented line
    keeps its indent on every wrapped line, so a retry line never reads as part of the answer."""
    if console.is_terminal:
        from rich.padding import Padding
        from rich.text import Text

        text = Text.from_markup(markup)
        indent = len(text.plain) - len(text.plain.lstrip(" "))
        if indent:
            console.print(
                Padding(text[indent:], (0, 0, 0, indent), expand=False),
                highlight=False,
                soft_wrap=False,
            )
            return
    console.print(markup, highlight=False, soft_wrap=not console.is_terminal)


def print_error(message: str, hint: str | None = None, *, console: Console | None = None) -> None:
    from rich.markup import escape

    console = console or _stderr()
    say(console, f"[bold red]error:[/bold red] {escape(message)}")
    if hint:
        say(console, f"[dim]hint:[/dim] {escape(hint)}")


def print_warning(message: str, *, console: Console | None = None) -> None:
    from rich.markup import escape

    say(console or _stderr(), f"[yellow]warning:[/yellow] {escape(message)}")


def as_nanobot_error(exc: BaseException) -> NanobotError:
    if isinstance(exc, NanobotError):
        return exc
    if isinstance(exc, OSError):
        writing = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
        return storage_error(exc, "write" if writing else "access")
    raise TypeError(f"not a reportable error: {exc!r}")


def report(exc: BaseException, *, console: Console | None = None) -> int:
    """Print `exc` in the one format; returns the exit code for it."""
    error = as_nanobot_error(exc)
    print_error(error.message, error.hint, console=console)
    return error.exit_code


def report_text(text: str, *, console: Console | None = None) -> None:
    """An error that reached us as text (a turn's error): first line the message, the rest the hint."""
    message, _, hint = text.strip().partition("\n")
    print_error(message, hint.strip() or None, console=console)


@contextmanager
def reported() -> Iterator[None]:
    """Around a command body: our errors become the message and their exit code (sub-apps run alone too)."""
    try:
        yield
    except (NanobotError, OSError) as exc:
        raise typer.Exit(report(exc)) from None
