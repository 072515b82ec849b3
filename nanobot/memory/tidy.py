"""`nanobot memory tidy`: the model proposes a cleaned MEMORY.md; the user decides.

The proposal merges duplicate facts, makes relative dates absolute (the dated HISTORY.md entries
say when things were said) and corrects facts that later entries contradict. It is only a text:
the CLI shows the diff and applies it through MemoryStore.write_memory (a version of the old
text is kept) after the user says yes.
"""

from __future__ import annotations

import difflib
from datetime import datetime

from nanobot.errors import MemoryUpdateRefused
from nanobot.memory import history as history_log
from nanobot.memory.protocols import MemoryAdmin
from nanobot.messages import Message
from nanobot.providers.base import Provider
from nanobot.untrusted import fence

__all__ = ["propose_tidy", "unified_diff", "tidy_messages", "HISTORY_CHARS"]

HISTORY_CHARS = 24_000  # the newest HISTORY.md entries given as dating evidence, at most this long
_ENTRY_CHARS = 2_000

_INSTRUCTIONS = """You tidy a personal assistant's long-term memory file (MEMORY.md). Return the complete new \
MEMORY.md and nothing else (no preamble, no code fence). Rules:
1. Merge duplicate and near-duplicate facts into one line; keep every distinct fact.
2. Make relative dates absolute ("yesterday", "next Friday", "last month"): use the dated history entries \
below to find when the fact was written; if it cannot be dated, keep the wording.
3. Where a later history entry contradicts a fact, correct the fact to the later state.
4. Keep the file's headings and structure; do not invent facts; do not add commentary.
Today is {today}."""


def tidy_messages(memory: str, entries: list[history_log.Entry], today: datetime) -> list[Message]:
    """The request: the instructions, then MEMORY.md and the newest history entries, fenced as data."""
    evidence: list[str] = []
    used = 0
    for entry in reversed(entries):  # newest first, so the cap drops the oldest
        text = entry.text if len(entry.text) <= _ENTRY_CHARS else entry.text[:_ENTRY_CHARS] + " …"
        if used + len(text) > HISTORY_CHARS:
            break
        evidence.append(text)
        used += len(text)
    history = "\n\n".join(reversed(evidence)) or "(no history entries)"
    user = (
        fence(memory, "memory/MEMORY.md, the file to tidy")
        + "\n\n"
        + fence(
            history,
            "memory/HISTORY.md, the newest dated entries (evidence for dates and corrections)",
        )
        + "\n\nReturn the tidied MEMORY.md."
    )
    return [
        {"role": "system", "content": _INSTRUCTIONS.format(today=today.strftime("%Y-%m-%d (%A)"))},
        {"role": "user", "content": user},
    ]


def _unfenced(text: str) -> str:
    """The reply without a code fence around it, which models add despite being asked not to."""
    lines = text.strip().splitlines()
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].strip() == "```":
        lines = lines[1:-1]
    return "\n".join(lines).strip() + "\n"


async def propose_tidy(
    provider: Provider, store: MemoryAdmin, *, max_tokens: int = 8192, today: datetime | None = None
) -> str:
    """The model's tidied MEMORY.md; raises MemoryUpdateRefused for an empty or cut-off reply."""
    memory = store.read_memory()
    path = store.history_file
    entries = history_log.tail(path, 60) if path.is_file() else []
    reply = await provider.chat(
        tidy_messages(memory, entries, today or datetime.now()),
        max_tokens=max_tokens,
        temperature=0.0,
    )
    if reply.finish_reason == "length":
        raise MemoryUpdateRefused(
            "the model's tidied MEMORY.md was cut off by its length limit; nothing changed",
            hint="raise agents.defaults.maxTokens, or tidy MEMORY.md by hand with "
            "`nanobot memory edit`",
        )
    text = _unfenced(reply.content or "")
    if not text.strip():
        raise MemoryUpdateRefused(
            "the model returned an empty MEMORY.md; nothing changed",
            hint="try again, or tidy it by hand with `nanobot memory edit`",
        )
    return text


def unified_diff(before: str, after: str) -> str:
    """What the tidy would change, as a unified diff ("" when nothing)."""
    if before.rstrip("\n") == after.rstrip("\n"):
        return ""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            "MEMORY.md (now)",
            "MEMORY.md (tidied)",
        )
    )
