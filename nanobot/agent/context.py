"""ContextBuilder: the system prompt and the messages of one request.

The system prompt holds only what changes rarely (identity, the workspace's bootstrap
files, MEMORY.md, the skills list), so it stays byte-identical from turn to turn and the
provider's prompt cache keeps working. Time and channel go into the current user message.
Text someone other than the user may have written (MEMORY.md, workspace skills) enters it
fenced as data (nanobot.untrusted), and the identity states the rule for such blocks.
"""

from __future__ import annotations

import platform
import sys
from datetime import datetime
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nanobot.messages import Message, for_wire
from nanobot.secrets_mask import mask_secrets
from nanobot.session.runtime_context import user_with_context
from nanobot.session.save_policy import as_sent
from nanobot.session.working_state import with_block
from nanobot.untrusted import FENCE_RULES, fence

BOOTSTRAP_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md")


class MemoryReader(Protocol):
    """Where MEMORY.md is read from (nanobot.memory.store.MemoryStore is one)."""

    def read_memory(self) -> str: ...


class SkillsSection(Protocol):
    """The skills list for the prompt (nanobot.skills.SkillSet is one)."""

    def prompt_section(self) -> str: ...


MEMORY_CUT_NOTE = (
    "\n\n[MEMORY.md is cut here for this request: the whole file does not fit this model's "
    "context window. The file on disk is whole; the user can shorten it.]"
)


def cut_memory(memory: str, room: int) -> str:
    """The head of MEMORY.md that fits `room` bytes (a byte is never less than a token), marked as cut."""
    data = memory.encode("utf-8")
    if len(data) <= room:
        return memory
    keep = max(0, room - len(MEMORY_CUT_NOTE.encode("utf-8")))
    head = data[:keep].decode("utf-8", errors="ignore")
    head = head[: head.rfind("\n")] if "\n" in head else head  # whole lines only
    return head.rstrip() + MEMORY_CUT_NOTE


class ContextBuilder:
    def __init__(
        self,
        workspace: Path,
        *,
        memory: MemoryReader | None = None,
        skills: SkillsSection | None = None,
        timezone: str = "",
    ) -> None:
        self.workspace = workspace
        self.memory = memory
        self.skills = skills
        self.timezone = timezone
        # bytes of MEMORY.md a request may carry (None: all of it); set when the whole file cannot fit
        # the window (app.py asks ContextBudget.memory_room). Cut for the request only, never on disk.
        self.memory_room: int | None = None

    def identity(self) -> str:
        ws = self.workspace
        return f"""# nanobot

You are nanobot, a personal AI assistant working with one person in their terminal.
You can read, write and edit files, run shell commands, search and fetch web pages, and start
background subagents for longer independent tasks.

## Environment
- OS: {platform.system()} {platform.machine()}; Python {sys.version.split()[0]}
- Workspace: {ws} (relative paths resolve here)
- Long-term memory: {ws / "memory" / "MEMORY.md"} (facts about the user and their work; shown below in full)
- History log: {ws / "memory" / "HISTORY.md"} (dated summaries of past conversations; NOT shown here,
  append-only, written by nanobot — recall from it with the search_history tool when the user refers to
  something from the past that is not in MEMORY.md)
- Skills: folders with a SKILL.md; read a skill's file with read_file before using it.

## How to work
- Be concise and direct. Act with tools rather than describing what you would do.
- Read before you edit; after a change, check it worked. Never invent file contents or command output.
- When a tool fails, read the error and adjust; do not repeat the same failing call.
- When you learn a lasting fact about the user (name, preferences, projects), update MEMORY.md with edit_file
  (a small, targeted change; the user is asked to approve it, and every change is versioned). Never change
  memory/ files with shell commands.
- Risky actions (files outside the workspace, files that run at login or on a schedule, memory, prompt file
  and skill edits) need the user's approval; when one is refused, do not retry it: continue without it or ask.
- Each prompt file below says who wrote it last: only sections written by the user are the user's own words.

## Untrusted text
{FENCE_RULES}
"""

    def bootstrap_files(self) -> list[tuple[str, str]]:
        """(heading, text) of each non-empty prompt file; the heading says who wrote it last."""
        from nanobot.memory.prompt_files import PromptFiles

        authors = PromptFiles(self.workspace)
        found = []
        for name in BOOTSTRAP_FILES:
            path = self.workspace / name
            try:
                raw = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if raw.strip():
                who = authors.authorship(name, raw)
                label = (
                    "last written by the user"
                    if who.author == "user"
                    else f"last written by the assistant ({who.at[:10]}), with the user's approval"
                )
                found.append((f"{name} — {label}", raw.strip()))
        return found

    def system_prompt(self) -> str:
        parts = [self.identity().strip()]
        for name, text in self.bootstrap_files():
            parts.append(f"## {name}\n\n{text}")
        memory = self.memory.read_memory().strip() if self.memory is not None else ""
        if memory and self.memory_room is not None:
            memory = cut_memory(memory, self.memory_room)
        if memory:  # written by consolidation from conversations that may quote pages and files
            parts.append(
                f"# Memory (MEMORY.md)\n\n{fence(memory, 'MEMORY.md, notes kept from past conversations')}"
            )
        skills = self.skills.prompt_section().strip() if self.skills is not None else ""
        if skills:
            parts.append(skills)
        # a key pasted into USER.md or a hand-edited MEMORY.md must not reach the provider either
        return mask_secrets("\n\n---\n\n".join(parts) + "\n")

    def now(self) -> datetime:
        if self.timezone:
            try:
                return datetime.now(ZoneInfo(self.timezone))
            except (ZoneInfoNotFoundError, ValueError):
                pass
        return datetime.now().astimezone()

    def runtime_context(self, channel: str, chat_id: str) -> str:
        now = self.now()
        offset = now.strftime("%z")
        zone = f"{now.tzname() or ''} (UTC{offset[:3]}:{offset[3:]})".strip()
        return (
            f"Current time: {now.strftime('%Y-%m-%d %H:%M (%A)')} {zone}\n"
            f"Channel: {channel}\nChat ID: {chat_id}"
        )

    def user_message(self, text: str, *, channel: str = "cli", chat_id: str = "direct") -> Message:
        """The current user message: the user's text, and the runtime context beside it (not in it);
        it is saved that way, and the block is written only when the message is sent (save_policy.as_sent)."""
        return user_with_context(text, self.runtime_context(channel, chat_id))

    def build_messages(
        self,
        history: list[Message],
        text: str | None = None,
        *,
        channel: str = "cli",
        chat_id: str = "direct",
        system_prompt: str | None = None,
        working_state: str = "",
    ) -> list[Message]:
        """system prompt + history (+ the current user message when `text` is given); the session's
        working state, if any, opens the first user message (session/working_state.py says why there)."""
        current = (
            [for_wire(as_sent(self.user_message(text, channel=channel, chat_id=chat_id)))]
            if text is not None
            else []
        )
        return [
            {"role": "system", "content": system_prompt or self.system_prompt()},
            *with_block([*history, *current], working_state),
        ]
