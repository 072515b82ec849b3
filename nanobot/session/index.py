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
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, MutableSequence
from dataclasses import dataclass
from io import BufferedReader
from typing import Any, TypeVar, overload

INDEX_KEY = "index"
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
        return {"offset": self.offset, "messages": self.messages, "decisions": self.decisions, "crc": self.crc,
                "seal": self._seal()}

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
        got = fh.readinto(view[:min(left, len(buffer))])
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
        carry = block[:len(needle)]
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
                return self._items[start - skipped:stop - skipped] if stop > start else []
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
