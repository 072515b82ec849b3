"""What of a turn is saved, in what form, and how a saved message is sent again.

1. Each new message is saved as soon as it exists (TurnCheckpoint), appended durably.
2. Secrets are masked before anything is written.
3. A user message keeps its runtime context beside its text (session/runtime_context.py);
   a message that was only the context is not saved.
4. Empty assistant messages (no text, no tool calls) are not saved.
5. Tool results longer than MAX_TOOL_RESULT_CHARS are cut, with a marker (the model saw them
   whole during the turn); inline images become a placeholder naming the file.
6. Every saved message has a timestamp.
`as_sent` is the way back: the stored message as the model saw it, so every request repeats
earlier ones byte for byte and the provider's prompt cache keeps hitting.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from nanobot.messages import Message, now_iso
from nanobot.secrets_mask import mask_message
from nanobot.session.runtime_context import (
    RUNTIME_CONTEXT_KEY,
    split_runtime_context,
    strip_runtime_context,
    with_runtime_context,
)

__all__ = [
    "MAX_TOOL_RESULT_CHARS",
    "cap_tool_result",
    "prepare_for_save",
    "as_sent",
    "save_turn",
    "TurnCheckpoint",
    "TurnStore",
]

# the store asks as_sent, so this module names what it needs of a store instead of importing it
SessionT = TypeVar("SessionT")
SessionT_contra = TypeVar("SessionT_contra", contravariant=True)


class TurnStore(Protocol[SessionT_contra]):
    """What saving a turn needs of a store: SessionStore, or anything that appends the same way."""

    def append(self, session: SessionT_contra, messages: list[Message], /) -> None: ...


MAX_TOOL_RESULT_CHARS = 16_000


def as_sent(msg: Message) -> Message:
    """A stored message as the model saw it: a user message gets its runtime-context block back."""
    if not isinstance(msg, dict):
        return msg
    content = msg.get("content")
    if (
        msg.get("role") == "tool"
        and isinstance(content, str)
        and len(content) > MAX_TOOL_RESULT_CHARS
    ):
        # written by another tool or an older version: sent (and counted) at the size a save keeps
        return {**msg, "content": cap_tool_result(content)}
    context = msg.get(RUNTIME_CONTEXT_KEY)
    if not context or msg.get("role") != "user" or not isinstance(content, str):
        return msg
    return {**msg, "content": with_runtime_context(context, content)}


def cap_tool_result(content: str) -> str:
    """A tool result at the size a session keeps: the first MAX_TOOL_RESULT_CHARS and a marker."""
    if len(content) <= MAX_TOOL_RESULT_CHARS:
        return content
    cut = len(content) - MAX_TOOL_RESULT_CHARS
    return content[:MAX_TOOL_RESULT_CHARS] + f"\n... [truncated: {cut} more characters]"


def prepare_for_save(msg: Message) -> Message | None:
    """The stored form of one new message (secrets masked), or None when it should not be saved."""
    role = msg.get("role")
    out = mask_message(msg)
    content = out.get("content")
    if isinstance(content, list):
        content = out["content"] = _stored_parts(content, strip_context=role == "user")
    if role == "user":
        if isinstance(content, str):
            context, stripped = split_runtime_context(
                content
            )  # a block inside the text: older callers
            if context is not None:
                out["content"] = stripped
                out[RUNTIME_CONTEXT_KEY] = context
            if out.get(RUNTIME_CONTEXT_KEY) and not stripped.strip():
                return None  # the message was only the runtime context
        elif isinstance(content, list) and not content:
            return None
    elif role == "assistant":
        if not (content.strip() if isinstance(content, str) else content) and not out.get(
            "tool_calls"
        ):
            return None
    elif role == "tool" and isinstance(content, str) and len(content) > MAX_TOOL_RESULT_CHARS:
        out["content"] = cap_tool_result(content)
    out.setdefault("timestamp", now_iso())
    return out


def _stored_parts(parts: list, *, strip_context: bool) -> str | list:
    stored: list = []
    for index, part in enumerate(parts):
        if isinstance(part, dict) and part.get("type") == "image_url":
            url = (
                (part.get("image_url") or {}).get("url", "")
                if isinstance(part.get("image_url"), dict)
                else ""
            )
            if isinstance(url, str) and url.startswith("data:"):
                hint = (
                    part.get("path")
                    or part.get("_path")
                    or (part.get("image_url") or {}).get("_path")
                )
                stored.append({"type": "text", "text": f"[image: {hint or 'inline image'}]"})
                continue
        if strip_context and index == 0 and isinstance(part, dict) and part.get("type") == "text":
            text = strip_runtime_context(str(part.get("text", "")))
            if text != part.get("text") and not text.strip():
                continue
            part = {**part, "text": text}
        stored.append(part)
    if stored and all(isinstance(p, dict) and p.get("type") == "text" for p in stored):
        return "\n".join(str(p.get("text", "")) for p in stored)
    return stored


def save_turn(
    store: TurnStore[SessionT], session: SessionT, messages: list[Message], skip: int = 0
) -> list[Message]:
    """Append this turn's new messages durably; returns what was stored.

    `skip` is the number of messages at the START of `messages` not to save (e.g. an injected
    subagent result, or the system prompt and history when the caller passes the whole request).
    """
    stored = [m for m in (prepare_for_save(msg) for msg in messages[skip:]) if m is not None]
    store.append(session, stored)
    return stored


class TurnCheckpoint(Generic[SessionT]):
    """Saves a growing turn step by step: each `save` appends only what was not saved yet.

    The agent loop creates one per turn with the full request list and `skip` = the number of
    messages that are not new (system prompt, history, injected messages), then calls `save`
    after the user message and after every finished tool step.
    """

    def __init__(self, store: TurnStore[SessionT], session: SessionT, skip: int = 0) -> None:
        self.store = store
        self.session = session
        self.saved_up_to = skip

    def save(self, messages: list[Message]) -> list[Message]:
        stored = save_turn(self.store, self.session, messages, skip=self.saved_up_to)
        self.saved_up_to = len(messages)
        return stored
