"""Sessions: an honest, append-only JSONL log on disk and a valid copy of it for the model.

File format (compatible with HKUDS/nanobot v0.1.x, which also lets the last metadata record win):

    {"_type": "metadata", "key": ..., "created_at": ..., "updated_at": ..., "metadata": {}, "last_consolidated": N}
    {"role": "user", "content": "...", "timestamp": "..."}
    ...
    {"_type": "metadata", ...}      # a later pointer update, appended; the last one wins
    {"_type": "decision", ...}      # an approval decision (never a message: get_history skips it)

A metadata record may carry an `index` (session/index.py): the byte offset of the consolidation
pointer and a CRC of the bytes before it, so a load parses only the unconsolidated part; the
consolidated messages are read if someone asks for them. A stale or wrong index means a full read.

The per-turn path only appends (one write + one fsync per call); compaction, repair and /new
rewrite atomically. A damaged line costs only that line: its bytes go to `<file>.corrupt`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

import orjson

from nanobot.errors import (
    LockHeld,
    SessionInUseError,
    StorageError,
    UnknownSessionError,
    storage_error,
)
from nanobot.fsio import ExclusiveLock, append_durably, atomic_write
from nanobot.messages import Message, clean_unicode, for_wire, now_iso, parse_iso, parse_timestamp
from nanobot.paths import ensure_private_dir, sessions_dir
from nanobot.secrets_mask import mask_value
from nanobot.session.index import INDEX_KEY, Checkpoint, PrefixList, crc_of_range, last_meta_line
from nanobot.session.save_policy import as_sent
from nanobot.session.validity import Fixes, make_valid, repair_messages
from nanobot.session.working_state import WorkingStateLog

__all__ = ["Session", "SessionInfo", "SessionStore", "RepairReport", "DECISION_TYPE"]

DECISION_TYPE = "decision"  # the `_type` of an approval decision record

# A session file this large that was read in full gets its load index recorded when it is opened.
INDEX_WORTH_BYTES = 1 << 20


@dataclass
class Session:
    """One conversation: the stored messages and the consolidation pointer."""

    key: str
    path: Path
    # a plain list, or a PrefixList whose consolidated part is read from disk on first use
    messages: list[Message] | PrefixList[Message] = field(default_factory=list)
    last_consolidated: int = 0  # messages before this index are summarised into memory
    created_at: str = field(default_factory=now_iso)
    updated_at: str = field(default_factory=now_iso)
    metadata: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # load problems the user should be told about
    decisions: list[dict[str, Any]] | PrefixList[dict[str, Any]] = field(default_factory=list)  # approval decisions, oldest first
    working_state: str = ""  # the latest checkpoint, sent with every request (session/working_state.py)
    _lock: ExclusiveLock | None = field(default=None, repr=False)
    _ends_with_newline: bool = field(default=True, repr=False)
    _stored_pointer: Any = field(default=0, repr=False)  # the pointer as the file records it
    _head: int | None = field(default=None, repr=False)  # bytes of the first line, when it is a metadata record
    _checkpoint: Checkpoint | None = field(default=None, repr=False)  # a true index of the file, if known
    _indexed_on_disk: bool = field(default=False, repr=False)  # the file's last metadata record carries it

    @property
    def created(self) -> str:
        return self.created_at

    @property
    def is_open(self) -> bool:
        """True while this process holds the session's lock (required for writing)."""
        return self._lock is not None and self._lock.held

    def unconsolidated(self) -> list[Message]:
        return self.messages[self.last_consolidated:]

    def get_history(self, max_messages: int | None = None) -> list[Message]:
        """The copy sent to the model: unconsolidated, last N, made valid, wire keys only."""
        recent = self.unconsolidated()
        if max_messages is not None:
            recent = recent[-max_messages:] if max_messages > 0 else []
        # The system prompt is built fresh for every request; a stored one would be a second one.
        recent = [as_sent(m) for m in recent if not (isinstance(m, dict) and m.get("role") == "system")]
        return [for_wire(m) for m in make_valid(recent)]


