"""Values worked out from a text, remembered by the text's SHA-256 under `~/.nanobot/cache/`.

For texts that rarely change and cost something to read on every run: MEMORY.md's token count
(tiktoken's ranks take 0.3 s to load) and SKILL.md front matter (PyYAML's import alone is 12 ms of
each start). A changed text is worked out again; a cache file that is missing, damaged or cannot
be written costs only that work. Values are JSON, and each file keeps its most recent entries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from nanobot.fsio import atomic_write
from nanobot.paths import ensure_private_dir, nanobot_home

__all__ = ["TextCache"]


class TextCache:
    """One cache file, `~/.nanobot/cache/<name>.json`: read on first use, written by `save()`."""

    def __init__(
        self, name: str, *, keep: int, valid: Callable[[Any], bool] = lambda value: True
    ) -> None:
        self.path = nanobot_home() / "cache" / f"{name}.json"
        self._keep = keep
        self._valid = valid
        self._entries: dict[str, Any] | None = None
        self._changed = False

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def _loaded(self) -> dict[str, Any]:
        if self._entries is None:
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                data = {}
            self._entries = (
                {k: v for k, v in data.items() if isinstance(k, str) and self._valid(v)}
                if isinstance(data, dict)
                else {}
            )
        return self._entries

    def get(self, text: str) -> Any | None:
        """What was remembered for this exact text, or None."""
        return self._loaded().get(self._key(text))

    def remember(self, text: str, value: Any) -> None:
        entries = self._loaded()
        key = self._key(text)
        if key in entries and entries[key] == value:
            return
        entries.pop(key, None)
        entries[key] = value  # the newest last: the oldest go first when the file is full
        self._changed = True

    def save(self) -> None:
        """Write what was remembered since the file was read (nothing when nothing changed)."""
        if not self._changed or self._entries is None:
            return
        kept = dict(list(self._entries.items())[-self._keep :])
        try:
            ensure_private_dir(
                self.path.parent
            )  # the home too, when this makes it (0700, as onboard)
            atomic_write(self.path, json.dumps(kept).encode(), mode=0o600)
        except OSError:
            return  # a read-only home: worked out again next time
        self._changed = False
