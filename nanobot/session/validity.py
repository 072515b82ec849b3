"""The one place that makes a message history valid for every provider (pure, no I/O).

`make_valid` is applied to every outgoing request and to `Session.get_history`; `repair_messages`
applies the structural part of the same rules to a stored session (`nanobot session repair`).

Rules, in the order they are applied by `make_valid`:

0. shape: non-dict entries, unknown roles and `system` messages after the first position are
   dropped; malformed tool_calls entries (no id or function name) are dropped.
1. leading: a leading `system` message is kept, then everything up to the first user message is dropped.
2. orphans: a tool result separated from its call only by assistant text (nanobot 0.3.x files, a
   hand edit) is moved up, right after its call's other results; then a tool result whose id was
   not declared by the assistant message right before it, or was already answered, or is missing,
   is dropped (only that result).
3. backfill: a declared call with no result gets a synthetic "interrupted" result right after the
   real ones; a tool_call id seen earlier in the history is renamed (with its results) so ids are unique.
4. merge: an assistant message without tool_calls is merged into the assistant message that
   follows it (texts joined with a blank line, the later message's tool_calls kept).
5. empties: blank user messages and blank assistant messages without tool_calls are dropped; in a
   request, a blank tool result (None, "", `[]`) says NO_OUTPUT (OpenAI-compatible servers reject
   `[]`, Anthropic an empty block).
6. users (requests only, not `repair_messages`): consecutive user messages are merged into one
   (texts joined with a blank line, or their parts concatenated). Chat templates with strict
   alternation (Gemma, Llama 2 on vLLM) reject two in a row; they occur when a turn failed
   before its answer, and after a subagent's note (nanobot/agent/subagents.py).
7. a history that already follows these rules comes back equal (same content, same order).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, cast

from nanobot.messages import NO_OUTPUT, Message, text_of

__all__ = ["INTERRUPTED_RESULT", "Fixes", "make_valid", "repair_messages", "is_valid", "is_blank"]

INTERRUPTED_RESULT = "[interrupted before it finished: no result was recorded]"

_ROLES = ("system", "user", "assistant", "tool")
_ID_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass
class Fixes:
    """What a pass changed, counted for the user (`session repair` prints it)."""

    dropped_malformed: int = 0
    dropped_leading: int = 0
    dropped_orphans: int = 0
    moved_results: int = 0
    backfilled: int = 0
    renamed_ids: int = 0
    merged_assistants: int = 0
    dropped_empty: int = 0
    merged_users: int = 0

    @property
    def total(self) -> int:
        return (
            self.dropped_malformed
            + self.dropped_leading
            + self.dropped_orphans
            + self.moved_results
            + self.backfilled
            + self.renamed_ids
            + self.merged_assistants
            + self.dropped_empty
            + self.merged_users
        )

    def describe(self) -> list[str]:
        labels = (
            ("dropped_malformed", "malformed messages dropped"),
            ("dropped_leading", "leading non-user messages dropped"),
            ("dropped_orphans", "orphan tool results dropped"),
            ("moved_results", "tool results moved up next to their call"),
            ("backfilled", "missing tool results filled in as interrupted"),
            ("renamed_ids", "duplicate tool-call ids renamed"),
            ("merged_assistants", "consecutive assistant messages merged"),
            ("dropped_empty", "empty messages dropped"),
            ("merged_users", "consecutive user messages merged"),
        )
        return [f"{getattr(self, name)} {label}" for name, label in labels if getattr(self, name)]


def is_blank(content: Any) -> bool:
    """True when a content value carries nothing a provider would accept as a message body."""
    if content is None:
        return True
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") not in (None, "text"):
                return False  # an image or other non-text part is real content
            if isinstance(part, (str, dict)) and text_of([part]).strip():
                return False
        return True
    return not str(content).strip()


def make_valid(messages: list[Message]) -> list[Message]:
    """A new history that every provider accepts; the input is never mutated."""
    out, _, _ = _fix(messages, None, drop_leading=True, drop_empty=True, stamp=False)
    return out


def is_valid(messages: list[Message]) -> bool:
    return make_valid(messages) == list(messages)


def repair_messages(messages: list[Message], pointer: int = 0) -> tuple[list[Message], int, Fixes]:
    """Structural fixes for a stored session: orphans, missing results, duplicate ids, merges.

    Unlike `make_valid` it keeps leading and empty messages (they are the user's record, not a
    request), timestamps synthetic results, and maps the consolidation `pointer` onto the result.
    The part before the pointer and the part after it are fixed separately, so nothing already
    summarised moves into the unconsolidated part or back.
    """
    pointer = max(0, min(pointer, len(messages)))
    head, _, head_fixes = _fix(
        messages[:pointer], None, drop_leading=False, drop_empty=False, stamp=True
    )
    seen = {_id_key(tc["id"]) for m in head for tc in (m.get("tool_calls") or [])}
    tail, _, tail_fixes = _fix(
        messages[pointer:], seen, drop_leading=False, drop_empty=False, stamp=True
    )
    fixes = Fixes(
        **{k: getattr(head_fixes, k) + getattr(tail_fixes, k) for k in Fixes.__dataclass_fields__}
    )
    return head + tail, len(head), fixes


def _fix(
    messages: list[Message],
    seen_ids: set[str] | None,
    *,
    drop_leading: bool,
    drop_empty: bool,
    stamp: bool,
) -> tuple[list[Message], set[str], Fixes]:
    fixes = Fixes()
    shaped = _shape(messages, fixes, drop_empty=drop_empty)
    if drop_leading:
        shaped = _drop_leading(shaped, fixes)
    seen = set(seen_ids or ())
    shaped = _move_late_results(shaped, fixes)
    paired = _merge_assistants(_pair_tool_results(shaped, seen, fixes, stamp=stamp), fixes)
    if drop_leading:  # a request: the stored record keeps the user's messages as they were
        paired = _merge_users(paired, fixes)
    return paired, seen, fixes


def _shape(messages: list[Message], fixes: Fixes, *, drop_empty: bool) -> list[Message]:
    out: list[Message] = []
    for index, raw in enumerate(messages):
        if not isinstance(raw, dict) or raw.get("role") not in _ROLES:
            fixes.dropped_malformed += 1
            continue
        msg = cast(Message, dict(raw))  # a stored message: checked key by key below
        role = msg["role"]
        if role == "system" and index != 0:
            # Anthropic takes the system prompt only as a separate top-level field.
            fixes.dropped_malformed += 1
            continue
        content = msg.get("content")
        if content is not None and not isinstance(content, (str, list)):
            msg["content"] = content = str(content)
        if "tool_calls" in msg:
            # only a non-empty list of well-formed calls on an assistant message survives; OpenAI
            # rejects `tool_calls: []`, and a dict or string here would crash everything downstream
            raw_calls = msg.pop("tool_calls")
            calls = _clean_tool_calls(raw_calls) if isinstance(raw_calls, list) else []
            if raw_calls:
                fixes.dropped_malformed += (
                    len(raw_calls) if isinstance(raw_calls, list) else 1
                ) - len(calls)
            if role == "assistant" and calls:
                msg["tool_calls"] = calls
        if role == "tool":
            if not isinstance(msg.get("tool_call_id"), str) or not msg["tool_call_id"]:
                fixes.dropped_orphans += 1
                continue
            if drop_empty and is_blank(content):  # a request
                msg["content"] = NO_OUTPUT
            elif content is None:
                msg["content"] = ""
        if drop_empty and is_blank(msg.get("content")):
            if role == "user" or (role == "assistant" and not msg.get("tool_calls")):
                fixes.dropped_empty += 1
                continue
        if (
            role == "assistant"
            and msg.get("tool_calls")
            and isinstance(content, str)
            and content
            and not content.strip()
        ):
            # A whitespace-only text block next to tool calls is rejected by Anthropic.
            msg["content"] = None
        out.append(msg)
    return out


def _clean_tool_calls(calls: list) -> list[dict]:
    clean = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        fn = call.get("function")
        if not isinstance(call.get("id"), str) or not call["id"] or not isinstance(fn, dict):
            continue
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            continue
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = json.dumps(args if args is not None else {}, ensure_ascii=False)
        if args == fn.get("arguments") and call.get("type") == "function":
            clean.append(call)
        else:
            clean.append({**call, "type": "function", "function": {**fn, "arguments": args}})
    return clean


def _drop_leading(messages: list[Message], fixes: Fixes) -> list[Message]:
    start = 1 if messages and messages[0]["role"] == "system" else 0
    first_user = next(
        (i for i in range(start, len(messages)) if messages[i]["role"] == "user"), len(messages)
    )
    fixes.dropped_leading += first_user - start
    return messages[:start] + messages[first_user:]


def _move_late_results(messages: list[Message], fixes: Fixes) -> list[Message]:
    """Rule 2's first half: results that come after assistant text (before the next user message
    or the next call) move up to just after their call's results, so the real result is sent."""
    out: list[Message] = []
    moved: set[int] = set()
    for index, msg in enumerate(messages):
        if index in moved:
            continue
        out.append(msg)
        if msg["role"] != "assistant" or not msg.get("tool_calls"):
            continue
        end = index + 1
        while end < len(messages) and messages[end]["role"] == "tool":
            end += 1
        missing = Counter(c["id"] for c in msg["tool_calls"]) - Counter(
            m["tool_call_id"] for m in messages[index + 1 : end]
        )
        later = end
        while (
            +missing
            and later < len(messages)
            and messages[later]["role"] in ("assistant", "tool")
            and not messages[later].get("tool_calls")
        ):
            late = messages[later]
            if late["role"] == "tool" and missing[late["tool_call_id"]] > 0:
                missing[late["tool_call_id"]] -= 1
                moved.add(later)
            later += 1
        if moved.intersection(range(end, later)):
            out += messages[index + 1 : end] + [
                messages[i] for i in sorted(moved.intersection(range(end, later)))
            ]
            moved.update(range(index + 1, end))
            fixes.moved_results += len(moved.intersection(range(end, later)))
    return out