@dataclass
class SessionInfo:
    key: str
    path: Path
    message_count: int
    last_consolidated: int
    updated_at: str
    warnings: list[str] = field(default_factory=list)


@dataclass
class RepairReport:
    key: str
    path: Path
    backup: Path | None  # None when nothing needed fixing
    damaged_lines: int
    corrupt_file: Path | None
    fixes: Fixes
    pointer_before: int
    pointer_after: int

    @property
    def changed(self) -> bool:
        return self.backup is not None

    def describe(self) -> list[str]:
        lines = []
        if self.damaged_lines:
            lines.append(f"{self.damaged_lines} damaged lines moved to {self.corrupt_file}")
        lines.extend(self.fixes.describe())
        if self.pointer_before != self.pointer_after:
            lines.append(f"consolidation pointer moved from {self.pointer_before} to {self.pointer_after}")
        return lines


@dataclass
class _Parsed:
    messages: list[Message] | PrefixList[Message]
    meta: dict[str, Any]  # the last metadata record (empty if none)
    first_meta: dict[str, Any]
    good_lines: list[bytes]  # raw bytes of every readable line, in order (after `checkpoint` when indexed)
    bad_lines: list[bytes]  # raw bytes of unreadable lines (torn or corrupt)
    ends_with_newline: bool
    last_time: str | None  # the time of the last record that carries one
    decisions: list[dict[str, Any]] | PrefixList[dict[str, Any]] = field(default_factory=list)
    bad_after: list[int] = field(default_factory=list)  # per bad line: how many messages preceded it
    # every metadata record's pointer, with how many messages preceded the record
    pointers: list[tuple[Any, int]] = field(default_factory=list)
    head: int | None = None  # length of the first line with its newline, when it is a metadata record
    msg_starts: list[int] = field(default_factory=list)  # byte offset of each message's line
    decision_starts: list[int] = field(default_factory=list)
    bad_starts: list[int] = field(default_factory=list)
    checkpoint: Checkpoint | None = None  # a true index of the file (verified, or computed from it)
    indexed: bool = False  # read from `checkpoint` on: the lines before it were not parsed

    def pointer_shift(self, pointer: int) -> int:
        """How many damaged lines stood before message `pointer` as it was written: the pointer
        counted them, so it must move back by as many (re-summarising beats never summarising)."""
        return sum(1 for i, good in enumerate(self.bad_after) if good + i < pointer)


# what a line is: the one rule, for the full parse and for the index
BAD, MESSAGE, META, DECISION, OTHER = range(5)
_BOM = b"\xef\xbb\xbf"
_OUR_NAME = re.compile(r"^(.+)-([0-9a-f]{12})\.jsonl$")  # path_for's names: <slug>-<hash of the key>


def is_our_file(path: Path) -> bool:
    """A name path_for gives (never one nanobot 0.1.x wrote), whatever the file holds."""
    return _OUR_NAME.match(path.name) is not None


def key_from_name(path: Path) -> str | None:
    """The key of one of our files when its name proves it (the hash matches), for a file whose
    metadata cannot be read; tries the usual shape, channel:chat."""
    m = _OUR_NAME.match(path.name)
    if m is None:
        return None
    slug, digest = m.groups()
    for candidate in (slug.replace("_", ":", 1), slug):
        if hashlib.sha256(candidate.encode("utf-8")).hexdigest()[:12] == digest:
            return candidate
    return None


def _classify(raw: bytes, loads: Callable[[bytes], Any] | None = None) -> tuple[int, Any]:
    if raw.startswith(_BOM) or raw.endswith(b"\r"):  # an editor's BOM or CRLF: the line itself is fine
        raw = raw.removeprefix(_BOM).removesuffix(b"\r")
    try:
        record = (loads or _loads)(raw)
    except (UnicodeDecodeError, ValueError):
        return BAD, None
    if not isinstance(record, dict):
        return BAD, None
    kind = record.get("_type")
    if kind == "metadata":
        return META, record
    if kind == DECISION_TYPE:
        return DECISION, record
    if "_type" in record:
        return OTHER, record  # a record kind from a newer version: keep its line, ignore it here
    if isinstance(record.get("role"), str):
        return MESSAGE, record
    return BAD, None


