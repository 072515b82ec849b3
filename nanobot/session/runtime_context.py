"""The runtime-context block: the time and channel the current user message is sent with.

The block is not part of what the user said. A user message carries its body beside the text,
under RUNTIME_CONTEXT_KEY (stored that way, never a wire key), and `with_runtime_context` is the
one place the block is written, when the message is sent. `split_runtime_context` reads a block
back only from text that already holds one (written by an older version or another tool).

    [Runtime Context]
    Current time: 2026-03-01 10:00 (Sunday) CET (UTC+01:00)
    Channel: cli
    Chat ID: direct
    [/Runtime Context]

    the user's own text
"""

from __future__ import annotations

from typing import Final

from nanobot.messages import Message

__all__ = [
    "RUNTIME_CONTEXT_OPEN",
    "RUNTIME_CONTEXT_CLOSE",
    "RUNTIME_CONTEXT_KEY",
    "user_with_context",
    "with_runtime_context",
    "split_runtime_context",
    "strip_runtime_context",
]

RUNTIME_CONTEXT_OPEN = "[Runtime Context]"
RUNTIME_CONTEXT_CLOSE = "[/Runtime Context]"
RUNTIME_CONTEXT_KEY: Final = "runtime_context"  # beside a user message's text; never a wire key


def user_with_context(text: str, context: str) -> Message:
    """A user message: the user's text, and the runtime context kept apart from it."""
    return {"role": "user", "content": text, RUNTIME_CONTEXT_KEY: context}


def with_runtime_context(context: str, text: str) -> str:
    """The current user message as the model reads it: the context block, a blank line, the text."""
    return f"{RUNTIME_CONTEXT_OPEN}\n{context}\n{RUNTIME_CONTEXT_CLOSE}\n\n{text}"


def split_runtime_context(text: str) -> tuple[str | None, str]:
    """(the runtime-context block's body or None, the user's own text)."""
    if not text.startswith(RUNTIME_CONTEXT_OPEN + "\n"):
        return None, text
    end = text.find("\n" + RUNTIME_CONTEXT_CLOSE, len(RUNTIME_CONTEXT_OPEN))
    if end == -1:
        return None, text  # no closing line: this is not our block, keep the user's text whole
    rest = text[end + 1 + len(RUNTIME_CONTEXT_CLOSE) :]
    if rest and not rest.startswith("\n"):
        return None, text  # the close marker must be a whole line
    rest = rest[1:]  # the end of the close line
    context = text[len(RUNTIME_CONTEXT_OPEN) + 1 : end]
    return context, rest[1:] if rest.startswith("\n") else rest  # the blank line after the block


def strip_runtime_context(text: str) -> str:
    """The user's own text: a leading runtime-context block (and its blank line) removed."""
    return split_runtime_context(text)[1]
