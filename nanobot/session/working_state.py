"""A session's working state: the checkpoint each compaction writes, kept beside the session file.

Consolidation keeps lasting facts (MEMORY.md, shared by every session) and a dated summary
(HISTORY.md, never sent). The task in hand (goal, status, decisions, open questions, next step,
the exact identifiers still in play) is neither: it belongs to one session, so it is stored with
it, in `<session file>.working-state`, one JSON record a line:

    {"kind": "checkpoint", "version": 3, "at": ..., "text": ..., "items": 6, "archived": 12}
    {"kind": "compaction", "at": ..., "ok": false, "reason": ..., "archived": 0}
    {"kind": "new", "at": ..., "version": 3}      # /new archived the conversation and this state

Rules (the session file's own, nanobot.session.store):
1. Append only, one write + one fsync per record, under the session's lock; every version is kept.
2. A torn or damaged line costs only itself: it is skipped when read, and its bytes are moved to
   `<file>.corrupt` when the session is opened for writing.
3. The latest checkpoint after the last `new` record is the one sent with the session's requests
   (`block`, fenced as data the assistant itself wrote); a `compaction` record tells `status` and
   `doctor` how the last compaction ended, until a `new` record archives it with its conversation.

Why a sibling file and not records in the session JSONL: the session file's load index seals
its prefix by counting messages and decisions, and its rewrites (repair) keep only those;
a third kind of record would have to be taught to each of them. This file follows the same rules
on its own, and a reader of the session file (or nanobot 0.1.x) never sees it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nanobot.errors import storage_error
from nanobot.fsio import append_durably, atomic_write
from nanobot.messages import Message, now_iso
from nanobot.untrusted import fence

__all__ = [
    "WorkingState",
    "Version",
    "WorkingStateLog",
    "state_path",
    "count_items",
    "items_phrase",
    "block",
    "SOURCE",
    "with_block",
    "carry_block",
    "SHAPE",
]

SUFFIX = ".working-state"
# the label of the block in the prompt: who wrote it and why it is there
SOURCE = (
    "working state of this conversation: nanobot's own checkpoint, written by the assistant itself "
    "when older messages were compacted"
)
# the fixed shape asked of the model (and written by the fake model)
SHAPE = (
    "Goal: ...\nStatus: ...\nDecisions:\n- ...\nOpen questions:\n- ...\nNext step: ...\n"
    "Identifiers (every exact path, id, URL, number, name still in play):\n- ...\n"
)
_OPEN = f'<untrusted-data source="{SOURCE}">'


def state_path(session_path: Path) -> Path:
    return session_path.with_name(session_path.name + SUFFIX)


def count_items(text: str) -> int:
    """The items of a checkpoint: each non-empty line that says something (a bullet, or `Label: value`);
    headings and bare labels ("Decisions:") are not items, nor are "none" values."""
    items = 0
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.endswith(":"):
            continue
        value = (
            line.split(":", 1)[1]
            if ":" in line and not line.startswith(("-", "*"))
            else line.lstrip("-* ")
        )
        if value.strip().strip(".").lower() not in ("", "none", "n/a", "-"):
            items += 1
    return items


def items_phrase(items: int) -> str:
    """ "1 item", "6 items": how every screen names a checkpoint's size."""
    return f"{items} item{'s' if items != 1 else ''}"


@dataclass(frozen=True)
class Version:
    number: int
    at: str
    text: str
    items: int
    archived: int  # messages the compaction that wrote it moved past
    closed: bool = False  # a later /new archived it with its conversation

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.number,
            "at": self.at,
            "items": self.items,
            "archived": self.archived,
            "closed_by_new": self.closed,
            "text": self.text,
        }


@dataclass
class WorkingState:
    """What the file holds: every version, the one in force, how the last compaction ended."""

    versions: list[Version] = field(default_factory=list)
    current: Version | None = None  # None before the first compaction and after /new
    last_compaction: dict[str, Any] | None = None
    new_at: str | None = None  # when the last /new archived the versions before it (None: never)
    damaged: list[bytes] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.current.text if self.current is not None else ""

    @property
    def archived(self) -> list[Version]:
        """The versions a /new archived with their conversation (kept, no longer sent)."""
        return [v for v in self.versions if v.closed]

    @property
    def failed(self) -> dict[str, Any] | None:
        """The last compaction's record when it failed (what `status` and `doctor` show)."""
        last = self.last_compaction
        return last if last is not None and not last.get("ok", True) else None

    def as_json(self) -> dict[str, Any]:
        return {
            "current": self.current.as_json() if self.current else None,
            "versions": [v.as_json() for v in self.versions],
            "last_compaction": self.last_compaction,
        }