def _parse(data: bytes, loads: Callable[[bytes], Any] | None = None, *, base: int = 0) -> _Parsed:
    """Every line of `data`, which starts at byte `base` of its file."""
    lines = data.split(b"\n")
    ends_with_newline = not data or data.endswith(b"\n")
    if ends_with_newline:
        lines.pop()  # the empty piece after the final newline
    parsed = _Parsed([], {}, {}, [], [], ends_with_newline, None)
    messages, good_lines = parsed.messages, parsed.good_lines
    msg_starts = parsed.msg_starts
    pos = base
    for raw in lines:
        start = pos
        pos += len(raw) + 1
        if not raw.strip():
            continue
        kind, record = _classify(raw, loads)
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


def _checkpoint_in(parsed: _Parsed, data: bytes) -> Checkpoint | None:
    """The index at the file's recorded pointer, from a full parse of `data`; None when the lines
    before it are not all readable (the index promises a clean prefix)."""
    pointer = parsed.meta.get("last_consolidated", 0)
    if parsed.head is None or not _plain_int(pointer) or not 0 <= pointer <= len(parsed.messages):
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
    return Checkpoint(offset, pointer, decisions, zlib.crc32(memoryview(data)[parsed.head:offset]))


class _Prefix:
    """Reads the indexed prefix of a session file once, when a PrefixList first needs it."""

    def __init__(self, path: Path, head: int, checkpoint: Checkpoint) -> None:
        self.path, self.head, self.checkpoint = path, head, checkpoint
        self._parsed: _Parsed | None = None

    def _read(self) -> _Parsed:
        if self._parsed is None:
            cp = self.checkpoint
            try:
                with self.path.open("rb") as fh:
                    fh.seek(self.head)
                    data = fh.read(cp.offset - self.head)
            except OSError as exc:
                raise storage_error(exc, "read the session", self.path) from None
            parsed = _parse(data, base=self.head) if len(data) == cp.offset - self.head else None
            if (parsed is None or zlib.crc32(data) != cp.crc or parsed.bad_lines
                    or len(parsed.messages) != cp.messages or len(parsed.decisions) != cp.decisions):
                raise StorageError(
                    f"the session file {self.path} was changed by another program while nanobot had it open",
                    hint="nothing was lost from it; close nanobot and open the session again", path=str(self.path))
            self._parsed = parsed
        return self._parsed

    def messages(self) -> list[Message]:
        return list(self._read().messages)

    def decisions(self) -> list[dict[str, Any]]:
        return list(self._read().decisions)


def _record(raw: bytes) -> dict[str, Any] | None:
    kind, record = _classify(raw)
    return record if kind == META else None


def _first_line(record: dict[str, Any], prefix: bytes, messages: int, decisions: int) -> tuple[bytes, Checkpoint]:
    """A rewritten file's first line, whose index points past itself and the `prefix` after it.

    The line's length depends on the numbers in it (the offset, the seal), so instead of searching
    for a length that agrees with itself (which can swing between two), the offset is fixed with
    room to spare and the line is padded to exactly fill it."""
    crc = zlib.crc32(prefix)
    widest = _dumps({**record, INDEX_KEY: Checkpoint(0, messages, decisions, crc).record(), "pad": ""})
    offset = len(widest) + len(prefix) + 40  # room for any offset and seal width (at most +25 digits)
    checkpoint = Checkpoint(offset, messages, decisions, crc)
    bare = _dumps({**record, INDEX_KEY: checkpoint.record(), "pad": ""})
    first = _dumps({**record, INDEX_KEY: checkpoint.record(), "pad": " " * (offset - len(prefix) - len(bare))})
    assert len(first) + len(prefix) == offset
    return first, checkpoint


