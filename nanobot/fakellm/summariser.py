"""The fake model's answer to a consolidation request: a `save_memory` call built from the request.

Deterministic, so a test can plant items early in a conversation and check they survive compaction:
- history_entry: the excerpt's stamp and the first words of each user line;
- memory_update: the current MEMORY.md unchanged (a fresh one when empty);
- session_checkpoint: the previous checkpoint (from the request) merged with what the excerpt
  plants: `Goal:`, `Status:`, `Decision:`, `Question:` and `Next step:` phrases in the transcript,
  and every identifier in it (a ticket like ABC-123, a URL, a path or branch with a slash).
  A newer goal, status or next step replaces the older one; decisions, questions and identifiers
  accumulate, as a cumulative checkpoint should.
"""

from __future__ import annotations

import re
from typing import Any

from nanobot.fakellm.replies import Reply

__all__ = ["is_consolidation", "save_memory_reply", "plant_fields"]

_STAMP = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")
_LINE = re.compile(r"^(?:\[[^\]]*\] )?(USER|ASSISTANT): (.*)$", re.M)
_SINGLE = {"goal": "Goal", "status": "Status", "next step": "Next step"}
_MULTI = {"decision": "Decisions", "question": "Open questions"}
_FIELD = re.compile(
    r"\b(goal|status|next step|decision|question):\s*(.+?)(?=\.\s|\.?$|;|\n)", re.I | re.M
)
_IDENT = re.compile(
    r"\b[A-Z][A-Z0-9]+-\d+\b|https?://[^\s,;)]+|(?<![\w/])[~.]?/?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+"
)
_ORDER = ("Goal", "Status", "Decisions", "Open questions", "Next step", "Identifiers")
_LISTS = ("Decisions", "Open questions", "Identifiers")


def is_consolidation(rec: Any) -> bool:
    names = {(t.get("function") or {}).get("name") or t.get("name") for t in rec.tools or []}
    return "save_memory" in names


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _section(body: str, title: str) -> str:
    found = re.search(rf"^## {re.escape(title)}[^\n]*\n\n(.*?)(?=\n\n## |\Z)", body, re.S | re.M)
    return found.group(1).strip() if found else ""


def _parse_checkpoint(text: str) -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {name: [] for name in _ORDER}
    current = ""
    for line in text.splitlines():
        if line.startswith("- ") and current in _LISTS:
            fields[current].append(line[2:].strip())
            continue
        label, _, value = line.partition(":")
        current = label.split(" (")[0].strip()
        if current in fields and value.strip() and value.strip().lower() != "none":
            fields[current] = [value.strip()]
    return fields


def plant_fields(transcript: str, previous: str = "") -> dict[str, list[str]]:
    """The checkpoint's fields: `previous` updated with what `transcript` plants."""
    fields = _parse_checkpoint(previous)
    for _, said in _LINE.findall(transcript):
        for key, value in _FIELD.findall(said):
            key, value = key.lower(), value.strip()
            if key in _SINGLE:
                fields[_SINGLE[key]] = [value]
            elif value not in fields[_MULTI[key]]:
                fields[_MULTI[key]].append(value)
        for ident in _IDENT.findall(said):
            ident = ident.rstrip(".")
            if ident not in fields["Identifiers"]:
                fields["Identifiers"].append(ident)
    return fields


def _render(fields: dict[str, list[str]]) -> str:
    lines = []
    for name in _ORDER:
        values = fields[name]
        if name in _LISTS:
            lines += [f"{name}:" if values else f"{name}: none", *(f"- {v}" for v in values)]
        else:
            lines.append(f"{name}: {values[-1] if values else 'none'}")
    return "\n".join(lines)


def save_memory_reply(rec: Any) -> Reply:
    """A save_memory call answering consolidation request `rec` (see the module docstring)."""
    system = _text(rec.system) or next(
        (_text(m.get("content")) for m in rec.messages if m.get("role") == "system"), ""
    )
    body = _text(rec.messages[-1].get("content")) if rec.messages else ""
    stamp = _STAMP.search(system) or _STAMP.search(body)
    memory = _section(body, "Current MEMORY.md")
    previous = _section(body, "Previous session checkpoint")
    transcript = _section(body, "Conversation excerpt")
    said = [text[:60] for role, text in _LINE.findall(transcript) if role == "USER"]
    entry = f"{stamp.group(0) if stamp else '[2026-01-01 00:00]'} The user asked: " + " / ".join(
        said or ["(nothing)"]
    )
    checkpoint = _render(plant_fields(transcript, "" if previous == "(none yet)" else previous))
    return Reply.tool_calls(
        [
            (
                "save_memory",
                {
                    "history_entry": entry,
                    "memory_update": memory if memory and memory != "(empty)" else "# Memory\n",
                    "session_checkpoint": checkpoint,
                },
            )
        ]
    )