def _pair_tool_results(
    messages: list[Message], seen: set[str], fixes: Fixes, *, stamp: bool
) -> list[Message]:
    out: list[Message] = []
    # Open block: the calls of the last assistant message, waiting for their results.
    pending: dict[str, list[tuple[str, str]]] = {}  # original id -> [(unique id, name)] in order
    declared: list[tuple[str, str]] = []  # (unique id, name) in declaration order
    answered: set[str] = set()
    block_ts: Any = None

    def close_block() -> None:
        for call_id, name in declared:
            if call_id not in answered:
                filler: Message = {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": name,
                    "content": INTERRUPTED_RESULT,
                }
                if stamp and block_ts is not None:
                    filler["timestamp"] = block_ts
                out.append(filler)
                fixes.backfilled += 1
        pending.clear()
        declared.clear()
        answered.clear()

    for msg in messages:
        if msg["role"] == "tool":
            queue = pending.get(msg["tool_call_id"])
            if not queue:
                fixes.dropped_orphans += 1
                continue
            unique_id, _ = queue.pop(0)
            if unique_id != msg["tool_call_id"]:
                msg = {**msg, "tool_call_id": unique_id}
            answered.add(unique_id)
            out.append(msg)
            continue
        close_block()
        if msg["role"] == "assistant" and msg.get("tool_calls"):
            calls = []
            for call in msg["tool_calls"]:
                unique_id = _unique(call["id"], seen)
                seen.add(_id_key(unique_id))
                name = call["function"]["name"]
                pending.setdefault(call["id"], []).append((unique_id, name))
                declared.append((unique_id, name))
                if unique_id != call["id"]:
                    fixes.renamed_ids += 1
                    call = {**call, "id": unique_id}
                calls.append(call)
            if calls != msg["tool_calls"]:
                msg = {**msg, "tool_calls": calls}
            block_ts = msg.get("timestamp")
        out.append(msg)
    close_block()
    return out


