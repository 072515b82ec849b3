"""Reading and searching HISTORY.md without loading it whole.

An entry starts at a line beginning with a `[YYYY-MM-DD HH:MM]` stamp (seconds and a `T`
separator are accepted too) and runs to the next such line; text before the first stamp is one
undated entry. This is the format HKUDS/nanobot writes (entries separated by blank lines).

`search()` is the one way to search what is archived; what is asked picks the engine (see there).

The file is read in blocks that end on entry boundaries. `grep` runs the pattern over a whole
block first (one C-level scan) and only looks at individual entries in blocks that match, so
a search costs little more than reading the file.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, overload

from nanobot.memory.history_format import (
    CHUNK_MARKER,
    CHUNK_MARKER_RE,
    STAMP_PATTERN,
    STAMP_RE,
    without_chunk_markers,
)
from nanobot.messages import Message, parse_timestamp, text_of
from nanobot.paths import memory_dir

if TYPE_CHECKING:
    import mmap

    from nanobot.memory.recall_index import Hit, RecallIndex

__all__ = [
    "search",
    "Ranked",
    "Exact",
    "AllWords",
    "RankedHits",
    "ExactHits",
    "Refresh",
    "refreshed_within",
    "Entry",
    "iter_entries",
    "iter_grep",
    "grep",
    "tail",
    "grep_conversation",
    "compile_pattern",
    "parse_when",
    "search_newest",
    "grep_fast",
    "grep_fast_output",
    "grep_fast_pieces",
    "stamp_lines",
    "STAMP_RE",
    "history_receipts",
    "CHUNK_MARKER",
    "CHUNK_MARKER_RE",
    "without_chunk_markers",
]

BLOCK_SIZE = 4 * 1024 * 1024
_STAMP = STAMP_PATTERN
_BARE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}$")
_STAMP_LINE = re.compile(r"^" + _STAMP, re.MULTILINE)
_STAMP_AT_B = re.compile(_STAMP.encode())
_STAMP_LINE_B = re.compile(rb"(?:^|(?<=\n))" + _STAMP.encode())


@dataclass(frozen=True)
class Entry:
    stamp: datetime | None  # naive local time as written; None for the undated preamble
    text: str  # the whole entry, stamp included, without the trailing blank lines
    line_no: int  # 1-based line of the entry's first line (a message of a conversation: its number)
    ref: str | None = (
        None  # a message of a conversation /new archived: `<name>#<n>` (read_history's)
    )

    def to_json(self) -> dict:
        shown: dict = {
            "stamp": self.stamp.isoformat() if self.stamp else None,
            "line": self.line_no if self.ref is None else None,
            "text": self.text,
        }
        if self.ref is not None:  # a message: where read_history finds it, not a HISTORY.md line
            shown["ref"] = self.ref
        return shown


def compile_pattern(pattern: str, *, ignore_case: bool = False) -> re.Pattern[str]:
    """The user's regex with grep's line semantics (^ and $ match at every line); raises re.error."""
    return re.compile(pattern, re.MULTILINE | (re.IGNORECASE if ignore_case else 0))


def parse_when(text: str, *, end_of_day: bool = False) -> datetime:
    """'YYYY-MM-DD' or 'YYYY-MM-DD HH:MM' as a naive datetime; a bare date with
    `end_of_day` means the last minute of that day (so --until is inclusive). Raises ValueError."""
    text = text.strip()
    when = parse_timestamp(text)  # a time with an offset is compared in local time, like the stamps
    if when is None:
        raise ValueError(f"not a date: {text!r} (use YYYY-MM-DD or 'YYYY-MM-DD HH:MM')")
    bare_date = _BARE_DATE.match(text) is not None
    return (
        when + timedelta(days=1) - timedelta(microseconds=1) if end_of_day and bare_date else when
    )


def _stamp_of(m: re.Match[str]) -> datetime | None:
    y, mo, d, h, mi, s = m.groups()
    try:
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0))
    except ValueError:
        return None  # a stamp-shaped line with an impossible date still starts an entry


def _last_boundary(data: bytes, lo: int) -> int:
    """Offset of the last entry start in data[lo:] that is not at offset 0, or -1."""
    i = data.rfind(b"\n[")
    while i >= lo - 1 and i >= 0:
        if _STAMP_AT_B.match(data, i + 1):
            return i + 1
        i = data.rfind(b"\n[", 0, i)
    return -1


def _blocks(path: Path, block_size: int | None = None) -> Iterator[tuple[str, int]]:
    """(text, line number of its first line): decoded blocks that each hold whole entries."""
    block_size = block_size or BLOCK_SIZE
    with open(path, "rb") as fh:
        carry = b""
        line_no = 1
        while True:
            chunk = fh.read(block_size)
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            cut = _last_boundary(data, len(carry))
            if cut <= 0:
                carry = data  # one entry larger than a block: keep reading
                continue
            head, carry = data[:cut], data[cut:]
            yield head.decode("utf-8", "replace"), line_no
            line_no += head.count(b"\n")
        if carry:
            yield carry.decode("utf-8", "replace"), line_no


class _Block:
    """Entry offsets in one block, computed only when the block is looked at entry by entry."""

    def __init__(self, text: str, first_line: int) -> None:
        self.text = text
        self.first_line = first_line
        self.matches = list(_STAMP_LINE.finditer(text))
        self.starts = [m.start() for m in self.matches]
        self._line_pos, self._line_no = 0, first_line
        if not self.starts or self.starts[0] != 0:
            # Only the file's first block can begin without a stamp: the undated preamble.
            self.starts.insert(0, 0)
            self.matches.insert(0, None)  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.starts)

    def index_of(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def span(self, i: int) -> tuple[int, int]:
        end = self.starts[i + 1] if i + 1 < len(self.starts) else len(self.text)
        return self.starts[i], end

    def entry(self, i: int) -> Entry | None:
        start, end = self.span(i)
        text = self.text[start:end].rstrip()
        if not text.strip():
            return None
        # Entries are visited in order, so line numbers are counted incrementally.
        self._line_no += self.text.count("\n", self._line_pos, start)
        self._line_pos = start
        m = self.matches[i]
        return Entry(_stamp_of(m) if m else None, text, self._line_no)


def iter_entries(path: Path) -> Iterator[Entry]:
    """Every entry of a HISTORY.md, in file order, streamed block by block."""
    for text, first_line in _blocks(Path(path)):
        block = _Block(text, first_line)
        for i in range(len(block)):
            entry = block.entry(i)
            if entry is not None:
                yield entry


def _in_range(entry: Entry, since: datetime | None, until: datetime | None) -> bool:
    if since is None and until is None:
        return True
    if entry.stamp is None:
        return False
    return (since is None or entry.stamp >= since) and (until is None or entry.stamp <= until)


_REGEX_SPECIAL = set(".^$*+?{}[]\\|()")


def _candidates(rx: re.Pattern[str]):
    """A function (text) -> (text, find(pos) -> offset | -1) giving the next possible match.

    Plain literals use str.find (faster than the regex engine; with -i on case-folded text,
    when folding keeps offsets aligned). Every candidate is confirmed with the regex itself.
    """
    literal = rx.pattern if rx.pattern and not (_REGEX_SPECIAL & set(rx.pattern)) else None
    fold = bool(rx.flags & re.IGNORECASE)

    def prepare(text: str):
        if literal is not None:
            if not fold:
                return lambda pos: text.find(literal, pos)
            folded = text.casefold()
            needle = literal.casefold()
            if len(folded) == len(text):
                return lambda pos: folded.find(needle, pos)

        def find(pos: int) -> int:
            m = rx.search(text, pos)
            return m.start() if m else -1

        return find

    return prepare


def _entry_start(text: str, pos: int) -> int:
    """Start of the entry holding offset `pos`: the nearest stamp line at or before it."""
    start = text.rfind("\n", 0, pos) + 1
    while start > 0 and not STAMP_RE.match(text, start):
        start = text.rfind("\n[", 0, start - 1) + 1
    return start


def iter_grep(
    path: Path,
    pattern: str | re.Pattern[str],
    *,
    ignore_case: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Iterator[Entry]:
    """Entries (whole) in which `pattern` matches, in file order."""
    rx = (
        pattern
        if isinstance(pattern, re.Pattern)
        else compile_pattern(pattern, ignore_case=ignore_case)
    )
    prepare = _candidates(rx)
    for text, first_line in _blocks(Path(path)):
        find = prepare(text)
        pos = find(0)
        line_pos, line_no = 0, first_line
        while pos >= 0:
            start = _entry_start(text, pos)
            nxt = _STAMP_LINE.search(text, start + 1)
            end = nxt.start() if nxt else len(text)
            # Strip only line ends, so `$` sees the entry as the block search saw it.
            body = text[start:end].rstrip("\r\n")
            # A block-level match may straddle two entries; an entry counts only if its own text matches.
            if body.strip() and rx.search(body) is not None:
                line_no += text.count("\n", line_pos, start)
                line_pos = start
                stamp = _STAMP_LINE.match(body)
                entry = Entry(_stamp_of(stamp) if stamp else None, body.rstrip(), line_no)
                if _in_range(entry, since, until):
                    yield entry
            pos = find(end) if end < len(text) else -1


def grep(
    path: Path,
    pattern: str | re.Pattern[str],
    *,
    ignore_case: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    last: int | None = None,
) -> list[Entry]:
    """Matching entries; `last=N` keeps only the last N."""
    found = iter_grep(path, pattern, ignore_case=ignore_case, since=since, until=until)
    if last is not None:
        return list(deque(found, maxlen=max(0, last)))
    return list(found)


def grep_conversation(
    name: str,
    messages: Iterable[Message],
    rx: re.Pattern[str],
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[Entry]:
    """The messages of the archived conversation `name` that match, each as an entry
    `[stamp] <name>#<n> <role>: <text>` (secrets masked), for `history grep`."""
    from nanobot.secrets_mask import mask_secrets

    found = []
    for n, msg in enumerate(messages):
        role = msg.get("role")
        if role == "system" or not isinstance(role, str):
            continue
        when = parse_timestamp(msg.get("timestamp"))
        text = mask_secrets(text_of(msg.get("content")))
        stamp = f"[{when:%Y-%m-%d %H:%M}] " if when is not None else ""
        entry = Entry(when, f"{stamp}{name}#{n} {role}: {text}", n, ref=f"{name}#{n}")
        if rx.search(text) and _in_range(entry, since, until):
            found.append(entry)
    return found


def tail(path: Path, n: int = 5) -> list[Entry]:
    """The last `n` entries, reading the file from its end."""
    path = Path(path)
    if n <= 0:
        return []
    size = path.stat().st_size
    with open(path, "rb") as fh:
        pos, data, cut = size, b"", 0
        while pos > 0:
            step = min(BLOCK_SIZE, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
            # A stamp at offset 0 of a partial read may not begin a line, so it doesn't count.
            starts = [m.start() for m in _STAMP_LINE_B.finditer(data) if m.start() > 0]
            if len(starts) >= n:
                cut = starts[-n]
                break
        data, pos = data[cut:], pos + cut
        line_no = 1 + _count_newlines(fh, pos)
    text = data.decode("utf-8", "replace")
    block = _Block(text, line_no)
    entries = [e for e in (block.entry(i) for i in range(len(block))) if e is not None]
    return entries[-n:]


def _count_newlines(fh, end: int) -> int:
    fh.seek(0)
    count, left = 0, end
    while left > 0:
        chunk = fh.read(min(BLOCK_SIZE, left))
        if not chunk:
            break
        count += chunk.count(b"\n")
        left -= len(chunk)
    return count


# ---- newest-first word search (the model's recall tool) ---------------------------------------


def _entry_start_b(data: bytes | mmap.mmap, pos: int) -> int:
    """Start of the entry holding byte `pos`: the nearest stamp line at or before it (0 if none)."""
    i = data.rfind(b"\n[", 0, pos + 1)
    while i >= 0:
        if _STAMP_AT_B.match(data, i + 1):
            return i + 1
        i = data.rfind(b"\n[", 0, i)
    return 0


def _entry_end_b(data: bytes | mmap.mmap, pos: int) -> int:
    i = data.find(b"\n[", pos)
    while i >= 0:
        if _STAMP_AT_B.match(data, i + 1):
            return i + 1
        i = data.find(b"\n[", i + 1)
    return len(data)


def stamp_lines(data: bytes) -> Iterator[re.Match[bytes]]:
    """The stamp of every entry in `data` (a whole file), in order; groups: year, month, day, ..."""
    m = _STAMP_AT_B.match(data)
    if m:
        yield m
    for m in _STAMP_NL_B.finditer(data):
        yield m


def _blocks_backward(path: Path, block_size: int) -> Iterator[tuple[bytes, int]]:
    """(block of whole entries, its offset in the file), the newest block first."""
    with open(path, "rb") as fh:
        pos = fh.seek(0, 2)
        carry = b""
        while pos > 0:
            step = min(block_size, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + carry
            if pos == 0:
                yield data, 0
                return
            cut = _entry_end_b(data, 0)  # the first entry start after offset 0
            if cut >= len(data):
                carry = data  # one entry larger than a block: keep reading back
                continue
            carry = data[:cut]
            yield data[cut:], pos + cut
        if carry:
            yield carry, 0


def _search_cased(
    path: Path,
    terms: list[str],
    wanted: list[str],
    limit: int,
    since,
    until,
    block_size: int | None,
) -> list[Entry]:
    """search_newest when every term has non-ASCII cased letters (Cyrillic, Greek...): the longest term
    is looked for as written, lower case, upper case and capitalised (mixed case inside a word is missed);
    the other terms are confirmed with full case folding."""
    longest = max(terms, key=len)
    variants = {
        v.encode() for v in (longest, longest.lower(), longest.upper(), longest.capitalize())
    }
    found: list[Entry] = []
    for block, _ in _blocks_backward(path, block_size or BLOCK_SIZE):
        end = len(block)
        while end > 0:
            hit = max(block.rfind(v, 0, end) for v in variants)
            if hit < 0:
                break
            start = _entry_start_b(block, hit)
            stop = _entry_end_b(block, hit + 1)
            end = start
            text = block[start:stop].decode("utf-8", "replace").rstrip()
            if not all(t in text.casefold() for t in wanted):
                continue
            m = _STAMP_LINE.match(text)
            entry = Entry(_stamp_of(m) if m else None, text, 0)
            if _in_range(entry, since, until):
                found.append(entry)
                if len(found) >= limit:
                    return found
    return found


def _caseless(c: str) -> bool:
    return c.isascii() or c.lower() == c.upper()


def _caseless_runs(text: str) -> list[str]:
    runs, cur = [], ""
    for c in text:
        if _caseless(c):
            cur += c
        else:
            if cur:
                runs.append(cur)
            cur = ""
    return runs + ([cur] if cur else [])


def search_newest(
    path: Path,
    terms: list[str],
    *,
    limit: int = 5,
    since: datetime | None = None,
    until: datetime | None = None,
    block_size: int | None = None,
) -> list[Entry]:
    """Up to `limit` whole entries containing every term (ignoring case), newest first.

    The file is read from its end, so a common word costs a few blocks and a rare one a single
    pass at memory speed: the search runs on bytes (ASCII case folded); terms with other letters
    are confirmed on the decoded entry with full case folding. Entry.line_no is 0 (not counted).
    """
    terms = [t for t in terms if t.strip()]
    wanted = [t.casefold() for t in terms]
    if not wanted or limit <= 0:
        return []
    # bytes.lower() folds ASCII only, so a term can be looked for in the lowered bytes as it is when its
    # other letters have no case (CJK, digits, punctuation); otherwise its longest such run anchors it
    exact = [t.lower().encode() for t in terms if all(_caseless(c) for c in t.lower())]
    runs = [r for t in terms for r in _caseless_runs(t.lower())]
    anchor = max((r.encode() for r in runs), key=len, default=None)
    if anchor is None:  # every term has cased letters outside ASCII (Cyrillic, Greek...)
        return _search_cased(Path(path), terms, wanted, limit, since, until, block_size)
    found: list[Entry] = []
    scanned = 0
    for block, offset in _blocks_backward(Path(path), block_size or BLOCK_SIZE):
        low = block.lower()
        end = len(low)
        while end > 0:
            hit = low.rfind(anchor, 0, end)
            if hit < 0:
                break
            start = _entry_start_b(block, hit)
            stop = _entry_end_b(block, hit + 1)
            end = start
            entry = _confirmed(block, low[start:stop], start, stop, exact, wanted, since, until)
            if entry is not None:
                found.append(entry)
                if len(found) >= limit:
                    return found
        scanned += len(block)
        if offset > 0 and scanned >= _TAIL_BYTES:
            older = _search_older_with_rg(
                Path(path), offset, anchor, exact, wanted, limit - len(found), since, until
            )
            if older is not None:
                return found + older
    return found


_TAIL_BYTES = (
    8 * 1024 * 1024
)  # read from the end in Python; what is older, ripgrep scans (when installed)


def _confirmed(
    data,
    low: bytes,
    start: int,
    stop: int,
    exact: list[bytes],
    wanted: list[str],
    since: datetime | None,
    until: datetime | None,
) -> Entry | None:
    """The entry data[start:stop] if it holds every term and is in the date range (`low`: its lowered bytes)."""
    if not all(t in low for t in exact):
        return None
    text = data[start:stop].decode("utf-8", "replace").rstrip()
    if not text.strip():
        return None
    folded = text.casefold()
    if not all(t in folded for t in wanted):
        return None
    m = _STAMP_LINE.match(text)
    entry = Entry(_stamp_of(m) if m else None, text, 0)
    return entry if _in_range(entry, since, until) else None


def _search_older_with_rg(
    path: Path,
    before: int,
    anchor: bytes,
    exact: list[bytes],
    wanted: list[str],
    limit: int,
    since: datetime | None,
    until: datetime | None,
) -> list[Entry] | None:
    """search_newest's matches in path[:before], found by ripgrep; None without rg."""
    import mmap

    offsets = _rg_run(path, ["--fixed-strings", "--ignore-case", "--regexp", anchor.decode()])
    if offsets is None:
        return None
    found: list[Entry] = []
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        limit_at = before
        for pos in reversed(offsets):
            if pos >= limit_at:
                continue
            start, stop = _entry_start_b(mm, pos), _entry_end_b(mm, pos + 1)
            limit_at = start
            entry = _confirmed(mm, mm[start:stop].lower(), start, stop, exact, wanted, since, until)
            if entry is not None:
                found.append(entry)
                if len(found) >= limit:
                    break
    return found


