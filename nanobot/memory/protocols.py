"""What the rest of nanobot needs of the memory files, as small Protocols.

nanobot.memory.store.MemoryStore is both the MEMORY.md door and the HISTORY.md log; a test, or
another backend, can stand in for either wherever these types are asked for, and mypy checks that
it does. Each Protocol names only the methods its users call.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from nanobot.messages import Message

if TYPE_CHECKING:
    from nanobot.memory.store import (
        MemoryInfo,
        MemoryState,
        UpdateOutcome,
        VersionInfo,
        WriteReceipt,
    )

__all__ = ["MemoryStoreLike", "HistoryStoreLike", "ConsolidationMemory", "MemoryAdmin"]


class MemoryStoreLike(Protocol):
    """MEMORY.md as it is read: for the system prompt, and with its damage for consolidation."""

    def read_memory(self) -> str: ...

    def state(self) -> MemoryState: ...


class HistoryStoreLike(Protocol):
    """HISTORY.md as consolidation reads and appends it (append-only; searching it is
    nanobot.memory.history.search's)."""

    def history_tail(self, max_bytes: int, /) -> str:
        """The last `max_bytes` of the log as text ("" when there is none)."""
        ...

    def append_raw_archive(
        self, messages: list[Message], reason: str, /, *, marker: str = ""
    ) -> str:
        """Archive messages that could not be summarised; returns the entry's first line."""
        ...


class ConsolidationMemory(MemoryStoreLike, HistoryStoreLike, Protocol):
    """What consolidation writes through: a history entry and a MEMORY.md update, both or neither."""

    def record_consolidation(
        self,
        history_entry: str,
        memory_update: str | None,
        /,
        *,
        truncated: bool,
        base: str | None,
        when: datetime | None = None,
    ) -> tuple[str, UpdateOutcome]:
        """Returns (the entry's first line, what became of the update); raises MemoryUpdateRefused,
        writing nothing, when either part fails its checks."""
        ...


class MemoryAdmin(MemoryStoreLike, Protocol):
    """What `nanobot memory ...` (show, versions, restore, edit, check, tidy) and doctor ask of the
    memory files: where they are, their saved versions, and a write that keeps the old text."""

    @property
    def memory_file(self) -> Path: ...

    @property
    def history_file(self) -> Path: ...

    @property
    def history_journal(self) -> Path: ...

    @property
    def versions_dir(self) -> Path: ...

    @property
    def damaged_dir(self) -> Path: ...

    @property
    def warnings(self) -> list[str]:
        """Damage noticed while reading, for the user."""
        ...

    def memory_info(self) -> MemoryInfo: ...

    def versions(self) -> list[VersionInfo]:
        """Saved versions, newest first (1 = the most recently replaced)."""
        ...

    def read_version(self, n: int, /) -> str: ...

    def restore(self, n: int, /) -> WriteReceipt: ...

    def undo_hint(self) -> str: ...

    def write_memory(
        self, new_text: str, /, *, reason: str, base: str | None = None
    ) -> WriteReceipt:
        """Replace MEMORY.md, the current text kept as a version first."""
        ...
