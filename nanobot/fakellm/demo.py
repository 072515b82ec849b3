"""The scripted brain of `nanobot demo`: answers chosen by rules, not by a model.

It lets a newcomer without an API key see the real program work (the chat, a tool call and its
result, memory, sessions) against the bundled fake server. Every answer says it is scripted.

Rules, first match wins:
1. a forced tool choice (memory consolidation asks for `save_memory`): call it with a short entry;
2. the request ends with a tool result: show the start of that result;
3. the user asks about files, folders or the workspace: call `list_dir` on the workspace;
4. anything else: a scripted answer that quotes the user and says what to try.
"""

from __future__ import annotations

import json
import time
from typing import Any

from nanobot.fakellm.replies import Reply
from nanobot.fakellm.server import RecordedRequest

__all__ = ["LABEL", "demo_reply"]

LABEL = "scripted demo"  # every answer carries it: the user never mistakes this for a model
_CONTEXT_END = "[/Runtime Context]"
_FILE_WORDS = ("file", "folder", "director", "workspace", "list", "ls")
_SHOWN_RESULT_CHARS = 600


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks (Anthropic, or OpenAI's parts)
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return ""


def _user_text(message: dict) -> str:
    """The user's own words: a runtime-context block before them is left out."""
    text = _text(message.get("content"))
    if _CONTEXT_END in text:
        text = text.split(_CONTEXT_END, 1)[1]
    return text.strip()


def _forced_tool(request: RecordedRequest) -> str | None:
    choice = request.tool_choice
    if isinstance(choice, dict):
        if isinstance(
            choice.get("function"), dict
        ):  # OpenAI: {"type": "function", "function": {"name"}}
            return str(choice["function"].get("name") or "") or None
        if choice.get("type") == "tool":  # Anthropic: {"type": "tool", "name"}
            return str(choice.get("name") or "") or None
    return None


def _last(request: RecordedRequest) -> dict:
    messages = [m for m in request.messages if isinstance(m, dict)]
    return messages[-1] if messages else {}


def _tool_result(message: dict) -> str | None:
    """The text of a tool result ending the request (OpenAI role "tool", Anthropic tool_result block)."""
    if message.get("role") == "tool":
        return _text(message.get("content"))
    content = message.get("content")
    if message.get("role") == "user" and isinstance(content, list):
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if results:
            return _text(results[-1].get("content"))
    return None


def demo_reply(request: RecordedRequest) -> Reply:
    """The demo's answer to one request (a `Responder` for FakeLLMServer)."""
    forced = _forced_tool(request)
    if forced == "save_memory":
        day = time.strftime("%Y-%m-%d %H:%M")
        return Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": f"[{day}] A {LABEL} conversation: the user tried nanobot without an API key.",
                        "memory_update": "# Memory\n\n- The user has tried the scripted demo.\n",
                    },
                )
            ]
        )
    last = _last(request)
    result = _tool_result(last)
    if result is not None:
        shown = (
            result if len(result) <= _SHOWN_RESULT_CHARS else result[:_SHOWN_RESULT_CHARS] + "\n…"
        )
        return Reply.text(
            f"*({LABEL})* The tool answered. A model would now read it and explain; "
            f"this script only shows its start:\n\n```\n{shown}\n```\n"
        )
    said = _user_text(last)
    if any(word in said.lower() for word in _FILE_WORDS):
        return Reply.tool_calls(
            [("list_dir", {"path": "."})], text=f"*({LABEL})* Let me look at the workspace."
        )
    quoted = json.dumps(said[:200], ensure_ascii=False)
    return Reply.text(
        f"*({LABEL})* This answer comes from nanobot's bundled fake LLM server, not from a model: "
        f"no API key is used and nothing leaves this machine.\n\n"
        f"You said {quoted}. Things to try here:\n\n"
        f"- **list my files**: a real tool call (`list_dir`) and its result\n"
        f"- `/status`, `/help`: the chat's commands\n"
        f"- `/quit`: leave the demo (its home folder is removed)\n\n"
        f"For real answers, run `nanobot onboard`: it asks for a key for the default model (Anthropic's). "
        f"With `OPENAI_API_KEY` set instead, `nanobot agent --model openai/gpt-4.1` answers at once.\n"
    )