# ---- ripgrep fast path for `nanobot history grep` ------------------------------------------------
#
# ripgrep finds where every matching line starts, at disk speed; Python then cuts the whole entries
# around those offsets from a memory map. The output is byte-for-byte what `iter_grep` gives, so
# the fast path is used only for patterns that mean the same to both engines and cannot match
# across a line break (ripgrep is line-oriented, an entry may span lines): see `_line_bound`.


def _rg_binary() -> str | None:
    """The `rg` of the ripgrep wheel (next to this Python), else one on PATH."""
    import os
    import shutil
    import sys

    local = Path(sys.executable).parent / "rg"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("rg")


def _line_bound(pattern: str) -> bool:
    """True when `pattern` means the same to ripgrep as to Python's re and can only match within a line.

    Allowed: literal text, escaped punctuation, \\d \\w \\S \\b \\B, . (never a newline here), quantifiers,
    groups `( )` / `(?: )`, alternation, ^ $, and classes `[...]` that are not negated and hold only
    literals, ranges, escaped punctuation, \\d and \\w. Anything else (\\s, \\n, negated classes, flags,
    look-arounds, back-references, set operators) goes to the Python engine.
    """
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or (pattern[i + 1].isalnum() and pattern[i + 1] not in "dwSbB"):
                return False
            i += 2
            continue
        if c == "(" and pattern.startswith("?", i + 1) and not pattern.startswith("?:", i + 1):
            return False
        if c == "{" and pattern.startswith(",", i + 1):
            return False
        if c == "[":
            j = i + 1
            if j < n and pattern[j] in "^]":
                return False
            while j < n and pattern[j] != "]":
                ch = pattern[j]
                if ch == "[" or (ch in "&~-" and pattern.startswith(ch * 2, j)):
                    return False
                if ch == "\\":
                    if j + 1 >= n or (pattern[j + 1].isalnum() and pattern[j + 1] not in "dw"):
                        return False
                    j += 2
                    continue
                j += 1
            if j >= n:
                return False
            i = j + 1
            continue
        i += 1
    return True


