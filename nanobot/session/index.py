"""The load index of a session file: where a long session can be read from, and the proof it may.

A metadata record may carry `"index": {"offset": B, "messages": N, "decisions": D, "crc": C,
"seal": S}` (S: a CRC of the four numbers, so a hand-edited index is no index), a statement about
the file: the bytes from the end of its first line up to byte B (a line start)
hold exactly N messages and D decision records and no damaged line, and their CRC-32 is C. The
writer puts the offset at the consolidation pointer, so a load parses the first line and the
bytes from B on, and the N consolidated messages only if someone asks for them (`PrefixList`).

The index changes how fast a load is, never what it returns: the store uses it only when every
check holds (B inside the file at a line start, the CRC of the bytes as they are now, the record
being the file's last metadata record, the pointer at or after N), and reads the whole file
otherwise. A file rewritten by another program, repaired, cut, or edited by hand fails the CRC.

`FileIndex` is the one owner of it for an open or loaded session: where the file's messages are,
what the file says is consolidated, which index a pointer write carries. `read` parses a file
(through its index when that holds) and `parse` every line of some bytes of it, recording where
each message starts.
"""

from __future__ import annotations

import os
import zlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from dataclasses import dataclass, field
from io import BufferedReader
from pathlib import Path
from typing import Any, TypeVar, overload

from nanobot.errors import StorageError, storage_error
from nanobot.messages import Message
from nanobot.session.lines import (
    BAD,
    DECISION,
    MESSAGE,
    META,
    classify,
    dumps,
    meta_record,
    plain_int,
)

INDEX_KEY = "index"
INDEX_WORTH_BYTES = (
    1 << 20
)  # a file this large that was read in full gets its index recorded when it is opened
META_LINE_START = b'{"_type": "metadata"'  # how every metadata record we write begins
_CHUNK = 1 << 20

T = TypeVar("T")


@dataclass(frozen=True)
class Checkpoint:
    offset: int  # a line start; the bytes before it are the indexed prefix
    messages: int  # messages in the prefix
    decisions: int  # decision records in the prefix
    crc: int  # CRC-32 of the prefix without the first line

    def record(self) -> dict[str, int]:
        return {
            "offset": self.offset,
            "messages": self.messages,
            "decisions": self.decisions,
            "crc": self.crc,
            "seal": self._seal(),
        }

    def _seal(self) -> int:
        # covers the numbers too, so an index edited by hand (a count, say) is no index at all
        return zlib.crc32(b"%d %d %d %d" % (self.offset, self.messages, self.decisions, self.crc))

    @classmethod
    def from_record(cls, value: Any) -> Checkpoint | None:
        if not isinstance(value, dict):
            return None
        fields = [value.get(k) for k in ("offset", "messages", "decisions", "crc", "seal")]
        ints = [v for v in fields if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(ints) != 5:
            return None
        checkpoint = cls(*ints[:4])
        return checkpoint if checkpoint._seal() == ints[4] else None


def crc_of_range(fh: BufferedReader, start: int, end: int) -> int | None:
    """CRC-32 of bytes [start, end) of an open file, read in chunks; None when the file is shorter."""
    fh.seek(start)
    crc, left = 0, end - start
    buffer = bytearray(min(_CHUNK, max(left, 1)))
    view = memoryview(buffer)
    while left > 0:
        got = fh.readinto(view[: min(left, len(buffer))])
        if not got:
            return None
        crc = zlib.crc32(view[:got], crc)
        left -= got
    return crc


def last_meta_line(fh: BufferedReader, size: int, start: int) -> tuple[int, bytes] | None:
    """(offset, bytes) of the last line at or after `start` that begins like a metadata record we
    write, searching back from the end; None when there is none. A quote inside a JSON string is
    escaped, so these bytes at a line start can only open a record."""
    needle = b"\n" + META_LINE_START
    end, chunk = size, 1 << 16
    carry = b""
    while end > start:
        begin = max(start, end - chunk)
        fh.seek(begin)
        block = fh.read(end - begin) + carry
        at = block.rfind(needle)
        if at != -1:
            line_start = begin + at + 1
            fh.seek(line_start)
            return line_start, fh.readline().rstrip(b"\n")
        carry = block[: len(needle)]
        end, chunk = begin, chunk * 2
    return None


class PrefixList(MutableSequence[T]):
    """A list whose first `skipped` items stay on disk until someone reads them.

    Reads at or after `skipped` (the unconsolidated part, everything a turn uses) and appends
    never touch the prefix; any other read loads it once through `load`, which raises when the
    file no longer holds it.
    """

    def __init__(self, tail: list[T], skipped: int, load: Callable[[], list[T]]) -> None:
        self._items = tail
        self._skipped = skipped
        self._load: Callable[[], list[T]] | None = load if skipped else None

    @property
    def loaded(self) -> bool:
        return self._skipped == 0

    def _full(self) -> list[T]:
        if self._skipped:
            assert self._load is not None
            head = self._load()
            self._items = head + self._items
            self._skipped, self._load = 0, None
        return self._items

    def __len__(self) -> int:
        return self._skipped + len(self._items)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        skipped = self._skipped
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1 and (start >= skipped or stop <= start):
                return self._items[start - skipped : stop - skipped] if stop > start else []
            return self._full()[index]
        if index < 0:
            index += len(self)
        if index >= skipped:
            return self._items[index - skipped]
        if index < 0:
            raise IndexError("list index out of range")
        return self._full()[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self._full()[index] = value

    def __delitem__(self, index: int | slice) -> None:
        del self._full()[index]

    def insert(self, index: int, value: T) -> None:
        self._full().insert(index, value)

    def append(self, value: T) -> None:
        self._items.append(value)

    def extend(self, values: Iterable[T]) -> None:
        self._items.extend(values)

    def clear(self) -> None:
        self._items, self._skipped, self._load = [], 0, None

    def __iter__(self) -> Iterator[T]:
        return iter(self._full())

    def __reversed__(self) -> Iterator[T]:
        return reversed(self._full())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, PrefixList)):
            return len(self) == len(other) and self._full() == list(other)
        return NotImplemented

    def __add__(self, other: Iterable[T]) -> list[T]:
        return self._full() + list(other)

    def __repr__(self) -> str:
        return repr(self._full())

    def copy(self) -> list[T]:
        return list(self._full())


