"""The user's message from argv or piped stdin, as text that can always be saved and sent.

Bytes that are not UTF-8 become U+FFFD (with a warning), instead of a traceback that loses
the message.
"""

from __future__ import annotations

import sys

from nanobot.cli.errors import print_warning
from nanobot.messages import REPLACEMENT, clean_unicode


def _warn(count: int, where: str) -> None:
    print_warning(
        f"{count} byte(s) in the message {where} were not valid UTF-8 and were replaced by "
        f"{REPLACEMENT}"
    )


def from_argv(text: str) -> str:
    # Python keeps undecodable argv bytes as lone surrogates (surrogateescape)
    cleaned = clean_unicode(text)
    if cleaned != text:
        _warn(sum(1 for a, b in zip(text, cleaned) if a != b), "given with -m")
    return cleaned


def from_stdin() -> str:
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        _warn(
            len(data) - len(data.decode("utf-8", errors="ignore").encode("utf-8")),
            "read from stdin",
        )
        return data.decode("utf-8", errors="replace")


def message_or_stdin(
    message: str | None, *, empty: str, hint: str, instead: str | None = None
) -> str | None:
    """The message given with -m, else piped stdin's text when stdin is not a terminal (None: a
    terminal, so the chat runs). An empty or closed stdin is a UsageError saying `empty`, `hint`;
    with `instead`, it is that message, after a note on stderr saying `empty` and `hint`."""
    if message is not None:
        return from_argv(message)
    if sys.stdin is None or not sys.stdin.isatty():
        text = from_stdin() if sys.stdin is not None else ""
        if not text.strip():
            if instead is not None:
                print_warning(f"{empty}. {hint}")
                return instead
            from nanobot.errors import UsageError

            raise UsageError(empty, hint=hint)
        return text
    return None
