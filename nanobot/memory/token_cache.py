"""Token counts of files that rarely change (MEMORY.md), kept beside the nanobot home.

`nanobot memory show` prints MEMORY.md's size in tokens. Counting it exactly means loading
tiktoken's ranks (about 0.3 s and 45 MB), which a read-only command should not pay every time
for a file that has not changed. So exact counts are remembered by the text's SHA-256 in
`~/.nanobot/cache/token-counts.json`; a changed text is simply counted again. Only exact counts
are kept: a fallback estimate is never served as if it were exact.
"""

from __future__ import annotations

from nanobot.text_cache import TextCache

__all__ = ["cached_count"]

_KEEP = 32  # entries; MEMORY.md of a few workspaces and their recent states


def cached_count(text: str) -> tuple[int, bool]:
    """(tokens, exact) for `text`: from the cache when this exact text was counted before."""
    cache = TextCache("token-counts", keep=_KEEP, valid=lambda v: type(v) is int and v >= 0)
    known = cache.get(text)
    if known is not None:
        return known, True
    from nanobot.tokens import default_counter

    counter = default_counter()
    tokens = counter.count_text(text)
    if counter.exact:
        cache.remember(text, tokens)
        cache.save()
    return tokens, counter.exact