def _rg_usable(pattern: str, ignore_case: bool) -> bool:
    """Whether ripgrep may answer for this pattern (see _line_bound); an empty match means "every
    entry", which the exact engine handles."""
    if _rg_binary() is None or not _line_bound(pattern):
        return False
    try:
        rx = compile_pattern(pattern, ignore_case=ignore_case)
    except re.error:
        return False
    probe = rx.search("a b")
    return rx.search("") is None and not (probe is not None and probe.start() == probe.end())


def _rg_argv(path: Path, args: list[str]) -> list[str]:
    # One line of output per matching line: the offset of the line's start, then (--max-columns 1)
    # a short "omitted" note instead of the line. All that is used is the entry the line is in.
    return [
        str(_rg_binary()),
        "--no-config",
        "--text",
        "--byte-offset",
        "--max-columns",
        "1",
        "--no-filename",
        "--color",
        "never",
        "--no-heading",
        *args,
        "--",
        str(path),
    ]


_RG_LINE = re.compile(rb"(\d+):[^\n]*\n")


def _rg_parse(returncode: int, stdout: bytes) -> list[int] | None:
    if returncode == 1:
        return []
    if returncode != 0:
        return None  # e.g. a pattern its syntax rejects: then the Python engine decides
    return list(map(int, _RG_LINE.findall(stdout)))


