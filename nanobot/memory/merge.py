"""Three-way merge of MEMORY.md texts, for the compare-and-swap rule of the memory store.

An update was computed from `base`; meanwhile the file became `current` (another session's
consolidation, the user's edit). `merge_update` replays the update's own change (base → update)
on top of `current`, line by line, so what changed in `current` wins:

1. lines the update added are inserted after the line they followed in `base` (at the end
   when that line is gone), unless `current` already has them;
2. lines the update replaced or removed are replaced or removed only where `current` still holds
   them exactly; where the other writer changed them too, `current` keeps its text and the
   update's replacement lines are returned as conflicts, for the user to review.
"""

from __future__ import annotations

from difflib import SequenceMatcher

__all__ = ["merge_update"]


def _find_block(lines: list[str], block: list[str]) -> int | None:
    n = len(block)
    for i in range(len(lines) - n + 1):
        if lines[i : i + n] == block:
            return i
    return None


def merge_update(base: str, update: str, current: str) -> tuple[str, list[str]]:
    """(merged text, conflicting update lines not applied). See the module docstring."""
    b, u, out = base.splitlines(), update.splitlines(), current.splitlines()
    conflicts: list[str] = []
    have = set(out)
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, b, u, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        old, new = b[i1:i2], u[j1:j2]
        if old:
            pos = _find_block(out, old)
            if pos is None:
                conflicts.extend(x for x in new if x.strip() and x not in have)
                continue
            out[pos : pos + len(old)] = new
        else:
            fresh = [x for x in new if not x.strip() or x not in have]
            if not any(x.strip() for x in fresh):
                continue
            anchor = b[i1 - 1] if i1 > 0 else None
            if anchor is None:
                pos = 0
            else:
                at = next((k for k, line in enumerate(out) if line == anchor), None)
                pos = len(out) if at is None else at + 1
            out[pos:pos] = fresh
        have = set(out)
    text = "\n".join(out)
    return (text + "\n" if text else text), conflicts
