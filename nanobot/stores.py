"""Which store class backs a home: the one place that builds the session, memory and job stores.

The chat (app.py), status and doctor and the admin commands (`nanobot session ...`, `nanobot
memory ...`, `nanobot cron ...`, `nanobot memory tidy`) all get their stores here, so a second
backend is one change. Callers hold them as the Protocols of session/protocols.py,
memory/protocols.py and cron/protocols.py; the concrete classes are named only here and in
the modules that receive a whole store (the session importer, the cron runner).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nanobot.cron.store import JobStore
    from nanobot.memory.store import MemoryStore
    from nanobot.session.store import SessionStore

__all__ = ["job_store", "memory_store", "session_store"]


def session_store(workspace: Path | None) -> SessionStore:
    """The sessions of this home; with a workspace, its HISTORY.md proves a damaged pointer."""
    from nanobot.memory.history import history_receipts
    from nanobot.session.store import SessionStore

    return SessionStore(receipts=history_receipts(workspace) if workspace is not None else None)


def memory_store(workspace: Path) -> MemoryStore:
    """MEMORY.md and HISTORY.md of `workspace` (and their versions)."""
    from nanobot.memory.store import MemoryStore

    return MemoryStore(workspace)


def job_store(workspace: Path) -> JobStore:
    """The scheduled jobs of `workspace`."""
    from nanobot.cron.store import JobStore

    return JobStore(workspace)