def _rg_run(path: Path, args: list[str]) -> list[int] | None:
    """Where each line ripgrep matches with `args` starts, in file order; None without rg or when it fails."""
    import subprocess

    if _rg_binary() is None:
        return None
    try:
        proc = subprocess.run(
            [*_rg_argv(path, ["--no-line-number", *args])],
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        return None
    return _rg_parse(proc.returncode, proc.stdout)


def _rg_probe(path: Path, args: list[str], lines: int) -> tuple[list[int], bool] | None:
    """Where the first `lines` matching lines start, and whether that was all of them; with `lines`
    or more it says "maybe more" without parsing them: the full run that follows finds the same ones."""
    import subprocess

    try:
        proc = subprocess.run(
            _rg_argv(path, ["--no-line-number", "--max-count", str(lines), *args]),
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
    except OSError:
        return None
    if proc.returncode not in (0, 1):
        return None
    if proc.stdout.count(b"\n") >= lines:
        return [], False
    offsets = _rg_parse(proc.returncode, proc.stdout)
    return (offsets, True) if offsets is not None else None


def _stamp_of_b(data, pos: int) -> datetime | None:
    m = _STAMP_AT_B.match(data, pos)
    if m is None:
        return None
    y, mo, d, h, mi, s = m.groups()
    try:
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0))
    except ValueError:
        return None


