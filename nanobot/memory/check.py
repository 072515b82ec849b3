"""`nanobot memory check` (and `nanobot doctor`): what is wrong with the memory files, and the fix.

`check_memory` returns structured findings; it changes nothing. The checks, in order:
1. MEMORY.md damaged: not UTF-8, empty or cut off while a good copy holds facts;
2. facts in the previous version (version 1) missing now;
3. duplicate facts;
4. HISTORY.md: shorter than or different from its journal (a gap or shrinkage), entries dated
   before the entry above them by more than a day, a torn last entry, undecodable bytes;
5. secrets: unmasked ones in MEMORY.md (a problem), masked ones (for information);
6. MEMORY.md's share of the context window, as the caller's `share_of` judges it (the context
   budget owns that rule: `nanobot.agent.budget.memory_share`).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from nanobot.memory.protocols import MemoryAdmin
from nanobot.memory.store import fact_lines, norm_fact
from nanobot.secrets_mask import REDACTED, mask_secrets

__all__ = ["Finding", "WindowShare", "check_memory"]

_LISTED = 5  # facts named in one finding
Severity = Literal["problem", "info"]


class WindowShare(Protocol):
    """MEMORY.md's share of a context window, judged by the context budget (agent.budget.MemoryShare)."""

    @property
    def window(self) -> int: ...
    @property
    def share(self) -> float: ...
    @property
    def too_large(self) -> bool: ...


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str  # stable, for scripts and `doctor`: "memory_damaged", "facts_missing", ...
    message: str
    fix: str = ""

    def to_json(self) -> dict:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "fix": self.fix,
        }


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:_LISTED])
    return shown + (f"; and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def check_memory(
    store: MemoryAdmin, *, share_of: Callable[[int], WindowShare] | None = None
) -> list[Finding]:
    """Findings about MEMORY.md and HISTORY.md, problems first within each check.

    `share_of(tokens)` judges MEMORY.md's share of the context window; without it that check is skipped."""
    out: list[Finding] = []
    state = store.state()
    text = state.text
    if state.damage == "not_utf8":
        out.append(
            Finding(
                "problem",
                "memory_damaged",
                f"MEMORY.md is not valid UTF-8 (first bad byte at offset {state.bad_offset}); it is "
                f"read with replacement characters, the raw bytes are kept in {store.damaged_dir}",
                f"{store.undo_hint()}, or `nanobot memory edit` to fix the marked characters",
            )
        )
    elif state.damage in ("empty", "cut_off"):
        what = "empty" if state.damage == "empty" else "cut off"
        out.append(
            Finding(
                "problem",
                "memory_damaged",
                f"MEMORY.md is {what}, but nanobot last saved {len(fact_lines(state.last_good or ''))} "
                "fact line(s) there",
                store.undo_hint(),
            )
        )
    versions = store.versions()
    if versions and state.damage is None:
        now = {norm_fact(x) for x in fact_lines(text)}
        missing = [x for x in fact_lines(store.read_version(1)) if norm_fact(x) not in now]
        if missing:
            out.append(
                Finding(
                    "problem",
                    "facts_missing",
                    f"{len(missing)} fact(s) of the previous version are missing now: {_listed(missing)}",
                    "if they should stay: `nanobot memory edit` (or `nanobot memory restore 1`)",
                )
            )
    seen: dict[str, str] = {}
    dupes = []
    for line in fact_lines(text):
        key = norm_fact(line)
        if key in seen and seen[key] not in dupes:
            dupes.append(seen[key])
        seen.setdefault(key, line)
    if dupes:
        out.append(
            Finding(
                "problem",
                "duplicate_facts",
                f"{len(dupes)} fact(s) appear more than once: {_listed(dupes)}",
                "`nanobot memory edit` and remove the copies",
            )
        )
    out.extend(_history_findings(store))
    if mask_secrets(text) != text:
        out.append(
            Finding(
                "problem",
                "secret_in_memory",
                "MEMORY.md holds text that looks like a secret (a key, "
                "token or password) and is sent to the model with every prompt",
                "`nanobot memory edit` and remove it (then rotate the secret)",
            )
        )
    masked = text.count(REDACTED) + _count_in_file(store.history_file, REDACTED.encode())
    if masked:
        out.append(
            Finding(
                "info",
                "masked_secrets",
                f"{masked} secret(s) were masked as {REDACTED} before they "
                "were saved (MEMORY.md and HISTORY.md)",
            )
        )
    if share_of is not None:
        from nanobot.tokens import count_text

        tokens = count_text(text)
        judged = share_of(tokens)
        sev: Severity = "problem" if judged.too_large else "info"
        out.append(
            Finding(
                sev,
                "memory_share",
                f"MEMORY.md is {tokens:,} tokens, {judged.share:.1%} of the "
                f"{judged.window:,}-token context window (it is in every prompt)",
                "`nanobot memory edit`: shorten or drop stale facts" if sev == "problem" else "",
            )
        )
    return sorted(out, key=lambda f: f.severity != "problem")