def _id_key(call_id: str) -> str:
    # Anthropic allows only [a-zA-Z0-9_-] in ids and its adapter maps the rest to "_", so "a.b"
    # and "a_b" would collide there: uniqueness is checked on the mapped form.
    return _ID_UNSAFE.sub("_", call_id)


def _unique(call_id: str, seen: set[str]) -> str:
    if _id_key(call_id) not in seen:
        return call_id
    n = 2
    while _id_key(f"{call_id}_dup{n}") in seen:
        n += 1
    return f"{call_id}_dup{n}"


def _merge_assistants(messages: list[Message], fixes: Fixes) -> list[Message]:
    out: list[Message] = []
    for msg in messages:
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev["role"] == "assistant"
            and msg["role"] == "assistant"
            and not prev.get("tool_calls")
        ):
            out[-1] = _merged(prev, msg)
            fixes.merged_assistants += 1
        else:
            out.append(msg)
    return out


def _merge_users(messages: list[Message], fixes: Fixes) -> list[Message]:
    out: list[Message] = []
    for msg in messages:
        prev = out[-1] if out else None
        if prev is not None and prev["role"] == "user" and msg["role"] == "user":
            out[-1] = {
                **prev,
                **msg,
                "content": _joined_content(prev.get("content"), msg.get("content")),
            }
            fixes.merged_users += 1
        else:
            out.append(msg)
    return out


def _joined_content(earlier: Any, later: Any) -> Any:
    if isinstance(earlier, str) and isinstance(later, str):
        return f"{earlier}\n\n{later}"

    def parts(content: Any) -> list:
        if isinstance(content, list):
            return list(content)
        return [{"type": "text", "text": str(content or "")}]

    return parts(earlier) + parts(later)


def _merged(earlier: Message, later: Message) -> Message:
    texts = [
        t for t in (text_of(earlier.get("content")), text_of(later.get("content"))) if t.strip()
    ]
    merged: Message = {**earlier, **later}
    merged["content"] = "\n\n".join(texts) if texts else (None if later.get("tool_calls") else "")
    if not later.get("reasoning_content") and earlier.get("reasoning_content"):
        merged["reasoning_content"] = earlier["reasoning_content"]
    if not later.get("tool_calls"):
        merged.pop("tool_calls", None)
    return merged