def _parse(data: bytes) -> WorkingState:
    state = WorkingState()
    closed_upto = 0
    raw: list[tuple[int, str, str, int, int]] = []
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, ValueError):
            state.damaged.append(line)
            continue
        if not isinstance(record, dict):
            state.damaged.append(line)
            continue
        kind = record.get("kind")
        if kind == "checkpoint" and isinstance(record.get("text"), str):
            number = record.get("version")
            number = (
                number if isinstance(number, int) and not isinstance(number, bool) else len(raw) + 1
            )
            raw.append(
                (
                    number,
                    str(record.get("at", "")),
                    record["text"],
                    _int(record.get("items")),
                    _int(record.get("archived")),
                )
            )
        elif kind == "compaction":
            state.last_compaction = record
        elif kind == "new":
            closed_upto = len(raw)
            state.new_at = str(record.get("at", "")) or "?"
            state.last_compaction = None  # a failure before /new was the archived conversation's
        elif kind is None:
            state.damaged.append(line)
        # another kind, from a newer version: kept on disk, ignored here
    state.versions = [
        Version(n, at, text, items, archived, closed=i < closed_upto)
        for i, (n, at, text, items, archived) in enumerate(raw)
    ]
    state.current = state.versions[-1] if len(raw) > closed_upto else None
    return state


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class WorkingStateLog:
    """The working-state file of one session. Writes need the session's lock (the caller holds it)."""

    def __init__(self, session_path: Path) -> None:
        self.path = state_path(session_path)

    def read(self) -> WorkingState:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return WorkingState()
        except OSError as exc:
            raise storage_error(exc, "read the session's working state", self.path) from None
        return _parse(data)

    def open(self) -> tuple[WorkingState, list[str]]:
        """Read for writing: damaged lines are moved to `<file>.corrupt` (and said so), the rest kept."""
        state = self.read()
        if not state.damaged and not self._torn():
            return state, []
        warnings = []
        try:
            if state.damaged:
                side = Path(str(self.path) + ".corrupt")
                append_durably(side, b"".join(line + b"\n" for line in state.damaged))
                warnings.append(
                    f"{len(state.damaged)} damaged line(s) of the working state {self.path} could "
                    f"not be read; their bytes were moved to {side}"
                )
            good = [
                line
                for line in self.path.read_bytes().split(b"\n")
                if line.strip() and line not in state.damaged
            ]
            atomic_write(self.path, b"".join(line + b"\n" for line in good))
        except OSError as exc:
            raise storage_error(exc, "repair the session's working state", self.path) from None
        state.damaged = []
        return state, warnings

    def _torn(self) -> bool:
        try:
            with self.path.open("rb") as fh:
                fh.seek(0, 2)
                if fh.tell() == 0:
                    return False
                fh.seek(-1, 2)
                return fh.read(1) != b"\n"
        except OSError:
            return False

    def _append(self, record: dict[str, Any]) -> None:
        payload = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "replace")
        if self._torn():
            payload = b"\n" + payload  # never glue a record onto a torn line
        try:
            append_durably(self.path, payload)
        except OSError as exc:
            raise storage_error(exc, "save the session's working state", self.path) from None

    def add_version(self, text: str, *, archived: int) -> Version:
        """Append a new checkpoint version; durable when this returns."""
        versions = self.read().versions
        number = versions[-1].number + 1 if versions else 1
        version = Version(number, now_iso(), text, count_items(text), archived)
        self._append(
            {
                "kind": "checkpoint",
                "version": number,
                "at": version.at,
                "items": version.items,
                "archived": archived,
                "text": text,
            }
        )
        return version

    def record_compaction(
        self, *, ok: bool, archived: int, reason: str = "", items: int = 0
    ) -> None:
        self._append(
            {
                "kind": "compaction",
                "at": now_iso(),
                "ok": ok,
                "archived": archived,
                "items": items,
                **({"reason": reason} if reason else {}),
            }
        )

    def close_for_new(self) -> None:
        """/new: the conversation's working state is closed (and the store moves this file with the
        conversation to its archived name); the next one starts without."""
        state = self.read()
        if state.current is not None or state.failed is not None:
            version = state.current.number if state.current is not None else None
            self._append({"kind": "new", "at": now_iso(), "version": version})


# -- in the prompt ---------------------------------------------------------------------------------


def block(text: str) -> str:
    """The checkpoint as the model reads it: one block, fenced as data, labelled as its own notes."""
    return fence(text.strip(), SOURCE) + "\n\n"


def _prepend(msg: Message, head: str) -> Message:
    content = msg.get("content")
    if isinstance(content, list):
        return {**msg, "content": [{"type": "text", "text": head}, *content]}
    return {**msg, "content": head + (content if isinstance(content, str) else "")}


def with_block(history: list[Message], text: str) -> list[Message]:
    """`history` with the checkpoint at the start of its first user message.

    There, the request's prefix (system prompt, then the history) stays byte-identical from turn to
    turn until the next compaction, which changes both the history's start and the checkpoint."""
    if not text.strip():
        return history
    first = next((i for i, m in enumerate(history) if m.get("role") == "user"), None)
    if first is None:
        return history
    return [*history[:first], _prepend(history[first], block(text)), *history[first + 1 :]]


_BLOCK_RE = re.compile(re.escape(_OPEN) + r"\n.*?\n</untrusted-data>\n\n", re.DOTALL)


def _leading(msg: Message) -> str:
    content = msg.get("content")
    if isinstance(content, list):
        content = content[0].get("text") if content and isinstance(content[0], dict) else None
    if not isinstance(content, str) or not content.startswith(_OPEN):
        return ""
    found = _BLOCK_RE.match(content)
    return found.group(0) if found else ""


def carry_block(source: Message, target: Message) -> Message:
    """`target` with the checkpoint block `source` starts with (for a request whose older turns are
    left out: the working state stays in it)."""
    head = _leading(source)
    return _prepend(target, head) if head and not _leading(target) else target