def _date(day: tuple) -> datetime:
    """The (year, month, day) digits of a stamp as a datetime."""
    year, month, date = (int(x) for x in day)
    return datetime(year, month, date)


def _count_in_file(path, needle: bytes) -> int:
    count, tail = 0, b""
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(4 << 20):
                data = tail + chunk
                count += data.count(needle)
                tail = data[
                    -(len(needle) - 1) :
                ]  # shorter than the needle: nothing in it is counted twice
    except FileNotFoundError:
        return 0
    return count


def _history_findings(store: MemoryAdmin) -> list[Finding]:
    path = store.history_file
    out: list[Finding] = []
    journal = store.history_journal
    size = path.stat().st_size if path.exists() else 0
    if journal.exists():
        jsize = journal.stat().st_size
        if size < jsize:
            out.append(
                Finding(
                    "problem",
                    "history_shrank",
                    f"HISTORY.md is {jsize - size:,} bytes shorter than nanobot left it",
                    "start nanobot (it restores the lost part from its journal)",
                )
            )
        elif size > jsize or not _same_prefix(path, journal, jsize):
            out.append(
                Finding(
                    "problem",
                    "history_changed",
                    "HISTORY.md was changed outside nanobot (it is "
                    "append-only): its text differs from nanobot's journal",
                    "start nanobot (it puts the journal's text back and keeps the altered file in "
                    f"{store.damaged_dir})",
                )
            )
    if not size:
        return out
    raw = _last_entry_raw(path, size)
    if raw:
        out.append(
            Finding(
                "problem",
                "consolidation_failed",
                f"the last consolidation failed and its messages "
                f"were archived raw in HISTORY.md, not summarised: {raw}",
                "check the model with `nanobot doctor`; nothing was lost (the raw entry is searchable "
                "with `nanobot history grep`), and the next consolidation summarises as usual",
            )
        )
    backwards, bad = _order_and_encoding(path)
    if backwards:
        out.append(
            Finding(
                "problem",
                "history_out_of_order",
                f"{backwards} HISTORY.md entr(ies) are dated more "
                "than a day before the entry above them (a gap, or text pasted in)",
                "`nanobot history grep` around those dates to look",
            )
        )
    if bad:
        out.append(
            Finding(
                "problem",
                "history_damaged",
                f"{bad} HISTORY.md entr(ies) hold bytes that are not UTF-8",
                "they are shown with replacement characters; nothing else to do",
            )
        )
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 1))
        if fh.read() != b"\n":
            out.append(
                Finding(
                    "problem",
                    "history_torn",
                    "HISTORY.md does not end with a newline (its last entry may be cut off)",
                    "start nanobot (it completes the file from its journal)",
                )
            )
    return out


def _last_entry_raw(path, size: int) -> str:
    """The heading of HISTORY.md's last entry when it is a RAW archive (a consolidation that failed), else ""."""
    from nanobot.memory import history as history_log

    with open(path, "rb") as fh:
        fh.seek(max(0, size - (1 << 20)))
        data = fh.read()
    last = next(iter(collections.deque(history_log.stamp_lines(data), maxlen=1)), None)
    if last is None:
        return ""
    start = last.start() + data[last.start() : last.end()].index(
        b"["
    )  # a match may begin at its newline
    heading = data[start:].split(b"\n", 1)[0].decode("utf-8", "replace")
    return heading if data[last.end() :].startswith(b" RAW archive of ") else ""


def _order_and_encoding(path) -> tuple[int, int]:
    """(entries dated more than a day before the one above, entries holding undecodable bytes)."""

    from nanobot.memory import history as history_log

    data = path.read_bytes()
    backwards, previous = 0, None
    for m in history_log.stamp_lines(data):
        day = m.group(1, 2, 3)
        if previous is not None and day < previous:
            try:
                gap = _date(previous) - _date(day)
            except ValueError:
                gap = timedelta(0)
            if gap > timedelta(days=1):
                backwards += 1
        previous = day
    bad = 0
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        bad = sum(1 for e in history_log.iter_entries(path) if "\ufffd" in e.text)
    return backwards, bad


def _same_prefix(path, journal, length: int) -> bool:
    with open(path, "rb") as a, open(journal, "rb") as b:
        left = length
        while left > 0:
            step = min(4 << 20, left)
            if a.read(step) != b.read(step):
                return False
            left -= step
    return True
