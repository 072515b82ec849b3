"""Token counts of files that rarely change (MEMORY.md), kept beside the nanobot home.

`nanobot memory show` prints MEMORY.md's size in tokens. Counting it exactly means loading
tiktoken's ranks (about 0.3 s and 45 MB), which a read-only command should not pay every time
for a file that has not changed. So exact counts are remembered by the text's SHA-256 in
`~/.nanobot/cache/token-counts.json`; a changed text is simply counted again. Only exact counts
are kept: a fallback estimate is never served as if it were exact.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from nanobot.fsio import atomic_write
from nanobot.paths import nanobot_home

__all__ = ["cached_count"]

_KEEP = 32  # entries; MEMORY.md of a few workspaces and their recent states


def _cache_file() -> Path:
    return nanobot_home() / "cache" / "token-counts.json"


def _read(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and type(v) is int and v >= 0}


def cached_count(text: str) -> tuple[int, bool]:
    """(tokens, exact) for `text`: from the cache when this exact text was counted before."""
    key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    path = _cache_file()
    known = _read(path)
    if key in known:
        return known[key], True
    from nanobot.tokens import default_counter

    counter = default_counter()
    tokens = counter.count_text(text)
    if counter.exact:
        known.pop(key, None)
        known[key] = tokens
        kept = dict(list(known.items())[-_KEEP:])
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomic_write(path, json.dumps(kept).encode(), mode=0o600)
        except OSError:
            pass  # a read-only home: count again next time
    return tokens, counter.exact