def _read_indexed(path: Path) -> _Parsed | None:
    """The file parsed from its index on, when the index holds; None means: read it all."""
    try:
        fh = path.open("rb")
    except OSError:
        return None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        first = fh.readline()
        head = len(first)
        meta0 = _record(first[:-1]) if first.endswith(b"\n") else None
        if meta0 is None:
            return None
        found = last_meta_line(fh, size, head - 1)
        meta = _record(found[1]) if found else meta0
        cp = Checkpoint.from_record(meta.get(INDEX_KEY)) if meta else None
        pointer = meta.get("last_consolidated", 0) if meta else None
        if (meta is None or cp is None or not head <= cp.offset <= size or (found and found[0] < cp.offset)
                or not _plain_int(pointer) or pointer < cp.messages):
            return None
        if cp.offset > head:
            fh.seek(cp.offset - 1)
            if fh.read(1) != b"\n":
                return None
        if crc_of_range(fh, head, cp.offset) != cp.crc:
            return None
        fh.seek(cp.offset)
        tail = fh.read()
    parsed = _parse(tail, base=cp.offset)
    if parsed.meta != (meta if found else {}):
        return None  # the record holding the index is not the file's last metadata record
    count = cp.messages + len(parsed.messages)
    bad_after = [n + cp.messages for n in parsed.bad_after]
    shift = sum(1 for i, good in enumerate(bad_after) if good + i < pointer)
    if parsed.last_time is None and not found or not 0 <= pointer - shift <= count:
        return None  # the answer needs the lines before the index
    prefix = _Prefix(path, head, cp)
    parsed.messages = PrefixList(list(parsed.messages), cp.messages, prefix.messages)
    parsed.decisions = PrefixList(list(parsed.decisions), cp.decisions, prefix.decisions)
    parsed.first_meta = meta0
    parsed.meta = meta if found else meta0
    parsed.last_time = parsed.last_time or meta0.get("updated_at")
    parsed.bad_after = bad_after
    parsed.pointers = [(value, n + cp.messages) for value, n in parsed.pointers]
    parsed.head, parsed.checkpoint, parsed.indexed = head, cp, True
    if not tail:
        parsed.ends_with_newline = True  # the prefix ends at a line start
    return parsed


def _read(path: Path, *, checkpoint: bool = False) -> _Parsed:
    """The whole file's records: through its index when that holds, else every line. With
    `checkpoint`, a full read also works out the index at the file's pointer."""
    parsed = _read_indexed(path)
    if parsed is not None:
        return parsed
    data = path.read_bytes()
    parsed = _parse(data)
    if checkpoint:
        parsed.checkpoint = _checkpoint_in(parsed, data)
    return parsed