@dataclass
class Parsed:
    messages: list[Message] | PrefixList[Message]
    meta: dict[str, Any]  # the last metadata record (empty if none)
    first_meta: dict[str, Any]
    good_lines: list[
        bytes
    ]  # raw bytes of every readable line, in order (after `checkpoint` when indexed)
    bad_lines: list[bytes]  # raw bytes of unreadable lines (torn or corrupt)
    ends_with_newline: bool
    last_time: str | None  # the time of the last record that carries one
    decisions: list[dict[str, Any]] | PrefixList[dict[str, Any]] = field(default_factory=list)
    bad_after: list[int] = field(
        default_factory=list
    )  # per bad line: how many messages preceded it
    # every metadata record's pointer, with how many messages preceded the record
    pointers: list[tuple[Any, int]] = field(default_factory=list)
    head: int | None = (
        None  # length of the first line with its newline, when it is a metadata record
    )
    msg_starts: list[int] = field(default_factory=list)  # byte offset of each message's line
    decision_starts: list[int] = field(default_factory=list)
    bad_starts: list[int] = field(default_factory=list)
    file: FileIndex | None = (
        None  # where the messages are, for a file read by `read` (not by `parse` alone)
    )

    def pointer_shift(self, pointer: int) -> int:
        """How many damaged lines stood before message `pointer` as it was written: the pointer
        counted them, so it must move back by as many (re-summarising beats never summarising)."""
        return sum(1 for i, good in enumerate(self.bad_after) if good + i < pointer)


def parse(data: bytes, reader: Callable[[bytes], Any] | None = None, *, base: int = 0) -> Parsed:
    """Every line of `data`, which starts at byte `base` of its file."""
    lines = data.split(b"\n")
    ends_with_newline = not data or data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()  # the empty piece after the final newline
    parsed = Parsed([], {}, {}, [], [], ends_with_newline, None)
    messages, good_lines = parsed.messages, parsed.good_lines
    msg_starts = parsed.msg_starts
    pos = base
    for raw in lines:
        start = pos
        pos += len(raw) + 1
        if not raw.strip():
            continue
        kind, record = classify(raw, reader)
        if kind == MESSAGE:
            messages.append(record)
            msg_starts.append(start)
            parsed.last_time = record.get("timestamp") or parsed.last_time
        elif kind == META:
            if not parsed.first_meta:
                parsed.first_meta = record
            if start == 0:
                parsed.head = pos
            parsed.meta = record
            parsed.pointers.append((record.get("last_consolidated", 0), len(messages)))
            parsed.last_time = record.get("updated_at") or parsed.last_time
        elif kind == DECISION:
            parsed.decisions.append(record)
            parsed.decision_starts.append(start)
        elif kind == BAD:
            parsed.bad_lines.append(raw)
            parsed.bad_after.append(len(messages))
            parsed.bad_starts.append(start)
            continue
        good_lines.append(raw)
    return parsed


