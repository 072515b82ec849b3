"""What the rest of nanobot needs of a session store, as small Protocols.

nanobot.session.store.SessionStore (the JSONL files) is one; a test, or another backend, can stand
in for it anywhere these types are asked for, and mypy checks that it does. Each Protocol names only
the methods its users call; what a session is (its messages, pointer, working state) is the
`Session` dataclass either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from nanobot.messages import Message

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from nanobot.session.store import RepairReport, Session, SessionInfo
    from nanobot.session.working_state import Version, WorkingState

__all__ = [
    "WorkingStateWriter",
    "WorkingStateReader",
    "SessionWriter",
    "SessionStoreLike",
    "SessionAdmin",
]


class WorkingStateWriter(Protocol):
    """One session's working-state log as consolidation and /new write it (append-only; the store
    reads it back into `Session.working_state`). session/working_state.py's WorkingStateLog is one."""

    def add_version(self, text: str, /, *, archived: int) -> Version:
        """A new checkpoint version, durable when this returns."""
        ...

    def record_compaction(
        self, *, ok: bool, archived: int, reason: str = "", items: int = 0
    ) -> None:
        """How a compaction ended (for status and doctor)."""
        ...

    def close_for_new(self) -> None:
        """/new: the current version is archived with the conversation."""
        ...


class WorkingStateReader(Protocol):
    """One session's working-state log as `nanobot session show`, `status` and `doctor` read it:
    every version, the one in force, how the last compaction ended."""

    def read(self) -> WorkingState: ...


class SessionWriter(Protocol):
    """What a turn (agent/conversation.py) and consolidation (agent/consolidation.py) do to a session
    that is open for writing."""

    def append(self, session: Session, messages: list[Message], /) -> None:
        """Add the messages at the end, durably (session/save_policy.py's TurnStore)."""
        ...

    def set_pointer(self, session: Session, last_consolidated: int, /) -> None:
        """Record that the messages before `last_consolidated` are archived in memory."""
        ...

    def clear(self, session: Session, /) -> str | None:
        """/new: keep the conversation as an archived one and start the key afresh (its messages
        were recorded in HISTORY.md first); returns the archive's name, None when none was made."""
        ...

    def working_state_log(self, session: Session, /) -> WorkingStateWriter:
        """The session's working-state log, written under the session's lock like the rest."""
        ...


class SessionStoreLike(SessionWriter, Protocol):
    """What an assistant (app.py) needs besides: sessions opened for writing (one writer each) and
    closed, read-only snapshots, approval decisions recorded."""

    def exists(self, key: str, /) -> bool: ...

    def load(self, key: str, /) -> Session:
        """A read-only snapshot; raises UnknownSessionError."""
        ...

    def open(self, key: str, /) -> Session:
        """The session, created if new, held for writing until `close`; raises SessionInUseError."""
        ...

    def close(self, session: Session, /) -> None: ...

    def working_state_for(self, key: str, /) -> WorkingStateReader:
        """The working state of the session `key` as the chat's /status shows it."""
        ...

    def record_decision(self, session: Session, **fields: Any) -> dict[str, Any]:
        """Keep an approval decision with the session; returns the record as kept."""
        ...


class SessionAdmin(Protocol):
    """What `nanobot session ...` and status ask: every session listed, one read, one repaired."""

    def exists(self, key: str, /) -> bool: ...

    def infos(self) -> list[SessionInfo]:
        """Every session, read without taking locks, newest first."""
        ...

    def archives(self, key: str | None = None, /) -> list[SessionInfo]:
        """Every conversation /new archived, or those of `key` (an info's `key` is the
        conversation's name, `<key>@<stamp>`), newest first."""
        ...

    def load(self, key: str, /) -> Session:
        """A read-only snapshot; raises UnknownSessionError."""
        ...

    def repair(self, key: str, /) -> RepairReport:
        """Rewrite a damaged session cleanly, the original kept aside."""
        ...

    def working_state_log(self, session: Session, /) -> WorkingStateReader: ...

    def working_state_for(self, key: str, /) -> WorkingStateReader:
        """The working state of the session `key` (status), without loading the session."""
        ...

    def working_states(self) -> Sequence[tuple[Path, WorkingStateReader]]:
        """Every session's working state with the session file it belongs to (doctor)."""
        ...
