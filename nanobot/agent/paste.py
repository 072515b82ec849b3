"""A message too large for the context budget is kept whole as a workspace file.

The model gets the file's path, its size, its beginning and its end, and reads the rest in parts
with its file tools; the session stores that short message, the file keeps every byte, and the
user sees one line saying where it went.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from nanobot.agent.budget import ContextBudget
from nanobot.agent.events import EventSink, Notice
from nanobot.fsio import atomic_write
from nanobot.messages import cut_middle

__all__ = ["keep_large_paste", "INBOX"]

INBOX = "inbox"
_EXCERPT_SHARE = 8  # the excerpt takes at most 1/8 of the budget
_EXCERPT_MAX_CHARS = 6000


def _fits_half(text: str, budget: ContextBudget) -> bool:
    half = budget.budget // 2
    if len(text.encode("utf-8")) <= half:
        return True  # a byte bounds a token: no need to count
    return budget.calibration.adjust(budget.counter.count_text(text)) <= half


def _free_path(workspace: Path, now: datetime) -> Path:
    folder = workspace / INBOX
    base = now.strftime("%Y%m%d-%H%M%S")
    path = folder / f"{base}-paste.md"
    n = 2
    while path.exists():
        path = folder / f"{base}-paste-{n}.md"
        n += 1
    return path


def keep_large_paste(
    text: str,
    budget: ContextBudget,
    workspace: Path,
    emit: EventSink,
    *,
    now: datetime | None = None,
) -> str:
    """`text`, or when it takes more than half the budget, a short message pointing to the file that holds it."""
    if _fits_half(text, budget):
        return text
    tokens = budget.counter.count_text(text)
    path = _free_path(workspace, now or datetime.now())
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)
    relative = path.relative_to(workspace)
    chars_per_token = max(1.0, len(text) / max(1, tokens))
    keep = min(_EXCERPT_MAX_CHARS, int(budget.budget // _EXCERPT_SHARE * chars_per_token))
    excerpt = cut_middle(text, keep, lambda cut: f"\n--- [{cut:,} characters not shown] ---\n")
    lines = text.count("\n") + 1
    emit(
        Notice(
            f"your message ({len(text):,} characters, ~{tokens:,} tokens) is too large for the context window; "
            f"saved it whole as {relative} in the workspace and gave the model its beginning, its end and the path"
        )
    )
    return (
        f"[nanobot: my message was {len(text):,} characters ({lines:,} lines, ~{tokens:,} tokens), more than "
        f"half of the context window, so it was saved whole as the workspace file {relative} ({path}). "
        "Its beginning and end follow; read the rest in parts with read_file (offset/limit, in lines) "
        "or exec (e.g. head -c, sed -n, grep) before answering.]\n\n"
        f"--- beginning ---\n{excerpt}\n--- end ---"
    )