def _checkpoint_in(parsed: Parsed, data: bytes) -> Checkpoint | None:
    """The index at the file's recorded pointer, from a full parse of `data`; None when the lines
    before it are not all readable (the index promises a clean prefix)."""
    pointer = parsed.meta.get("last_consolidated", 0)
    if parsed.head is None or not plain_int(pointer) or not 0 <= pointer <= len(parsed.messages):
        return None
    if pointer < len(parsed.msg_starts):
        offset = parsed.msg_starts[pointer]
    elif parsed.ends_with_newline:
        offset = len(data)
    else:
        return None
    if parsed.bad_starts and parsed.bad_starts[0] < offset:
        return None
    decisions = bisect_left(parsed.decision_starts, offset)
    return Checkpoint(
        offset, pointer, decisions, zlib.crc32(memoryview(data)[parsed.head : offset])
    )


@dataclass
class FileIndex:
    """Where the messages of one session file are and what of it is consolidated, as far as nanobot
    knows: the one owner of the load index. The store asks it which index to write beside a pointer,
    how the index moves with the pointer, whether a file read in full deserves one, and for the
    consolidated messages and decisions a load skipped (read once, on first use, and checked)."""

    path: Path  # the file that was read (and is written, for a session opened for writing)
    head: int | None = None  # bytes of the first line, when it is a metadata record
    checkpoint: Checkpoint | None = None  # a true index of the file, if known
    on_disk: bool = False  # the file's last metadata record carries `checkpoint`
    stored_pointer: Any = (
        0  # the consolidation pointer as the file records it (perhaps not a number)
    )
    read_from: Checkpoint | None = (
        None  # the index a load read from: the lines before it were not parsed
    )
    _skipped: Parsed | None = field(default=None, repr=False)
    _read_head: int | None = field(
        default=None, repr=False
    )  # `head` when the load read from `read_from`

    def __post_init__(self) -> None:
        self._read_head = self.head if self.read_from is not None else None

    # -- what to write -----------------------------------------------------------------------------

    def record(self, pointer: int) -> dict[str, int] | None:
        """The index a metadata record setting `pointer` carries; None when none is known to hold."""
        cp = self.checkpoint
        return cp.record() if cp is not None and cp.messages <= pointer else None

    def worth_recording(self) -> bool:
        """A large file read in full (an older one, or a stale index): recording its index once makes
        the next open read from the pointer on."""
        cp = self.checkpoint
        return (
            not self.on_disk
            and cp is not None
            and cp.messages > 0
            and self.path.stat().st_size >= INDEX_WORTH_BYTES
        )

    def at(self, pointer: int) -> Checkpoint | None:
        """The index at message `pointer`, moved on from the one known by reading only the lines
        between; None when it cannot be proved (a damaged line, no clean first line)."""
        base = self.checkpoint
        if base is None:
            if self.head is None:
                return None
            base = Checkpoint(self.head, 0, 0, 0)
        if pointer <= base.messages:
            return base if pointer == base.messages else None
        try:
            with self.path.open("rb") as fh:
                fh.seek(base.offset)
                data = fh.read()
        except OSError:
            return None
        pos, messages, decisions = 0, base.messages, base.decisions
        for raw in data.split(b"\n")[:-1]:  # whole lines only
            if messages == pointer:
                break
            pos += len(raw) + 1
            if not raw.strip():
                continue
            kind, _ = classify(raw)
            if kind == BAD:
                return None
            messages += kind == MESSAGE
            decisions += kind == DECISION
        if messages != pointer:
            return None
        return Checkpoint(
            base.offset + pos, pointer, decisions, zlib.crc32(memoryview(data)[:pos], base.crc)
        )

    # -- what happened to the file -----------------------------------------------------------------

    def pointer_moving(self, pointer: int) -> None:
        """A metadata record setting `pointer` is about to be appended: the index moves with it."""
        self.checkpoint = self.at(pointer)
        self.stored_pointer = pointer

    def pointer_written(self) -> None:
        self.on_disk = self.checkpoint is not None

    def rewritten(self, head: int, checkpoint: Checkpoint, pointer: int) -> None:
        """The file was replaced by one whose first line carries `checkpoint`."""
        self.head, self.checkpoint, self.on_disk, self.stored_pointer = (
            head,
            checkpoint,
            True,
            pointer,
        )

    # -- the part a load skipped -------------------------------------------------------------------

    def _read_skipped(self) -> Parsed:
        if self._skipped is None:
            cp, head = self.read_from, self._read_head
            assert cp is not None and head is not None
            try:
                with self.path.open("rb") as fh:
                    fh.seek(head)
                    data = fh.read(cp.offset - head)
            except OSError as exc:
                raise storage_error(exc, "read the session", self.path) from None
            parsed = parse(data, base=head) if len(data) == cp.offset - head else None
            if (
                parsed is None
                or zlib.crc32(data) != cp.crc
                or parsed.bad_lines
                or len(parsed.messages) != cp.messages
                or len(parsed.decisions) != cp.decisions
            ):
                raise StorageError(
                    f"the session file {self.path} was changed by another program while nanobot had it open",
                    hint="nothing was lost from it; close nanobot and open the session again",
                    path=str(self.path),
                )
            self._skipped = parsed
        return self._skipped

    def skipped_messages(self) -> list[Message]:
        return list(self._read_skipped().messages)

    def skipped_decisions(self) -> list[dict[str, Any]]:
        return list(self._read_skipped().decisions)