def _exact_text(raw: bytes) -> bytes:
    """What Entry.text would be, encoded: trailing whitespace stripped (Unicode's, as str.rstrip does)."""
    text = raw.rstrip()
    if text and (text[-1] >= 0x80 or 0x1C <= text[-1] <= 0x1F):
        return raw.decode("utf-8", "replace").rstrip().encode("utf-8")
    return text


class _Hits(NamedTuple):
    """Matching entries: entry k runs from marks[k - 1] + 1 to marks[k] + 1 in `data` (the file's
    bytes or map), and `hits` holds the k of each matching entry, in file order."""

    data: bytes | mmap.mmap
    marks: list[int]
    hits: list[int]

    def spans(self) -> list[tuple[int, int]]:
        marks = self.marks
        return [(marks[k - 1] + 1, marks[k] + 1) for k in self.hits]


def _matching_entries(
    path: Path,
    pattern: str,
    ignore_case: bool,
    since: datetime | None,
    until: datetime | None,
    last: int | None,
) -> _Hits | None:
    """The entries that match, through ripgrep, or None (see grep_fast).

    A first ripgrep run stops after _FEW_MATCHES matching lines. When fewer matched, each entry's
    edges are found around its match in a memory map. When there are more, the full run goes on in
    a second process while Python reads the file and indexes every entry start, on the other core.
    """
    import subprocess

    path = Path(path)
    if not _rg_usable(pattern, ignore_case):
        return None
    args = [*(["--ignore-case"] if ignore_case else []), "--regexp", pattern]
    probe = _rg_probe(path, args, _FEW_MATCHES)
    if probe is None:
        return None
    offsets, complete = probe
    if complete and not offsets:
        return _Hits(b"", [], [])
    import mmap

    with open(path, "rb") as fh:
        data = mmap.mmap(
            fh.fileno(), 0, access=mmap.ACCESS_READ
        )  # slices copy only the entries printed
        if complete:
            marks, hits = _hits_by_search(data, offsets)
        else:
            import tempfile

            # into a file, not a pipe: a full pipe would stall ripgrep until Python is done indexing
            with tempfile.TemporaryFile() as sink:
                proc = subprocess.Popen(
                    _rg_argv(path, ["--no-line-number", *args]),
                    stdout=sink,
                    stderr=subprocess.DEVNULL,
                    stdin=subprocess.DEVNULL,
                )
                marks = _entry_marks(data)
                proc.wait()
                sink.seek(0)
                found = _rg_parse(proc.returncode, sink.read())
            if found is None:
                return None
            hits = _hits_by_table(marks, found)
    if since is not None or until is not None:
        hits = [
            k
            for k in hits
            if _in_range(Entry(_stamp_of_b(data, marks[k - 1] + 1), "", 0), since, until)
        ]
    if last is not None:
        hits = hits[-last:] if last > 0 else []
    return _Hits(data, marks, hits)


