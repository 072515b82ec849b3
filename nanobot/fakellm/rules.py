"""Message rules the real providers enforce, as pure functions returning readable violations.

These mirror the 400s that OpenAI and Anthropic send for malformed histories, so a test can assert
"no request we built would have been rejected" without a network. They are shared by the fake
server and by any test that builds messages.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "check_openai_messages",
    "check_anthropic_request",
    "estimate_tokens",
    "count_prompt_tokens",
    "PREFILL_REJECTED",
]

# keys whose values are protocol framing, not text the model reads
_FRAMING_KEYS = {"role", "type", "cache_control", "media_type"}
_IMAGE_TOKENS = 1600

# What current Claude models (and Mistral) answer when a request ends with an assistant message;
# providers that accept it treat that message as a prefix to *continue*, not a message to answer.
PREFILL_REJECTED = (
    "the request ends with an assistant message: this model does not support "
    "assistant message prefill; the conversation must end with a user message"
)


def estimate_tokens(obj: Any) -> int:
    """Deliberately rough token count: JSON characters / 4, plus one so it is never zero.

    Cheap and deterministic on purpose; the fake server only needs a stable size to compare
    against a context window, not a tokenizer's exact answer.
    """
    return len(json.dumps(obj, ensure_ascii=False, default=str)) // 4 + 1


def count_prompt_tokens(prompt: dict, encode: Any) -> int:
    """A provider-like token count of a prompt ({"system"?, "messages", "tools"?}) with a real tokenizer.

    Every text, tool name, id and argument is encoded; each message costs 4 tokens of framing and
    each tool 8, as chat formats do. Tests use it to check prompt + max_tokens against a window
    the way a strict API would, with `encode` from tiktoken.
    """

    def strings(value: Any) -> int:
        if isinstance(value, str):
            return len(encode(value))
        if isinstance(value, list):
            return sum(strings(v) for v in value)
        if isinstance(value, dict):
            if value.get("type") in ("image", "image_url"):
                return _IMAGE_TOKENS
            total = 0
            for key, item in value.items():
                if key in _FRAMING_KEYS:
                    continue
                if key == "input" and not isinstance(
                    item, str
                ):  # Anthropic tool_use: the arguments as JSON
                    total += len(encode(json.dumps(item, ensure_ascii=False)))
                else:
                    total += strings(item)
            return total
        return 0

    total = 0
    system = prompt.get("system")
    if system:
        total += 4 + strings(system)
    for msg in prompt.get("messages") or []:
        total += 4 + strings(msg)
    tools = prompt.get("tools")
    if tools:
        # a cache marker is a directive, not prompt text (as in messages, _FRAMING_KEYS)
        tools = [
            {k: v for k, v in t.items() if k != "cache_control"} if isinstance(t, dict) else t
            for t in tools
        ]
        total += len(encode(json.dumps(tools, ensure_ascii=False, sort_keys=True))) + 8 * len(tools)
    return total


def _is_blank(content: Any) -> bool:
    """True for content a provider treats as empty: None, "", whitespace, [] or only blank text parts."""
    if content is None:
        return True
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        if not content:
            return True
        for part in content:
            if not isinstance(part, dict):
                return False
            if part.get("type", "text") != "text":
                return False  # an image or other non-text part is real content
            if isinstance(part.get("text"), str) and part["text"].strip():
                return False
        return True
    return False


def _label(i: int, msg: Any) -> str:
    role = msg.get("role") if isinstance(msg, dict) else None
    return f"message {i} ({role})"


# --------------------------------------------------------------------------- OpenAI


def check_openai_messages(messages: Any) -> list[str]:
    """Violations of the OpenAI chat-completions message rules (empty list when valid)."""
    if not isinstance(messages, list):
        return [f"messages must be a list, got {type(messages).__name__}"]
    if not messages:
        return ["messages is empty"]

    out: list[str] = []
    seen_ids: set[str] = set()
    # Calls of the latest assistant message that still wait for a tool result. Results are only
    # accepted in the run of tool messages right after that assistant message.
    pending: dict[str, int] = {}
    answered: set[str] = set()
    prev_role: str | None = None
    first_non_system_seen = False

    def close_pending() -> None:
        for call_id, at in pending.items():
            out.append(
                f"message {at} (assistant): tool_call {call_id!r} has no tool result "
                "before the next non-tool message"
            )
        pending.clear()

    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            out.append(f"message {i}: not an object")
            continue
        role = msg.get("role")
        label = _label(i, msg)

        if role != "tool":
            close_pending()

        if role in ("system", "developer"):
            if i != 0:
                out.append(f"{label}: system message must be first")
            prev_role = role
            continue

        if not first_non_system_seen:
            first_non_system_seen = True
            if role != "user":
                out.append(f"{label}: first non-system message must be from the user")

        if role == "user":
            if _is_blank(msg.get("content")):
                out.append(f"{label}: empty user content")
        elif role == "assistant":
            if prev_role == "assistant":
                out.append(f"{label}: two consecutive assistant messages")
            calls = msg.get("tool_calls") or []
            if "tool_calls" in msg and not (
                isinstance(msg["tool_calls"], list) and msg["tool_calls"]
            ):
                out.append(f"{label}: tool_calls must be a non-empty list")  # OpenAI rejects []
                calls = []
            if not calls and _is_blank(msg.get("content")):
                out.append(f"{label}: empty assistant content without tool_calls")
            for call in calls:
                call_id = call.get("id") if isinstance(call, dict) else None
                if not call_id:
                    out.append(f"{label}: tool_call without an id")
                    continue
                if call_id in seen_ids:
                    out.append(f"{label}: duplicate tool_call id {call_id!r}")
                    continue
                seen_ids.add(call_id)
                pending[call_id] = i
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if msg.get("content") == []:
                out.append(
                    f"{label}: tool content is an empty list"
                )  # compatible servers reject it
            if not call_id:
                out.append(f"{label}: tool message missing tool_call_id")
            elif call_id in pending:
                del pending[call_id]
                answered.add(call_id)
            elif call_id in answered:
                out.append(f"{label}: tool_call_id {call_id!r} was already answered")
            else:
                out.append(
                    f"{label}: tool_call_id {call_id!r} was not declared by the "
                    "preceding assistant tool_calls"
                )
        else:
            out.append(f"{label}: unknown role {role!r}")
        prev_role = role

    close_pending()
    out += _final_assistant(messages)
    return out


def _final_assistant(messages: list) -> list[str]:
    last = messages[-1] if messages else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        return [f"{_label(len(messages) - 1, last)}: {PREFILL_REJECTED}"]
    return []


# --------------------------------------------------------------------------- Anthropic


def _blocks(content: Any) -> list[dict]:
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def check_anthropic_request(system: Any, messages: Any) -> list[str]:
    """Violations of the Anthropic Messages API rules for `system` + `messages` (empty when valid)."""
    out: list[str] = []
    if isinstance(system, list):
        for j, block in enumerate(_blocks(system)):
            if block.get("type") == "text" and _is_blank(block.get("text")):
                out.append(f"system block {j}: empty text block")
    if not isinstance(messages, list):
        return out + [f"messages must be a list, got {type(messages).__name__}"]
    if not messages:
        return out + ["messages is empty"]

    seen_ids: set[Any] = set()  # the ids as sent, whatever their type
    prev: dict | None = None
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            out.append(f"message {i}: not an object")
            prev = None
            continue
        role = msg.get("role")
        label = _label(i, msg)
        content = msg.get("content")

        if role not in ("user", "assistant"):
            out.append(f"{label}: role must be user or assistant")
        if i == 0 and role != "user":
            out.append(f"{label}: first message must be from the user")
        if prev is not None and prev.get("role") == role:
            out.append(f"{label}: two consecutive {role} messages (roles must alternate)")

        if isinstance(content, str):
            if not content.strip():
                out.append(f"{label}: empty content")
        elif isinstance(content, list):
            if not content:
                out.append(f"{label}: empty content list")
            for j, block in enumerate(_blocks(content)):
                if block.get("type") == "text" and _is_blank(block.get("text")):
                    out.append(f"{label}: content block {j} is an empty text block")
        else:
            out.append(f"{label}: empty content")

        blocks = _blocks(content)
        if role == "assistant":
            for block in blocks:
                if block.get("type") != "tool_use":
                    continue
                tool_id = block.get("id")
                if tool_id in seen_ids:
                    out.append(f"{label}: duplicate tool_use id {tool_id!r}")
                seen_ids.add(tool_id)

        # A tool_result must answer a tool_use of the assistant message right before it.
        declared = (
            {b.get("id") for b in _blocks(prev.get("content")) if b.get("type") == "tool_use"}
            if prev and prev.get("role") == "assistant"
            else set()
        )
        seen_non_result = False
        for j, block in enumerate(blocks):
            if block.get("type") != "tool_result":
                seen_non_result = True
                continue
            if role != "user":
                out.append(f"{label}: tool_result block outside a user message")
            elif seen_non_result:
                out.append(
                    f"{label}: tool_result block {j} comes after other content "
                    "(tool_result blocks must come first)"
                )
            if block.get("tool_use_id") not in declared:
                out.append(
                    f"{label}: tool_result for {block.get('tool_use_id')!r} does not "
                    "answer a tool_use in the previous assistant message"
                )

        # Every tool_use must be answered in the very next message.
        if role == "assistant":
            wanted = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            nxt = messages[i + 1] if i + 1 < len(messages) else None
            answered = set()
            if isinstance(nxt, dict) and nxt.get("role") == "user":
                answered = {
                    b.get("tool_use_id")
                    for b in _blocks(nxt.get("content"))
                    if b.get("type") == "tool_result"
                }
            for tool_id in wanted:
                if tool_id not in answered:
                    out.append(
                        f"{label}: tool_use {tool_id!r} has no tool_result in the next user message"
                    )
        prev = msg
    out += _final_assistant(messages)
    return out
