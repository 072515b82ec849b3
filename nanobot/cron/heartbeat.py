"""HEARTBEAT.md: a list of standing tasks the assistant checks on every N minutes.

Only list items count as tasks (`- ...`, `* ...`, `1. ...`, `- [ ] ...`). Headings, prose,
HTML comments, empty checkboxes, ticked items (`- [x]`) and everything under a heading named
Completed or Done are not tasks, so both our template and nanobot's mean "nothing to do".
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "HEARTBEAT_OK",
    "heartbeat_tasks",
    "heartbeat_prompt",
    "is_quiet",
    "heartbeat_path",
    "pending_path",
    "waiting_tasks",
    "read_pending",
]

HEARTBEAT_OK = "HEARTBEAT_OK"
HEARTBEAT_SESSION = "heartbeat"  # nanobot's session key for heartbeat turns

_COMMENT = re.compile(r"<!--.*?-->", re.S)
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[(?P<box>[ xX]?)\]\s*)?(?P<text>.*)$")
_DONE_HEADING = re.compile(r"^#+\s*(completed|done|finished|archive)\b", re.I)


def heartbeat_path(workspace: Path) -> Path:
    return workspace / "HEARTBEAT.md"


def pending_path(workspace: Path) -> Path:
    """Where the tasks the assistant added and nobody approved are listed (the nanobot home, which
    commands never see; written by nanobot.memory.prompt_files)."""
    import hashlib

    from nanobot.paths import nanobot_home

    key = hashlib.sha256(str(Path(workspace).expanduser().resolve()).encode()).hexdigest()[:16]
    return nanobot_home() / "prompt-files" / key / "heartbeat-pending.json"


def read_pending(workspace: Path) -> list[str]:
    import json

    try:
        data = json.loads(pending_path(workspace).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [t for t in data if isinstance(t, str)] if isinstance(data, list) else []


def waiting_tasks(workspace: Path) -> list[str]:
    """Open HEARTBEAT.md tasks the assistant added that nobody approved yet (the heartbeat skips them)."""
    try:
        now = heartbeat_tasks(
            heartbeat_path(Path(workspace).expanduser().resolve()).read_text(encoding="utf-8")
        )
    except (OSError, UnicodeDecodeError):
        return []
    return [t for t in read_pending(workspace) if t in now]


def heartbeat_tasks(text: str) -> list[str]:
    """The open tasks the file lists, in order."""
    tasks: list[str] = []
    in_done = False
    for line in _COMMENT.sub("", text).splitlines():
        if line.lstrip().startswith("#"):
            in_done = bool(_DONE_HEADING.match(line.strip()))
            continue
        match = _ITEM.match(line)
        if in_done or match is None:
            continue
        if (match.group("box") or "").lower() == "x":
            continue
        item = match.group("text").strip()
        if item:
            tasks.append(item)
    return tasks


def heartbeat_prompt(tasks: list[str]) -> str:
    listed = "\n".join(f"- {task}" for task in tasks)
    return (
        "[Heartbeat] This is a periodic check of the standing tasks the user keeps in HEARTBEAT.md "
        "(in your workspace). The open tasks are:\n"
        f"{listed}\n\n"
        "Check the current time in the runtime context and do the tasks that are due now. If a task is "
        "finished for good, you may tick it in HEARTBEAT.md ([x]). Your answer is shown to the user as a "
        f"notification. If nothing needs doing or telling right now, answer exactly {HEARTBEAT_OK} and nothing else."
    )


def is_quiet(reply: str | None) -> bool:
    """The model said there is nothing to report."""
    text = (reply or "").strip().strip("*`'\".").strip()
    return not text or text.upper() == HEARTBEAT_OK
