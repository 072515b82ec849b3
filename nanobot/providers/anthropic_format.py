"""Pure conversion from nanobot's OpenAI-shaped messages to the Anthropic Messages wire shape.

No SDK import here: tests and the session fuzzer use it to check that every history we
could send is valid under Anthropic's rules (alternating roles, tool_use answered by
tool_result in the very next user turn, no empty content).
"""

from __future__ import annotations

import json
import re
from typing import Any

from nanobot.messages import NO_OUTPUT, Message, text_of
from nanobot.providers.base import parse_arguments

CACHE = {"type": "ephemeral"}
_ID_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def safe_tool_id(call_id: str) -> str:
    """Anthropic accepts only [a-zA-Z0-9_-] in tool ids; map others consistently."""
    cleaned = _ID_UNSAFE.sub("_", call_id or "")
    return cleaned or "toolu_missing"


def _image_block(part: dict) -> dict:
    image = part.get("image_url")
    url = image.get("url", "") if isinstance(image, dict) else str(image or "")
    match = re.match(r"data:(image/[\w.+-]+);base64,(.*)", url, re.S)
    if match:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": match[1], "data": match[2]},
        }
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    # a file:// or odd URL cannot be sent; say it was there rather than leave the turn empty
    return {"type": "text", "text": f"[image: {url[:200] or 'unavailable'}]"}


def _content_blocks(content: Any) -> list[dict]:
    if isinstance(content, list):
        blocks = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                blocks.append(_image_block(part))
            elif isinstance(part, str) or (
                isinstance(part, dict) and part.get("type") in ("text", None)
            ):
                text = text_of([part])
                if text.strip():  # Anthropic rejects empty text blocks
                    blocks.append({"type": "text", "text": text})
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                blocks.append({"type": "text", "text": f"[unsupported content: {kind}]"})
        return blocks
    text = text_of(content)
    return [{"type": "text", "text": text}] if text.strip() else []


_THINKING = ("thinking", "redacted_thinking")


def _assistant_blocks(msg: Message) -> list[dict]:
    # signed thinking blocks first, as the API requires (reasoning.py)
    blocks = [
        dict(b)
        for b in msg.get("thinking_blocks") or ()
        if isinstance(b, dict) and b.get("type") in _THINKING
    ]
    blocks += _content_blocks(msg.get("content"))
    for call in msg.get("tool_calls") or []:
        fn = call.get("function") or {}
        args, _ = parse_arguments(fn.get("arguments"))
        blocks.append(
            {
                "type": "tool_use",
                "id": safe_tool_id(call.get("id", "")),
                "name": fn.get("name") or "unknown",
                "input": args,
            }
        )
    return blocks


def _tool_result_block(msg: Message) -> dict:
    text = text_of(msg.get("content"))
    return {
        "type": "tool_result",
        "tool_use_id": safe_tool_id(msg.get("tool_call_id", "")),
        "content": text if text.strip() else NO_OUTPUT,
    }


def to_anthropic(messages: list[Message]) -> tuple[list[dict] | None, list[dict]]:
    """(system blocks or None, messages) for the Messages API; same-role turns are merged."""
    system_texts: list[str] = []
    out: list[dict] = []

    def push(role: str, blocks: list[dict]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            prev = out[-1]["content"]
            if role == "user":
                # tool_result blocks must lead the user turn that answers a tool_use
                results = [b for b in prev + blocks if b["type"] == "tool_result"]
                others = [b for b in prev + blocks if b["type"] != "tool_result"]
                out[-1]["content"] = results + others
            else:
                merged = prev + blocks  # thinking blocks must still lead the assistant turn
                out[-1]["content"] = [b for b in merged if b["type"] in _THINKING] + [
                    b for b in merged if b["type"] not in _THINKING
                ]
        else:
            out.append({"role": role, "content": list(blocks)})

    for msg in messages:
        role = msg.get("role")
        if role == "system":
            text = text_of(msg.get("content"))
            if text.strip():
                system_texts.append(text)
        elif role == "user":
            push("user", _content_blocks(msg.get("content")))
        elif role == "assistant":
            push("assistant", _assistant_blocks(msg))
        elif role == "tool":
            push("user", [_tool_result_block(msg)])
    system = None
    if system_texts:
        system = [{"type": "text", "text": "\n\n".join(system_texts), "cache_control": CACHE}]
    return system, out


def with_history_cache_marker(messages: list[dict]) -> list[dict]:
    """Mark the last block of the conversation so the growing prefix is cached too."""
    if not messages:
        return messages
    marked = [dict(m) for m in messages]
    last = dict(marked[-1])
    blocks = [dict(b) for b in last["content"]]
    blocks[-1]["cache_control"] = CACHE
    last["content"] = blocks
    marked[-1] = last
    return marked


def to_anthropic_tools(tools: list[dict] | None) -> list[dict]:
    converted = []
    for tool in tools or []:
        fn = tool.get("function", tool)
        converted.append(
            {
                "name": fn["name"],
                "description": fn.get("description", ""),
                "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    if converted:
        converted[-1] = {**converted[-1], "cache_control": CACHE}
    return converted


def to_anthropic_tool_choice(choice: str | dict | None) -> dict | None:
    if choice is None:
        return None
    if isinstance(choice, dict):
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        return {"type": "tool", "name": name}
    return {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(
        choice
    )


def arguments_json(value: Any) -> str:
    return json.dumps(value if value is not None else {}, ensure_ascii=False)
