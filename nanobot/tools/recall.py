"""search_history: the model's recall of archived conversations (memory/HISTORY.md).

HISTORY.md holds the dated summaries consolidation wrote and the RAW archives of chunks it
could not summarise. This tool reads it from the end (nanobot.memory.history.search_newest), so it
works offline, with exec disabled or confined, and answers fast on a file of any size. What it
returns is bounded: at most MAX_ENTRIES whole entries, each cut at ENTRY_CHARS, the whole at
RESULT_CHARS.
"""

from __future__ import annotations

import re
from typing import Any

from nanobot.errors import ToolError
from nanobot.tools.base import Tool
from nanobot.tools.workspace_guard import workspace_root
from nanobot.untrusted import fence

__all__ = ["SearchHistoryTool", "query_terms", "MAX_ENTRIES", "ENTRY_CHARS", "RESULT_CHARS"]

DEFAULT_ENTRIES = 5
MAX_ENTRIES = 20
ENTRY_CHARS = 3000
RESULT_CHARS = 12000


def query_terms(query: str) -> list[str]:
    """Words of the query; "quoted text" stays one phrase."""
    return [a or b for a, b in re.findall(r'"([^"]+)"|(\S+)', query) if (a or b).strip()]


class SearchHistoryTool(Tool):
    name = "search_history"
    description = (
        "Search the archive of past conversations (memory/HISTORY.md: dated summaries and raw archived "
        "messages). Returns whole dated entries that contain EVERY word of the query (case-insensitive; "
        "\"quoted words\" match as a phrase), newest first. Use it when the user refers to something that "
        "is not in MEMORY.md or the current conversation; try other or fewer words if nothing is found."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words that must all appear in an entry, e.g. 'lisbon flight'."},
            "since": {"type": "string", "description": "Only entries from this date on (YYYY-MM-DD or 'YYYY-MM-DD HH:MM')."},
            "until": {"type": "string", "description": "Only entries up to this date, inclusive."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ENTRIES,
                      "description": f"How many entries at most (default {DEFAULT_ENTRIES})."},
        },
        "required": ["query"],
    }

    async def run(self, query: str, since: str | None = None, until: str | None = None,
                  limit: int = DEFAULT_ENTRIES, **_: Any) -> str:
        from nanobot.memory import history as history_log
        from nanobot.memory.store import MemoryStore

        terms = query_terms(query if isinstance(query, str) else "")
        if not terms:
            raise ToolError("query is empty; give one or more words to look for")
        try:
            since_dt = history_log.parse_when(since) if since else None
            until_dt = history_log.parse_when(until, end_of_day=True) if until else None
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        limit = max(1, min(int(limit or DEFAULT_ENTRIES), MAX_ENTRIES))
        path = MemoryStore(workspace_root(self.ctx)).history_file
        if not path.is_file():
            return "There is no archived history yet (memory/HISTORY.md does not exist)."
        entries = history_log.search_newest(path, terms, limit=limit, since=since_dt, until=until_dt)
        shown = ", ".join(repr(t) for t in terms)
        if not entries:
            return f"No entry in memory/HISTORY.md contains all of {shown}. Try fewer or other words."
        head = (f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} of memory/HISTORY.md containing "
                f"{shown}, newest first" + (" (there may be older ones: raise limit or narrow with since/until)"
                                            if len(entries) == limit else "") + ":")
        parts: list[str] = []
        used = len(head)
        for entry in entries:
            text = entry.text
            if len(text) > ENTRY_CHARS:
                text = text[:ENTRY_CHARS] + f" …[entry cut: {len(entry.text) - ENTRY_CHARS:,} more characters]"
            if used + len(text) > RESULT_CHARS:
                more = (f"\n\n[{len(entries) - len(parts)} more matching entr(ies) not shown: the result is "
                        "capped; search with more specific words or a date range]")
                break
            parts.append(text)
            used += len(text) + 2
        else:
            more = ""
        # summaries written from past conversations (web pages and files included): data, not orders
        return head + "\n" + fence("\n\n".join(parts), "memory/HISTORY.md, archived past conversations") + more