def _loads(raw: bytes) -> Any:
    """One JSONL line, fast. orjson parses a long session about twice as fast as json; a line it
    refuses but json reads (NaN, for instance) still loads, through json. orjson reads an integer
    past 64 bits as a float, so whatever writes messages back (repair) parses with `_exact_loads`."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8"))


def _exact_loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"))


def _dumps(record: Mapping[str, Any]) -> bytes:
    # default=str: an odd value in a message must not cost the user the whole turn on disk.
    text = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (bytes that were not UTF-8): save it as U+FFFD
        return (json.dumps(clean_unicode(record), ensure_ascii=False, default=str) + "\n").encode("utf-8")


def _slug(key: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._-")
    return slug[:48] or "session"


Receipts = Callable[[], set[str]]


class SessionStore:
    """Session files in one folder; one writer per session, enforced by an OS lock.

    `receipts` returns the stamps ("YYYY-MM-DD HH:MM") of the HISTORY.md entries; with it, a
    consolidation pointer that cannot be right falls back to the last position HISTORY.md proves.
    """

    def __init__(self, directory: Path | None = None, *, receipts: Receipts | None = None) -> None:
        self.directory = Path(directory) if directory is not None else sessions_dir()
        self.receipts = receipts

    # -- naming -------------------------------------------------------------------------------

    def path_for(self, key: str) -> Path:
        """A readable slug plus a hash of the exact key, so two keys never share a file."""
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
        return self.directory / f"{_slug(key)}-{digest}.jsonl"

    def _legacy_path(self, key: str) -> Path:
        # nanobot v0.1.x named files after the key with ':' replaced, minus unsafe characters.
        name = re.sub(r'[<>:"/\\|?*]', "_", key.replace(":", "_")).strip()
        return self.directory / f"{name}.jsonl"

    # -- reading ------------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        return self.path_for(key).exists() or self._legacy_file(key) is not None

    def load(self, key: str) -> Session:
        """A read-only snapshot (no lock, nothing written); raises UnknownSessionError."""
        path = self.path_for(key)
        source = path if path.exists() else self._legacy_file(key)
        if source is None:
            raise UnknownSessionError(
                f"no session named {key!r}", hint=self._known_keys_hint()
            )
        parsed = _read(source)
        session = self._build(key, path, parsed)
        session.working_state = WorkingStateLog(path).read().text
        if parsed.bad_lines:
            session.warnings.insert(0, (
                f"session {key}: {len(parsed.bad_lines)} damaged line(s) in {source} could not be read; "
                f"they will be moved to {path}.corrupt when the session is next opened"
            ))
        return session

    def infos(self) -> list[SessionInfo]:
        """Every session in the folder, read without taking locks, newest first."""
        infos: dict[str, SessionInfo] = {}
        if not self.directory.is_dir():
            return []
        for path in sorted(self.directory.glob("*.jsonl")):
            try:
                parsed = _read(path)
            except OSError:
                continue
            key = (parsed.meta.get("key") or parsed.first_meta.get("key") or key_from_name(path)
                   or (path.name if is_our_file(path) else path.stem.replace("_", ":", 1)))
            if not isinstance(key, str):
                continue
            canonical = path == self.path_for(key)
            if key in infos and not canonical:
                continue  # a v0.1.x file that was already imported
            session = self._build(key, path, parsed)
            warnings = session.warnings + ([f"{len(parsed.bad_lines)} damaged line(s)"] if parsed.bad_lines else [])
            infos[key] = SessionInfo(
                key, path, len(session.messages), session.last_consolidated, session.updated_at, warnings
            )
        return sorted(infos.values(), key=lambda info: _sort_time(info.updated_at), reverse=True)

    def _legacy_file(self, key: str) -> Path | None:
        legacy = self._legacy_path(key)
        if legacy == self.path_for(key) or not legacy.is_file():
            return None
        meta = _parse_first_line(legacy)
        if meta.get("key", key) != key:
            return None
        return legacy

    def _known_keys_hint(self) -> str:
        keys = [info.key for info in self.infos()]
        return "known sessions: " + ", ".join(keys) if keys else "there are no saved sessions yet"

    def _build(self, key: str, path: Path, parsed: _Parsed) -> Session:
        meta = parsed.meta
        session = Session(key=key, path=path, messages=parsed.messages)
        session.created_at = str(parsed.first_meta.get("created_at") or session.created_at)
        session.updated_at = str(parsed.last_time or session.created_at)
        metadata = meta.get("metadata")
        session.metadata = metadata if isinstance(metadata, dict) else {}
        session.decisions = parsed.decisions
        session._ends_with_newline = parsed.ends_with_newline
        session._head, session._checkpoint, session._indexed_on_disk = parsed.head, parsed.checkpoint, parsed.indexed
        pointer = session._stored_pointer = meta.get("last_consolidated", 0)
        count = len(session.messages)
        if not _plain_int(pointer) or not 0 <= pointer - parsed.pointer_shift(pointer) <= count:
            proven = self._proven_pointer(parsed, session.messages)
            session.warnings.append(
                f"session {key}: consolidation pointer {pointer!r} cannot be right (it must be a whole number "
                f"from 0 to {count}); using {proven}, " + (
                    "the last position HISTORY.md shows was archived" if proven else
                    "the start, since HISTORY.md proves no later position")
                + " (messages after it are sent again and may be summarised twice, never skipped)")
            pointer = proven
        else:
            shift = parsed.pointer_shift(pointer)
            if shift:
                session.warnings.append(
                    f"session {key}: {shift} damaged line(s) came before the consolidation pointer; moved it back "
                    f"from {pointer} to {pointer - shift} so no message is skipped (some may be summarised again)")
                pointer -= shift
        session.last_consolidated = pointer
        return session

    def _proven_pointer(self, parsed: _Parsed, messages: Sequence[Message]) -> int:
        """The furthest earlier pointer whose chunk has its HISTORY.md entry (stamped with the chunk's
        first message time), else 0. Every pointer was written only after its chunk was recorded."""
        if self.receipts is None:
            return 0
        try:
            stamps = self.receipts()
        except OSError:
            return 0
        chain: list[int] = []
        for value, before in parsed.pointers:
            if _plain_int(value) and 0 <= value <= before:
                value -= parsed.pointer_shift(value)
                if value > (chain[-1] if chain else 0) and value <= len(messages):
                    chain.append(value)
        for k in range(len(chain) - 1, -1, -1):
            start = chain[k - 1] if k else 0
            if _chunk_stamps(messages[start:chain[k]]) & stamps:
                return chain[k]
        return 0

    # -- opening for writing ------------------------------------------------------------------

    def open(self, key: str) -> Session:
        """Lock and load the session (creating it if new); raises SessionInUseError if held."""
        path = self.path_for(key)
        if path.is_dir():
            raise StorageError(f"{path} is a folder, not session {key}'s file",
                               hint=f"Move that folder out of {self.directory}; nanobot then starts session {key} "
                                    "afresh.", path=str(path))
        try:
            lock = self._lock(key, path)
        except OSError as exc:
            raise storage_error(exc, "open the session", path) from None
        try:
            session = self._load_locked(key, path)
            session._lock = lock
            state, damaged = WorkingStateLog(path).open()
            session.working_state = state.text
            session.warnings.extend(f"session {key}: {line}" for line in damaged)
            stored = session._stored_pointer
            if not _plain_int(stored) or session.last_consolidated != stored:
                # Persist the clamped pointer so the warning is given once, not on every open.
                self.set_pointer(session, session.last_consolidated)
            elif (not session._indexed_on_disk and session._checkpoint is not None
                  and session._checkpoint.messages and path.stat().st_size >= INDEX_WORTH_BYTES):
                # Read in full (an older file, or a stale index): record the index once, so the
                # next open reads from the pointer on.
                self.set_pointer(session, session.last_consolidated)
        except OSError as exc:
            lock.release()
            raise storage_error(exc, "open the session", path) from None
        except BaseException:
            lock.release()
            raise
        return session

    def close(self, session: Session) -> None:
        if session._lock is not None:
            session._lock.release()
            session._lock = None

    def _lock(self, key: str, path: Path) -> ExclusiveLock:
        ensure_private_dir(self.directory)
        lock = ExclusiveLock(path)
        try:
            lock.acquire()
        except LockHeld:
            raise SessionInUseError(
                f"session {key} is in use by another nanobot process",
                hint="close the other nanobot (or pick another session) and try again",
            ) from None
        return lock

    def _load_locked(self, key: str, path: Path) -> Session:
        if path.exists() and path.stat().st_size == 0:
            path.unlink()  # created but never written (a crash right after creation): start afresh
        if not path.exists():
            legacy = self._legacy_file(key)
            if legacy is not None:
                # Import a v0.1.x file byte for byte; the original stays where it was.
                atomic_write(path, legacy.read_bytes())
            else:
                session = Session(key=key, path=path)
                first = _dumps(self._meta_record(session))
                append_durably(path, first)
                session._head = len(first)
                return session
        parsed = _read(path, checkpoint=True)
        session = self._build(key, path, parsed)
        if parsed.bad_lines:
            side = self._move_aside(path, parsed.bad_lines)
            # Rewrite with the readable lines verbatim, so the damage is reported once, not every load.
            # An index's prefix is clean and stays byte for byte; a full read's index is redone later.
            prefix = b""
            if parsed.indexed and parsed.checkpoint is not None:
                with path.open("rb") as fh:
                    prefix = fh.read(parsed.checkpoint.offset)
            else:
                session._checkpoint = None
            atomic_write(path, prefix + b"".join(line + b"\n" for line in parsed.good_lines))
            session._ends_with_newline = True
            session.warnings.insert(0, (
                f"session {key}: {len(parsed.bad_lines)} damaged line(s) could not be read; "
                f"their bytes were moved to {side}"
            ))
        return session

    def _move_aside(self, path: Path, lines: list[bytes]) -> Path:
        side = Path(str(path) + ".corrupt")
        append_durably(side, b"".join(line + b"\n" for line in lines))
        return side

    # -- writing ------------------------------------------------------------------------------

    def append(self, session: Session, messages: list[Message]) -> None:
        """Append messages durably: one write and one fsync, whatever the session's size."""
        if not messages:
            return
        self._require_lock(session)
        stamped: list[Message] = [m if "timestamp" in m else {**m, "timestamp": now_iso()} for m in messages]
        payload = b"".join(_dumps(m) for m in stamped)
        self._append_bytes(session, payload)
        session.messages.extend(stamped)
        session.updated_at = stamped[-1]["timestamp"]

    def set_pointer(self, session: Session, last_consolidated: int) -> None:
        """Record a new consolidation pointer by appending a metadata record (the last one wins)."""
        self._require_lock(session)
        if not 0 <= last_consolidated <= len(session.messages):
            raise ValueError(f"pointer {last_consolidated} outside 0..{len(session.messages)}")
        session._checkpoint = self._checkpoint_at(session, last_consolidated)
        session.last_consolidated = session._stored_pointer = last_consolidated
        session.updated_at = now_iso()
        self._append_bytes(session, _dumps(self._meta_record(session)))
        session._indexed_on_disk = session._checkpoint is not None

    def set_metadata(self, session: Session, **values: Any) -> None:
        self._require_lock(session)
        session.metadata.update(values)
        session.updated_at = now_iso()
        self._append_bytes(session, _dumps(self._meta_record(session)))

    def record_decision(self, session: Session, **fields: Any) -> dict[str, Any]:
        """Append an approval decision (kind, summary, allowed, by, reason) durably, secrets masked."""
        self._require_lock(session)
        record = {"_type": DECISION_TYPE, "timestamp": now_iso(), **mask_value(fields)}
        self._append_bytes(session, _dumps(record))
        session.decisions.append(record)
        return record

    def rewrite(self, session: Session) -> None:
        """Replace the file with one metadata record, the decisions and the messages (temp, fsync, rename)."""
        self._require_lock(session)
        session.updated_at = now_iso()
        lines = [_dumps(m) for m in session.messages]
        prefix = b"".join(_dumps(d) for d in session.decisions) + b"".join(lines[:session.last_consolidated])
        session._checkpoint = None
        record = self._meta_record(session)
        first, checkpoint = _first_line(record, prefix, session.last_consolidated, len(session.decisions))
        payload = first + prefix + b"".join(lines[session.last_consolidated:])
        try:
            atomic_write(session.path, payload)  # the old file stays whole when this fails
        except OSError as exc:
            raise storage_error(exc, "rewrite the session", session.path) from None
        session._ends_with_newline = True
        session._stored_pointer = session.last_consolidated
        session._head, session._checkpoint, session._indexed_on_disk = len(first), checkpoint, True

    def clear(self, session: Session) -> None:
        """Empty the session for /new (the caller archives the old messages first)."""
        session.messages = []
        session.last_consolidated = 0
        self.rewrite(session)

    def repair(self, key: str) -> RepairReport:
        """Rewrite a damaged session cleanly; the original file is kept as `<file>.bak-<time>`."""
        path = self.path_for(key)
        if not self.exists(key):
            raise UnknownSessionError(f"no session named {key!r}", hint=self._known_keys_hint())
        lock = self._lock(key, path)
        try:
            source = path if path.exists() else self._legacy_file(key)
            if source is None:  # gone since `exists`
                raise UnknownSessionError(f"no session named {key!r}", hint=self._known_keys_hint())
            original = source.read_bytes()
            parsed = _parse(original, _exact_loads)  # these messages are written back
            session = self._build(key, path, parsed)
            fixed, pointer, fixes = repair_messages(list(session.messages), session.last_consolidated)
            pointer_before = parsed.meta.get("last_consolidated", 0)
            needs_rewrite = (
                parsed.bad_lines or fixes.total or pointer != pointer_before
                or not parsed.ends_with_newline or source != path
            )
            report = RepairReport(key, path, None, len(parsed.bad_lines), None, fixes,
                                  pointer_before if isinstance(pointer_before, int) else 0, pointer)
            if not needs_rewrite:
                return report
            stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
            backup = Path(f"{path}.bak-{stamp}")
            atomic_write(backup, original)
            report.backup = backup
            if parsed.bad_lines:
                report.corrupt_file = self._move_aside(path, parsed.bad_lines)
            session.messages, session.last_consolidated = fixed, pointer
            session._lock = lock
            self.rewrite(session)
            return report
        finally:
            lock.release()

    # -- internals ----------------------------------------------------------------------------

    def _require_lock(self, session: Session) -> None:
        if not session.is_open:
            raise RuntimeError(f"session {session.key} is not open for writing (use SessionStore.open)")

    def _append_bytes(self, session: Session, payload: bytes) -> None:
        if not session._ends_with_newline:
            # The file ends in a line with no newline: start on a fresh line rather than glue onto it.
            payload = b"\n" + payload
        try:
            append_durably(session.path, payload)
        except OSError as exc:
            session._ends_with_newline = False  # if the cut-back failed too, start afresh on a new line
            raise storage_error(exc, "save the session", session.path) from None
        session._ends_with_newline = True

    @staticmethod
    def _meta_record(session: Session) -> dict[str, Any]:
        record = {
            "_type": "metadata",
            "key": session.key,
            "created_at": session.created_at,
            "updated_at": session.updated_at,
            "metadata": session.metadata,
            "last_consolidated": session.last_consolidated,
        }
        checkpoint = session._checkpoint
        if checkpoint is not None and checkpoint.messages <= session.last_consolidated:
            record[INDEX_KEY] = checkpoint.record()
        return record

    @staticmethod
    def _checkpoint_at(session: Session, pointer: int) -> Checkpoint | None:
        """The index at message `pointer`, moved on from the one the session has by reading only the
        lines between; None when it cannot be proved (a damaged line, no clean first line)."""
        base = session._checkpoint
        if base is None:
            if session._head is None:
                return None
            base = Checkpoint(session._head, 0, 0, 0)
        if pointer <= base.messages:
            return base if pointer == base.messages else None
        try:
            with session.path.open("rb") as fh:
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
            kind, _ = _classify(raw)
            if kind == BAD:
                return None
            messages += kind == MESSAGE
            decisions += kind == DECISION
        if messages != pointer:
            return None
        return Checkpoint(base.offset + pos, pointer, decisions, zlib.crc32(memoryview(data)[:pos], base.crc))


def _plain_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _chunk_stamps(chunk: Sequence[Message]) -> set[str]:
    """The minute a HISTORY.md entry for `chunk` is stamped with (as local and as written)."""
    for msg in chunk:
        when = parse_iso(msg.get("timestamp"))
        if when is not None:
            local = when.astimezone().replace(tzinfo=None) if when.tzinfo else when
            return {local.strftime("%Y-%m-%d %H:%M"), when.strftime("%Y-%m-%d %H:%M")}
    return set()


def _parse_first_line(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            kind, record = _classify(fh.readline().rstrip(b"\n"))
    except OSError:
        return {}
    return record if kind == META else {}


def _sort_time(stamp: str) -> float:
    parsed = parse_timestamp(stamp)  # v0.1.x wrote naive local times; naive reads as local here
    return parsed.timestamp() if parsed is not None else 0.0
