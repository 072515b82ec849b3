"""Compaction's own rules: which failure is an outage, which HISTORY.md entry already records a
chunk, and how a summarising transcript is cut to fit its request.

1. An outage is not a refusal. A provider that cannot answer (5xx, overloaded, rate-limited,
   timed out, unreachable, refusing the key or the account) says nothing about the model: the
   consolidation stops where it is, nothing is archived RAW and the pointer stays, so the next
   consolidation does the work. Only answers the model got wrong (no save_memory call, unusable
   arguments, an update the memory store refuses) and requests the provider rejects for their
   content (a 400) count as failures, and only those lead to a RAW archive.
2. A consolidation pays for at most `max_failures` failing calls in all, not per chunk: after
   that it stops (the rest waits for the next one), or, for /new, archives the rest RAW without
   another call.
3. Every entry a consolidation writes ends with a marker naming the chunk it records (a hash of
   the session and the chunk's first message, and how many messages it covers). A process killed
   between the HISTORY.md append and the pointer write leaves the marker behind; the next
   consolidation finds it and moves the pointer instead of writing the entry again.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from nanobot.errors import ConsolidationPostponed, ProviderError
from nanobot.memory.history import CHUNK_MARKER, CHUNK_MARKER_RE
from nanobot.messages import Message, cut_middle

__all__ = [
    "is_outage",
    "ConsolidationPostponed",
    "chunk_marker",
    "recorded_count",
    "cut_transcript",
    "MARKER_SCAN_BYTES",
]

# Statuses that say "not now" or "not with this account", never "this request is wrong".
_OUTAGE_STATUSES = frozenset({401, 402, 403, 404, 408, 409, 425, 429})
# How much of HISTORY.md's end is searched for a chunk's marker: the entry a killed process wrote
# is the last one of its session, and other sessions add at most a few entries after it.
MARKER_SCAN_BYTES = 4 * 1024 * 1024


def is_outage(exc: ProviderError) -> bool:
    """The provider could not or would not answer at all: nothing the model said (rule 1)."""
    status = exc.status
    return exc.retryable or status is None or status >= 500 or status in _OUTAGE_STATUSES


def chunk_marker(session_key: str, first: Message, count: int) -> str:
    """The line that ends the HISTORY.md entry recording `count` messages from `first` (rule 3)."""
    return CHUNK_MARKER.format(key=_chunk_key(session_key, first), count=count)


def recorded_count(history_tail: str, session_key: str, first: Message) -> int | None:
    """How many messages from `first` an entry in `history_tail` already records, if one does."""
    found = re.findall(CHUNK_MARKER_RE.format(key=_chunk_key(session_key, first)), history_tail)
    return int(found[-1]) if found else None


def _chunk_key(session_key: str, first: Message) -> str:
    # the first message's own text and timestamp: the same index after a /new is another chunk
    data = json.dumps([session_key, first], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()[:20]


def cut_transcript(transcript: str, room_chars: int) -> str:
    """The transcript's head and tail in `room_chars`, with a line saying what was cut."""
    return cut_middle(
        transcript,
        max(0, room_chars),
        lambda cut: (
            f"\n[... {cut:,} characters of this excerpt cut so the summarising request fits the context "
            "window ...]\n"
        ),
    )


def short_reason(exc: BaseException | Any) -> str:
    """The first line of an error, for a one-line notice."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
