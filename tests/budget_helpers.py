"""Shared pieces of the budget tests: a strict fake server, a tool with any output, session files."""

from __future__ import annotations

import asyncio
import functools
import json
import random
from typing import Any

from nanobot.fakellm import Reply
from nanobot.fakellm.rules import count_prompt_tokens
from nanobot.tokens import load_offline_encoding
from nanobot.tools.base import Tool

WINDOW = 8192


@functools.cache
def exact_encode():
    """The exact cl100k encoder, loaded once per test process (a load reads and indexes the ranks)."""
    encode, reason = load_offline_encoding()
    assert encode is not None, reason
    return encode


def make_strict(server, window: int = WINDOW) -> None:
    """Size prompts with cl100k like a provider, and reject prompt + max_tokens over the window."""
    encode = exact_encode()
    server.context_window = window
    server.prompt_counter = lambda prompt: count_prompt_tokens(prompt, encode)
    server.count_max_tokens = True


def over_window(server, window: int = WINDOW) -> list[str]:
    """Requests whose prompt + max_tokens (as the server counted them) passed the window."""
    out = []
    for r in server.requests:
        reply = r.body.get("max_tokens") or r.body.get("max_completion_tokens") or 0
        if r.estimated_tokens + reply > window:
            out.append(f"request {r.index}: {r.estimated_tokens} + {reply} > {window}")
    return out


@functools.lru_cache(maxsize=512)  # the property tests ask for the same texts in every example
def make_text(kind: str, n: int, seed: int = 0) -> str:
    """`n` characters of prose, hex, CJK or JSON lines: the densities tool output and pastes come in."""
    if n <= 0:
        return ""
    rng = random.Random(seed * 7919 + n)
    if kind == "hex":
        unit = "".join(rng.choice("0123456789abcdef") for _ in range(4000))
    elif kind == "cjk":
        unit = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(2000)) + "。"
    elif kind == "json":
        unit = "\n".join(
            json.dumps({"id": i, "v": rng.random(), "tag": f"t{rng.randint(0, 999)}"})
            for i in range(80)
        )
    else:
        words = [
            "the",
            "log",
            "worker",
            "processed",
            "job",
            "quickly",
            "and",
            "reported",
            "status",
            "fine",
        ]
        unit = " ".join(rng.choice(words) for _ in range(900))
    return (unit * (n // len(unit) + 1))[:n]


class EchoTool(Tool):
    """Returns `size` characters of output (or the text it was given): any tool output a test needs."""

    name = "echo"
    description = "Return text of a given size."
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "size": {"type": "integer"},
            "kind": {"type": "string"},
        },
    }

    async def run(self, text: str = "", size: int = 0, kind: str = "prose", **_: Any) -> str:
        return make_text(kind, size) if size else (text or "(nothing)")


def save_memory_reply(req) -> Reply:
    """Answer a consolidation request: keep MEMORY.md, record a short dated entry."""
    body = req.messages[-1]["content"] if isinstance(req.messages[-1]["content"], str) else ""
    current = body.split("## Current MEMORY.md\n\n", 1)[-1].split("\n\n## Conversation excerpt", 1)[
        0
    ]
    if current.strip() in ("", "(empty)"):
        current = "# Memory\n"
    return Reply.tool_calls(
        [
            (
                "save_memory",
                {
                    "history_entry": "[2026-01-05 10:00] Talked about logs.",
                    "memory_update": current,
                },
            )
        ]
    )


def is_consolidation(req) -> bool:
    names = {(t.get("function") or {}).get("name") or t.get("name") for t in req.tools or []}
    return "save_memory" in names


def write_session(store, key: str, messages: list[dict], pointer: Any = 0) -> None:
    store.directory.mkdir(parents=True, exist_ok=True)
    meta = {
        "_type": "metadata",
        "key": key,
        "created_at": "2026-01-05T10:00:00",
        "updated_at": "2026-01-05T10:00:00",
        "metadata": {},
        "last_consolidated": pointer,
    }
    lines = [json.dumps(meta)] + [
        json.dumps({"timestamp": "2026-01-05T10:00:00", **m}, ensure_ascii=False) for m in messages
    ]
    store.path_for(key).write_text("\n".join(lines) + "\n", encoding="utf-8")


def open_quiet(cfg, key: str = "cli:direct"):
    """The assistant `nanobot agent -m` opens, without streaming."""
    from nanobot.app import open_assistant

    return open_assistant(cfg, key, stream=False)


def talk(cfg, body, key: str = "cli:direct"):
    """`await body(assistant)` on an assistant opened for `key`, closed whatever happens; its result."""

    async def go():
        assistant = open_quiet(cfg, key)
        try:
            return await body(assistant)
        finally:
            await assistant.aclose()

    return asyncio.run(go())