_FEW_MATCHES = 50_000  # matching lines; up to this, find each entry's edges around its match
_STAMP_NL_B = re.compile(rb"\n" + _STAMP.encode())


def _hits_by_search(data, offsets: list[int]) -> tuple[list[int], list[int]]:
    """Marks and hits (see _Hits) for the entries around `offsets`, each found by looking around its
    match: the marks are only the edges of the matching entries."""
    marks: list[int] = []
    hits: list[int] = []
    i, n = 0, len(offsets)
    while i < n:
        pos = offsets[i]
        start, end = _entry_start_b(data, pos), _entry_end_b(data, pos + 1)
        if not marks or marks[-1] != start - 1:  # not right after the previous one
            marks.append(start - 1)
        marks.append(end - 1)
        hits.append(len(marks) - 1)
        i = bisect_left(offsets, end, i + 1)
    return marks, hits


def _entry_marks(data) -> list[int]:
    """One less than every entry start (the newline before its stamp), with -1 first (the file's
    start) and the file's length - 1 last. The newline's own offset, not the start, because
    map(Match.start) over the matches costs half of a loop that adds one to each."""
    marks = list(map(re.Match.start, _STAMP_NL_B.finditer(data)))
    marks.insert(0, -1)
    marks.append(len(data) - 1)
    return marks


def _hits_by_table(marks: list[int], offsets: list[int]) -> list[int]:
    """The entry of each offset (each entry once): the first k with marks[k] at or after it."""
    hits: list[int] = []
    end, k = -1, 0
    append = hits.append
    for pos in offsets:  # in file order: each entry is looked up once, at its first match
        if pos < end:
            continue
        if marks[k + 1] >= pos:  # the next entry (matches are dense when there are many)
            k += 1
        else:
            k = bisect_left(marks, pos, k)
        end = marks[k] + 1
        append(k)
    return hits


