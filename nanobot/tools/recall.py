"""search_history and read_history: the model's recall of everything archived.

Both ask the recall index (nanobot.memory.recall_index; a search goes through
nanobot.memory.history.search): every message of every session and every HISTORY.md entry,
ranked by BM25. The index is brought up to date when a search starts, for at
most REFRESH_SECONDS (the rest waits for the next search; `nanobot history search` finishes it),
in a worker thread, so the chat stays responsive. What comes back is bounded (RESULT_CHARS) and
fenced as data: these are past conversations, web pages and files included.

`tools.recall.scope`: "all" (default) searches every session, labelling hits from other sessions;
"session" keeps to this session and HISTORY.md.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from nanobot.errors import NanobotError, ToolError
from nanobot.memory.recall_index import (
    HISTORY_LABEL,
    Hit,
    RecallIndex,
    Unit,
    best_window,
    default_index_path,
    query_terms,
    query_words,
)
from nanobot.paths import split_archived_name
from nanobot.tools.base import Tool, ToolContext
from nanobot.tools.workspace_guard import workspace_root
from nanobot.untrusted import fence

__all__ = [
    "SearchHistoryTool",
    "ReadHistoryTool",
    "query_terms",
    "MAX_HITS",
    "RESULT_CHARS",
    "open_index",
    "render_hits",
    "SCOPES",
]

DEFAULT_HITS = 5
MAX_HITS = 20
RESULT_CHARS = 12000  # the whole result, as before the index
HIT_CHARS = 1500  # one hit's own text
NEIGHBOUR_CHARS = 300  # the message before and after it
READ_CHARS = 10000  # read_history's whole result
READ_UNIT_CHARS = 2000
REFRESH_SECONDS = 3.0
SCOPES = ("all", "session")
ROLES = ("user", "assistant", "tool", "summary", "archive")
_SOURCE = "archived past conversations (sessions and memory/HISTORY.md)"


def _history_file(ctx: ToolContext) -> Path:
    from nanobot.memory.store import MemoryStore

    return MemoryStore(workspace_root(ctx)).history_file


def open_index(ctx: ToolContext) -> RecallIndex:
    """The recall index over this home's sessions and the workspace's HISTORY.md (read_history reads
    around a hit in it; a search goes through nanobot.memory.history.search)."""
    from nanobot.paths import sessions_dir

    return RecallIndex(default_index_path(), sessions=sessions_dir(), history=_history_file(ctx))


T = TypeVar("T")


def _answering(work: Callable[[], T]) -> T:
    """`work`, with an index that cannot be used turned into a result the model reads."""
    try:
        return work()
    except (sqlite3.Error, NanobotError) as exc:
        raise ToolError(
            f"the index of past conversations cannot be read right now ({exc}); try again shortly, "
            "or tell the user to run `nanobot history search` to see what is wrong"
        ) from None


def _when(unit: Unit) -> str:
    return unit.when[:16] if unit.when else "undated"


def _label(unit: Unit, current: str | None) -> str:
    if unit.session == HISTORY_LABEL:
        return HISTORY_LABEL + (" (RAW archive)" if unit.role == "archive" else "")
    if current is None:
        return f"session {unit.session}"
    if unit.session == current:
        return f"session {unit.session} (this session, earlier)"
    if _key_of(unit.session) == current:
        return f"session {unit.session} (this session, before a /new)"
    return f"session {unit.session} (another session)"


def _key_of(session: str) -> str:
    """The session key a session name belongs to (a conversation /new archived: its key's)."""
    split = split_archived_name(session)
    return split[0] if split is not None else session


def _cut(text: str, words: list[str], size: int) -> str:
    if len(text) <= size:
        return text
    start, end = best_window(text, words, size)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def _line(text: str, words: list[str], size: int) -> str:
    """A neighbour on one line: all of it, or the part of it that holds the query's words."""
    return _cut(" ".join(text.split()), words, size)


def render_hits(
    hits: list[Hit], query: str, *, current: str | None = None, budget: int = RESULT_CHARS
) -> str:
    """The hits as the model (and `history search`) reads them: each with its date, where it was said,
    who said it, a ref for read_history, and the message before and after; at most `budget` characters."""
    words = query_words(query)
    share = max(400, budget // max(1, len(hits)))
    main = min(HIT_CHARS, share - 200)
    side = min(NEIGHBOUR_CHARS, max(0, (share - main - 150) // 2))
    parts: list[str] = []
    used = 0
    for i, hit in enumerate(hits, 1):
        u = hit.unit
        part = f" (part {u.part + 1})" if u.part else ""
        lines = [f"[{i}] {_when(u)} · {_label(u, current)} · {u.role}{part} · ref {u.ref}"]
        if side and hit.before is not None:
            lines.append(f"    before ({hit.before.role}): {_line(hit.before.text, words, side)}")
        lines.append("  " + _cut(u.text, words, main).replace("\n", "\n  "))
        if side and hit.after is not None:
            lines.append(f"    after ({hit.after.role}): {_line(hit.after.text, words, side)}")
        block = "\n".join(lines)
        if used + len(block) > budget:
            break
        parts.append(block)
        used += len(block) + 2
    return "\n\n".join(parts)


class _RecallTool(Tool):
    def __init__(
        self, ctx: ToolContext, *, session_key: str | None = None, scope: str = "all"
    ) -> None:
        super().__init__(ctx)
        self.session_key = session_key
        self.scope = scope if scope in SCOPES else "all"

    def _only(self) -> set[str] | None:
        if self.scope == "session":
            return {self.session_key} if self.session_key else set()
        return None


class SearchHistoryTool(_RecallTool):
    name = "search_history"
    description = (
        "Search everything archived from past conversations: every message of every session (this one's "
        "older part and other sessions) and memory/HISTORY.md (dated summaries, raw archives). Words are "
        "OR-ed and ranked by relevance (BM25), so give the distinctive words you expect in the answer, "
        "e.g. 'dentist appointment Tuesday'; \"quoted words\" match as a phrase. Each hit has its date, "
        "session, speaker, the message before and after, and a ref: call read_history(ref) to read on. "
        "Use it when the user refers to something not in MEMORY.md or the current conversation."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "Words to look for (any may match; the best hits first).",
            },
            "since": {
                "type": "string",
                "description": "Only from this date on (YYYY-MM-DD or 'YYYY-MM-DD HH:MM').",
            },
            "until": {"type": "string", "description": "Only up to this date, inclusive."},
            "session": {
                "type": "string",
                "description": "Only this session (its key, with the conversations its /new "
                "archived), one archived conversation (KEY@STAMP), or 'memory/HISTORY.md'.",
            },
            "role": {
                "type": "string",
                "enum": list(ROLES),
                "description": "Only what this speaker said (summary/archive: HISTORY.md entries).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_HITS,
                "description": f"How many hits at most (default {DEFAULT_HITS}).",
            },
        },
        "required": ["query"],
    }

    def hint(self, args: dict[str, Any]) -> str:
        return f'search_history("{str(args.get("query", ""))[:40]}")'

    async def run(
        self,
        query: str = "",
        since: str | None = None,
        until: str | None = None,
        session: str | None = None,
        role: str | None = None,
        limit: int = DEFAULT_HITS,
        **_: Any,
    ) -> str:
        from nanobot.memory import history as history_log
        from nanobot.memory.recall_index import fts_query

        query = query if isinstance(query, str) else ""
        if fts_query(query) is None:
            raise ToolError("query is empty; give one or more words to look for")
        try:
            since_dt = history_log.parse_when(since) if since else None
            until_dt = history_log.parse_when(until, end_of_day=True) if until else None
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        if role is not None and role not in ROLES:
            raise ToolError(f"role must be one of {', '.join(ROLES)}")
        only = self._only()
        if (
            session
            and only is not None
            and _key_of(session) not in only
            and session != HISTORY_LABEL
        ):
            raise ToolError(
                'this assistant keeps sessions apart (tools.recall.scope is "session"); '
                "search this session or memory/HISTORY.md"
            )
        limit = max(1, min(int(limit or DEFAULT_HITS), MAX_HITS))
        request = history_log.Ranked(
            query,
            limit=limit,
            since=since_dt,
            until=until_dt,
            session=session or None,
            role=role,
            exclude_live=self.session_key,
            only_sessions=frozenset(only) if only is not None else None,
            refresh=history_log.refreshed_within(REFRESH_SECONDS),
        )
        history = _history_file(self.ctx)
        found = await asyncio.to_thread(
            _answering, lambda: history_log.search(request, history=history)
        )
        hits, complete = found.hits, found.complete
        note = (
            ""
            if complete
            else (
                " The index of past conversations is still being built, so older ones may "
                "be missing; search again in a moment."
            )
        )
        if not hits:
            return f"Nothing archived matches {query!r}. Try other words (names, places, rarer words).{note}"
        head = (
            f"{len(hits)} hit{'s' if len(hits) != 1 else ''} for {query!r}, best first "
            "(read on around one with read_history(ref)):" + note
        )
        body = render_hits(
            hits, query, current=self.session_key, budget=RESULT_CHARS - len(head) - 200
        )
        return head + "\n" + fence(body, _SOURCE)


class ReadHistoryTool(_RecallTool):
    name = "read_history"
    description = (
        "Read the archived conversation around a search_history hit: the messages (or HISTORY.md entries) "
        "before and after the one its ref names, in order, with dates and speakers."
    )
    parameters = {
        "type": "object",
        "properties": {
            "ref": {
                "type": "string",
                "description": "A hit's ref from search_history, e.g. 'cli:direct#42'.",
            },
            "before": {
                "type": "integer",
                "minimum": 0,
                "maximum": 20,
                "description": "Messages before it (default 4).",
            },
            "after": {
                "type": "integer",
                "minimum": 0,
                "maximum": 20,
                "description": "Messages after it (default 4).",
            },
        },
        "required": ["ref"],
    }

    def hint(self, args: dict[str, Any]) -> str:
        return f'read_history("{str(args.get("ref", ""))[:40]}")'

    async def run(self, ref: str = "", before: int = 4, after: int = 4, **_: Any) -> str:
        session, _sep, number = str(ref).strip().rpartition("#")
        if not session or not number.strip().isdigit():
            raise ToolError(
                "ref must look like 'SESSION#NUMBER', as search_history shows it (e.g. 'cli:direct#42')"
            )
        only = self._only()
        if only is not None and _key_of(session) not in only and session != HISTORY_LABEL:
            raise ToolError('this assistant keeps sessions apart (tools.recall.scope is "session")')
        seq = int(number)
        before = max(0, min(int(before), 20))
        after = max(0, min(int(after), 20))
        index = open_index(self.ctx)

        def work() -> tuple[list[Unit], list[str]]:
            try:
                index.refresh(budget_seconds=REFRESH_SECONDS)
                units = index.around(session, seq, before=before, after=after)
                return units, [] if units else index.archives_of({session})
            finally:
                index.close()

        units, archives = await asyncio.to_thread(_answering, work)
        if not units and archives:
            # A ref names a place in the key's current conversation; /new started that afresh.
            names = ", ".join(archives[-3:]) + (" and earlier ones" if len(archives) > 3 else "")
            raise ToolError(
                f"nothing at {ref!r}: {session}'s current conversation is shorter. /new started it "
                f"afresh and kept the earlier conversation(s) as {names}; a ref taken before a /new "
                "is not valid any more: search again (search_history) for the ref to read"
            )
        if not units:
            return f"Nothing archived at {ref!r}."
        lines: list[str] = []
        used = 0
        for u in units:
            mark = " ◀" if u.seq == seq else ""
            text = u.text if len(u.text) <= READ_UNIT_CHARS else u.text[:READ_UNIT_CHARS] + "…"
            block = (
                f"#{u.seq} {_when(u)} {u.role}{mark}:\n  " if not u.part else "  "
            ) + text.replace("\n", "\n  ")
            if used + len(block) > READ_CHARS:
                lines.append(
                    f"[cut: the result is capped at {READ_CHARS} characters; read from a later ref]"
                )
                break
            lines.append(block)
            used += len(block) + 1
        head = f"{_label(units[0], self.session_key)}, around #{seq}:"
        return head + "\n" + fence("\n".join(lines), _SOURCE)
