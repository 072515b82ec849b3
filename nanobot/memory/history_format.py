"""How a HISTORY.md entry is written: the stamp that opens it and the chunk marker that may end it.

The lowest piece of the HISTORY.md code, so that the readers (nanobot.memory.history, the recall
index, the memory store) share one definition and none has to import another for it.
"""

from __future__ import annotations

import re

__all__ = ["STAMP_PATTERN", "STAMP_RE", "CHUNK_MARKER", "CHUNK_MARKER_RE", "without_chunk_markers"]

# An entry starts at a line opening with this stamp: [YYYY-MM-DD HH:MM], seconds and a `T` allowed.
STAMP_PATTERN = r"\[(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2}))?\]"
STAMP_RE = re.compile(STAMP_PATTERN)  # the one HISTORY.md entry stamp

# The line that ends a HISTORY.md entry written by consolidation: which messages of which session it
# records, so a process killed before its pointer write never writes the entry twice
# (agent/compaction.py writes and finds it). Bookkeeping, not part of what the entry says.
CHUNK_MARKER = "<!-- nanobot chunk {key} +{count} -->"
CHUNK_MARKER_RE = r"<!-- nanobot chunk {key} \+(\d+) -->"
_ANY_CHUNK_MARKER = re.compile(r"[ \t]*<!-- nanobot chunk [0-9a-f]+ \+\d+ -->[ \t]*\n?")


def without_chunk_markers(text: str) -> str:
    """An entry's text as a reader should see it: the chunk markers taken out."""
    return _ANY_CHUNK_MARKER.sub("", text)