def grep_fast_pieces(
    path: Path,
    pattern: str,
    *,
    ignore_case: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    last: int | None = None,
) -> Iterator[tuple[bytes, int]] | None:
    """What `nanobot history grep` prints when piped (each entry's text and a blank line), in pieces of
    (bytes, how many entries), through ripgrep; None when the fast path cannot answer (no rg, or a
    pattern it can't take)."""
    found = _matching_entries(path, pattern, ignore_case, since, until, last)
    if found is None:
        return None
    return _pieces(*found)


def grep_fast_output(
    path: Path,
    pattern: str,
    *,
    ignore_case: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    last: int | None = None,
) -> tuple[bytes, int] | None:
    """grep_fast_pieces joined: the bytes printed and how many entries; None when it can't answer."""
    pieces = grep_fast_pieces(
        path, pattern, ignore_case=ignore_case, since=since, until=until, last=last
    )
    if pieces is None:
        return None
    chunks, count = [], 0
    for chunk, n in pieces:
        chunks.append(chunk)
        count += n
    return b"".join(chunks), count


# An entry whose bytes end in one of these (a character that str.rstrip keeps, then one blank line)
# is printed exactly as it stands in the file, so a run of such entries is one slice of the file.
_CLEAN_ENDS = frozenset(bytes([c]) + b"\n\n" for c in range(128) if not chr(c).isspace())
_PIECE = 1 << 20  # bytes per piece of output


def _pieces(data, marks: list[int], hits: list[int]) -> Iterator[tuple[bytes, int]]:
    """The output for the matching entries (see _Hits) in pieces of about _PIECE bytes, each with
    how many entries it holds. Adjacent entries are cut from the file as one slice while each but
    the last ends cleanly (_CLEAN_ENDS); the last is cut to its text. A piece is joined straight
    from the file's map."""
    view = memoryview(data)
    parts: list = []
    size = count = n = 0
    first = last = end = prev = -2
    for k in hits:
        if k == prev + 1 and data[end - 3 : end] in _CLEAN_ENDS:
            last, end, prev = end, marks[k] + 1, k
            n += 1
            continue
        if n:
            count += _add_run(data, view, first, last, end, n, parts)
            size += end - first
            if size >= _PIECE:
                yield _joined(parts), count
                parts, size, count = [], 0, 0
        first = last = marks[k - 1] + 1
        end, prev = marks[k] + 1, k
        n = 1
    if n:
        count += _add_run(data, view, first, last, end, n, parts)
    if parts:
        yield _joined(parts), count


def _add_run(data, view: memoryview, first: int, last: int, end: int, n: int, parts: list) -> int:
    """Add the output for the n entries in data[first:end] (the last starts at `last`) to `parts`;
    returns how many are printed."""
    if (
        data[end - 3 : end] in _CLEAN_ENDS
    ):  # (only a blank preamble is shorter: its slice comes out short)
        parts.append(view[first:end])
        return n
    parts.append(view[first:last])
    text = _exact_text(data[last:end])
    if not text:  # only the undated preamble can be blank, and then it is not printed
        return n - 1
    parts.append(text + b"\n\n")
    return n


def _joined(parts: list) -> bytes:
    chunk = b"".join(parts)
    if not chunk.isascii():  # bytes that are not UTF-8 are printed as U+FFFD, as str would
        chunk = chunk.decode("utf-8", "replace").encode("utf-8")
    return chunk


def grep_fast(
    path: Path,
    pattern: str,
    *,
    ignore_case: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    last: int | None = None,
) -> list[Entry] | None:
    """The entries `grep` would return (line numbers included), through ripgrep; None when it can't."""
    found = _matching_entries(path, pattern, ignore_case, since, until, last)
    if found is None:
        return None
    data = found.data
    out: list[Entry] = []
    line, at = 1, 0
    for start, end in found.spans():
        text = _exact_text(data[start:end]).decode("utf-8", "replace")
        if not text:
            continue
        line += data[at:start].count(b"\n")
        at = start
        out.append(Entry(_stamp_of_b(data, start), text, line))
    return out


def history_receipts(workspace: Path):
    """A callable giving the stamps ("YYYY-MM-DD HH:MM") of the workspace's HISTORY.md entries: the
    proof of how far a session was archived (SessionStore reads it only for a damaged pointer)."""
    path = memory_dir(workspace) / "HISTORY.md"

    def stamps() -> set[str]:
        if not path.exists():
            return set()
        return {
            e.stamp.strftime("%Y-%m-%d %H:%M") for e in iter_entries(path) if e.stamp is not None
        }

    return stamps


# -- one search; what is asked picks the engine ------------------------------------------------------

Refresh = Callable[
    ["RecallIndex"], bool
]  # brings the recall index up to date (or part way); True: all of it


def refreshed_within(seconds: float | None) -> Refresh:
    """A Refresh that indexes for at most `seconds` (None: until everything is indexed)."""
    return lambda index: index.refresh(budget_seconds=seconds).complete


