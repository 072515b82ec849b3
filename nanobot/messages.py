"""The message shape used everywhere inside nanobot: OpenAI chat-completions dicts.

    {"role": "system" | "user" | "assistant" | "tool",
     "content": str | list[content parts] | None,
     "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": <JSON str>}}],
     "tool_call_id": str, "name": str,          # tool results
     "reasoning_content": str,                   # thinking text, assistant only
     "timestamp": ISO-8601 str}                  # session bookkeeping, never sent

`Message` is this shape as a TypedDict (mypy checks every key), with the bookkeeping keys a stored
message may also carry. Providers translate it to their wire format; sessions store it one per line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final, TypedDict, cast


class Message(TypedDict, total=False):
    """One message as nanobot keeps it (the shape drawn above); every key is optional to mypy."""

    role: str  # "system" | "user" | "assistant" | "tool"
    content: Any  # str | list of content parts | None
    tool_calls: list[dict[str, Any]]
    tool_call_id: str
    name: str
    reasoning_content: str
    thinking_blocks: list[dict[str, Any]]  # Anthropic's signed thinking, replayed within a turn
    reasoning_details: list[dict[str, Any]]  # MiniMax's structured thinking, replayed within a turn
    timestamp: str  # bookkeeping from here on: never sent
    runtime_context: str  # session/runtime_context.py: RUNTIME_CONTEXT_KEY
    subagent: dict[str, Any]  # NOTE_KEY: a helper's end, recorded in a stored user message


# Keys a provider may receive; everything else (timestamp, ...) is bookkeeping.
WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content")
# The key of a nanobot note's structured record (a helper's end) in a stored user message; never sent.
NOTE_KEY: Final = "subagent"
NO_OUTPUT = "(no output)"  # what a blank tool result says on the wire (session/validity.py rule 5)


_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def clean_unicode(value: Any) -> Any:
    """`value` with every lone surrogate replaced by U+FFFD, through lists and dicts.

    Lone surrogates are how Python carries bytes that are not UTF-8 (argv, file names, a
    model's "\\ud800"); they cannot be encoded, so one of them would stop a save or a request.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return _SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, list):
        return [clean_unicode(v) for v in value]
    if isinstance(value, dict):
        return {clean_unicode(k): clean_unicode(v) for k, v in value.items()}
    return value


def now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def parse_iso(value: object) -> datetime | None:
    """An ISO-8601 time as written (aware when it names an offset or Z); None when missing or unreadable.
    The one ISO parser: message timestamps, session times and `cron --at` all go through it."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return datetime.fromisoformat(value.strip())
    except ValueError:
        return None


def parse_timestamp(value: object) -> datetime | None:
    """A message's ISO-8601 `timestamp` as local naive time; None when missing or unreadable."""
    when = parse_iso(value)
    if when is None:
        return None
    return when.astimezone().replace(tzinfo=None) if when.tzinfo else when


def user(content: Any) -> Message:
    return {"role": "user", "content": content}


def assistant(
    content: str | None,
    tool_calls: list[dict] | None = None,
    *,
    reasoning_content: str | None = None,
) -> Message:
    msg: Message = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    if reasoning_content:
        msg["reasoning_content"] = reasoning_content
    return msg


def tool_result(call_id: str, name: str, content: str) -> Message:
    return {
        "role": "tool",
        "tool_call_id": call_id,
        "name": name,
        "content": clean_unicode(content),
    }


def tool_call(call_id: str, name: str, arguments: dict | str) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    args = clean_unicode(args)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def text_of(content: Any) -> str:
    """The plain text of a content value (a string, or a list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def tool_calls_of(msg: Mapping[str, Any]) -> list[dict]:
    """The message's tool calls that are at least dicts with a dict `function` (stored files can hold anything)."""
    calls = msg.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c for c in calls if isinstance(c, dict) and isinstance(c.get("function", {}), dict)]


def for_wire(msg: Message) -> Message:
    """A copy of `msg` with only the keys a provider may receive."""
    keys: Mapping[str, Any] = msg  # the keys are named by a tuple, not literals
    return cast(Message, {k: keys[k] for k in WIRE_KEYS if k in keys})


def cut_middle(text: str, keep: int, marker: Callable[[int], str]) -> str:
    """`text` whole when it has at most `keep` characters; otherwise its first two thirds of `keep`,
    `marker(characters cut)`, and its last third. The one head-and-tail cut: the budget's shrinking,
    transcripts, the RAW archive and large pastes all cut this way."""
    keep = max(0, keep)
    if len(text) <= keep:
        return text
    head = keep * 2 // 3
    tail = keep - head
    return text[:head] + marker(len(text) - keep) + (text[len(text) - tail :] if tail else "")


def transcript_lines(
    msg: Mapping[str, Any],
    *,
    text_chars: int | None = None,
    tool_chars: int | None = None,
    arg_chars: int | None = None,
    note: str = "",
) -> list[str]:
    """One message as transcript lines, the one rendering of a message as text (consolidation's
    transcript, HISTORY.md's RAW archive): `ROLE: text`, `TOOL RESULT (name): text` and
    `ROLE called name(args)`; a system message gives none. Text over its limit keeps its head and
    tail around a marker saying how much was cut (and `note`, e.g. where the rest is)."""

    def cut(text: str, limit: int | None) -> str:
        if limit is None:
            return text
        return cut_middle(text, limit, lambda n: f" …[{n} characters cut{note}]… ")

    role = str(msg.get("role", "?"))
    if role == "system":
        return []
    text = text_of(msg.get("content")).strip()
    if role == "tool":
        name = msg.get("name") or msg.get("tool_call_id") or "tool"
        return [f"TOOL RESULT ({name}): {cut(text, tool_chars)}"]
    lines = [f"{role.upper()}: {cut(text, text_chars)}"] if text else []
    for call in tool_calls_of(msg):
        fn = call.get("function") or {}
        args = fn.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        lines.append(f"{role.upper()} called {fn.get('name', '?')}({cut(args, arg_chars)})")
    return lines