def read(path: Path, *, checkpoint: bool = False) -> Parsed:
    """The whole file's records: through its index when that holds, else every line. With
    `checkpoint`, a full read also works out the index at the file's pointer."""
    parsed = _read_indexed(path)
    if parsed is not None:
        return parsed
    data = path.read_bytes()
    parsed = parse(data)
    parsed.file = FileIndex(path, parsed.head, _checkpoint_in(parsed, data) if checkpoint else None)
    return parsed


def first_line(
    record: dict[str, Any], prefix: bytes, messages: int, decisions: int
) -> tuple[bytes, Checkpoint]:
    """A rewritten file's first line, whose index points past itself and the `prefix` after it.

    The line's length depends on the numbers in it (the offset, the seal), so instead of searching
    for a length that agrees with itself (which can swing between two), the offset is fixed with
    room to spare and the line is padded to exactly fill it."""
    crc = zlib.crc32(prefix)
    widest = dumps(
        {**record, INDEX_KEY: Checkpoint(0, messages, decisions, crc).record(), "pad": ""}
    )
    offset = (
        len(widest) + len(prefix) + 40
    )  # room for any offset and seal width (at most +25 digits)
    checkpoint = Checkpoint(offset, messages, decisions, crc)
    bare = dumps({**record, INDEX_KEY: checkpoint.record(), "pad": ""})
    first = dumps(
        {**record, INDEX_KEY: checkpoint.record(), "pad": " " * (offset - len(prefix) - len(bare))}
    )
    assert len(first) + len(prefix) == offset
    return first, checkpoint


def _read_indexed(path: Path) -> Parsed | None:
    """The file parsed from its index on, when the index holds; None means: read it all."""
    try:
        fh = path.open("rb")
    except OSError:
        return None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        first = fh.readline()
        head = len(first)
        meta0 = meta_record(first[:-1]) if first.endswith(b"\n") else None
        if meta0 is None:
            return None
        found = last_meta_line(fh, size, head - 1)
        meta = meta_record(found[1]) if found else meta0
        cp = Checkpoint.from_record(meta.get(INDEX_KEY)) if meta else None
        pointer = meta.get("last_consolidated", 0) if meta else None
        if (
            meta is None
            or cp is None
            or not head <= cp.offset <= size
            or (found and found[0] < cp.offset)
            or not plain_int(pointer)
            or pointer < cp.messages
        ):
            return None
        if cp.offset > head:
            fh.seek(cp.offset - 1)
            if fh.read(1) != b"\n":
                return None
        if crc_of_range(fh, head, cp.offset) != cp.crc:
            return None
        fh.seek(cp.offset)
        tail = fh.read()
    parsed = parse(tail, base=cp.offset)
    if parsed.meta != (meta if found else {}):
        return None  # the record holding the index is not the file's last metadata record
    count = cp.messages + len(parsed.messages)
    bad_after = [n + cp.messages for n in parsed.bad_after]
    shift = sum(1 for i, good in enumerate(bad_after) if good + i < pointer)
    if parsed.last_time is None and not found or not 0 <= pointer - shift <= count:
        return None  # the answer needs the lines before the index
    index = parsed.file = FileIndex(path, head, cp, on_disk=True, read_from=cp)
    parsed.messages = PrefixList(list(parsed.messages), cp.messages, index.skipped_messages)
    parsed.decisions = PrefixList(list(parsed.decisions), cp.decisions, index.skipped_decisions)
    parsed.first_meta = meta0
    parsed.meta = meta if found else meta0
    parsed.last_time = parsed.last_time or meta0.get("updated_at")
    parsed.bad_after = bad_after
    parsed.pointers = [(value, n + cp.messages) for value, n in parsed.pointers]
    parsed.head = head
    if not tail:
        parsed.ends_with_newline = True  # the prefix ends at a line start
    return parsed