@dataclass(frozen=True)
class Ranked:
    """Words, the best hits first (BM25), over every session's messages and HISTORY.md: the recall
    index (nanobot.memory.recall_index), brought up to date first by `refresh` (all of it when None)."""

    query: str
    limit: int = 5
    since: datetime | None = None
    until: datetime | None = None
    session: str | None = None  # only this session (its key), or memory/HISTORY.md
    role: str | None = None
    exclude_live: str | None = (
        None  # this session's unconsolidated messages are in the prompt already
    )
    only_sessions: frozenset[str] | None = None  # hits from these sessions (and HISTORY.md) only
    refresh: Refresh | None = None


@dataclass(frozen=True)
class Exact:
    """A regular expression (grep's line semantics) over HISTORY.md's whole entries, in file order:
    ripgrep when it is installed and reads the pattern the same way, else a scan in Python."""

    pattern: str
    ignore_case: bool = False
    since: datetime | None = None
    until: datetime | None = None
    last: int | None = None  # only the last N matching entries


@dataclass(frozen=True)
class AllWords:
    """HISTORY.md's entries holding every term (ignoring case), newest first, read from the file's
    end (`search_newest`); no index needed."""

    terms: tuple[str, ...]
    limit: int = 5
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class RankedHits:
    hits: list[Hit]
    complete: bool  # the index held everything archived when it was asked


class ExactHits:
    """What an Exact search finds, read one of two ways; each picks its engine."""

    def __init__(self, path: Path | None, request: Exact) -> None:
        self.path, self.request = path, request

    def printed(self) -> Iterator[tuple[bytes, int]] | None:
        """What `history grep` prints (each entry's text and a blank line) in pieces of (bytes, how
        many entries), straight from the file through ripgrep; None when ripgrep cannot answer."""
        r = self.request
        if self.path is None:
            return iter(())
        return grep_fast_pieces(
            self.path,
            r.pattern,
            ignore_case=r.ignore_case,
            since=r.since,
            until=r.until,
            last=r.last,
        )

    def entries(self) -> Iterator[Entry]:
        """The matching entries with their line numbers; raises re.error for a bad pattern."""
        r = self.request
        if self.path is None:
            return iter(())
        rx = compile_pattern(r.pattern, ignore_case=r.ignore_case)
        found = grep_fast(
            self.path,
            r.pattern,
            ignore_case=r.ignore_case,
            since=r.since,
            until=r.until,
            last=r.last,
        )
        if found is not None:
            return iter(found)
        if r.last is not None:
            return iter(grep(self.path, rx, since=r.since, until=r.until, last=r.last))
        return iter_grep(self.path, rx, since=r.since, until=r.until)


@overload
def search(
    request: Ranked,
    *,
    history: Path | None,
    sessions: Path | None = None,
    index: Path | None = None,
) -> RankedHits: ...


@overload
def search(
    request: Exact, *, history: Path | None, sessions: Path | None = None, index: Path | None = None
) -> ExactHits: ...


@overload
def search(
    request: AllWords,
    *,
    history: Path | None,
    sessions: Path | None = None,
    index: Path | None = None,
) -> list[Entry]: ...


def search(
    request: Ranked | Exact | AllWords,
    *,
    history: Path | None,
    sessions: Path | None = None,
    index: Path | None = None,
) -> RankedHits | ExactHits | list[Entry]:
    """Search what is archived. `history` is the workspace's HISTORY.md (None, or a missing file:
    nothing archived there yet); a ranked search also reads the session files in `sessions` (default:
    this home's) through the index at `index` (default: this home's). The request's kind picks the
    engine: Ranked the recall index, Exact ripgrep or the Python scan, AllWords the scan from the end."""
    if isinstance(request, Ranked):
        return _ranked(request, history, sessions, index)
    path = history if history is not None and history.is_file() else None
    if isinstance(request, Exact):
        return ExactHits(path, request)
    if path is None:
        return []
    return search_newest(
        path, list(request.terms), limit=request.limit, since=request.since, until=request.until
    )


def _ranked(
    request: Ranked, history: Path | None, sessions: Path | None, index_path: Path | None
) -> RankedHits:
    from nanobot.memory.recall_index import RecallIndex, default_index_path
    from nanobot.paths import sessions_dir

    index = RecallIndex(
        index_path or default_index_path(), sessions=sessions or sessions_dir(), history=history
    )
    try:
        complete = (request.refresh or refreshed_within(None))(index)
        only = set(request.only_sessions) if request.only_sessions is not None else None
        hits = index.search(
            request.query,
            limit=request.limit,
            since=request.since,
            until=request.until,
            session=request.session,
            role=request.role,
            exclude_live=request.exclude_live,
            only_sessions=only,
        )
    finally:
        index.close()
    return RankedHits(hits, complete)
