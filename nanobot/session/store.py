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
Each session's `FileIndex` (session/index.py) owns where its messages are in the file and what the
file says is consolidated; the store asks it, and the lines' rules are session/lines.py's.

The per-turn path only appends (one write + one fsync per call); compaction and repair rewrite
atomically. A damaged line costs only that line: its bytes go to `<file>.corrupt`.

/new never deletes a message: the file (and its working state) is renamed to an archived
conversation's name beside it (nanobot.paths: `<stem>.<UTC stamp>.jsonl`, named `<key>@<stamp>`),
and the key starts afresh. A crash at any point leaves the old conversation in the live file or in
the archive, never in neither. An archive is read-only: listed apart, shown, searched, not opened.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanobot.errors import (
    LockHeld,
    SessionInUseError,
    StorageError,
    UnknownSessionError,
    UsageError,
    storage_error,
)
from nanobot.fsio import ExclusiveLock, append_durably, atomic_write, fsync_dir
from nanobot.memory.recall_journal import note_change
from nanobot.messages import Message, for_wire, now_iso, parse_iso, parse_timestamp
from nanobot.paths import (
    archived_file_name,
    archived_file_stamp,
    archived_name,
    ensure_private_dir,
    sessions_dir,
    split_archived_name,
    stamp_order,
)
from nanobot.secrets_mask import mask_value
from nanobot.session.index import (
    INDEX_KEY,
    INDEX_WORTH_BYTES,
    FileIndex,
    Parsed,
    PrefixList,
    first_line,
    parse,
    read,
)
from nanobot.session.lines import DECISION_TYPE, META, classify, dumps, exact_loads, plain_int
from nanobot.session.save_policy import as_sent
from nanobot.session.validity import Fixes, make_valid, repair_messages
from nanobot.session.working_state import SUFFIX, WorkingStateLog, state_path

__all__ = [
    "Session",
    "SessionInfo",
    "SessionStore",
    "RepairReport",
    "DECISION_TYPE",
    "INDEX_WORTH_BYTES",
]


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
    decisions: list[dict[str, Any]] | PrefixList[dict[str, Any]] = field(
        default_factory=list
    )  # approval decisions, oldest first
    working_state: str = (
        ""  # the latest checkpoint, sent with every request (session/working_state.py)
    )
    _lock: ExclusiveLock | None = field(default=None, repr=False)
    _ends_with_newline: bool = field(default=True, repr=False)
    _file: FileIndex | None = field(
        default=None, repr=False
    )  # where its messages are in the file (the store's)

    @property
    def created(self) -> str:
        return self.created_at

    @property
    def is_open(self) -> bool:
        """True while this process holds the session's lock (required for writing)."""
        return self._lock is not None and self._lock.held

    def unconsolidated(self) -> list[Message]:
        return self.messages[self.last_consolidated :]

    def get_history(self, max_messages: int | None = None) -> list[Message]:
        """The copy sent to the model: unconsolidated, last N, made valid, wire keys only."""
        recent = self.unconsolidated()
        if max_messages is not None:
            recent = recent[-max_messages:] if max_messages > 0 else []
        # The system prompt is built fresh for every request; a stored one would be a second one.
        recent = [
            as_sent(m) for m in recent if not (isinstance(m, dict) and m.get("role") == "system")
        ]
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
            lines.append(
                f"consolidation pointer moved from {self.pointer_before} to {self.pointer_after}"
            )
        return lines


_OUR_NAME = re.compile(
    r"^(.+)-([0-9a-f]{12})\.jsonl$"
)  # path_for's names: <slug>-<hash of the key>


def is_our_file(path: Path) -> bool:
    """A name path_for gives, or an archive /new made of one (never one nanobot 0.1.x wrote),
    whatever the file holds."""
    return _OUR_NAME.match(path.name) is not None or archived_file_stamp(path) is not None


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

    def archive_path(self, name: str) -> Path | None:
        """The file of the archived conversation `name` (`<key>@<stamp>`); None: not such a name."""
        split = split_archived_name(name)
        if split is None:
            return None
        live = self.path_for(split[0])
        return live.with_name(archived_file_name(live, split[1]))

    def _legacy_path(self, key: str) -> Path:
        # nanobot v0.1.x named files after the key with ':' replaced, minus unsafe characters.
        name = re.sub(r'[<>:"/\\|?*]', "_", key.replace(":", "_")).strip()
        return self.directory / f"{name}.jsonl"

    # -- reading ------------------------------------------------------------------------------

    def exists(self, key: str) -> bool:
        return self.path_for(key).exists() or self._legacy_file(key) is not None

    def load(self, key: str) -> Session:
        """A read-only snapshot (no lock, nothing written); raises UnknownSessionError. `key` may
        name an archived conversation (`<key>@<stamp>`, see `archives`)."""
        path = self.path_for(key)
        source = path if path.exists() else self._legacy_file(key)
        archive = self.archive_path(key)
        if source is None and archive is not None and archive.is_file():
            path = source = archive
        if source is None:
            raise UnknownSessionError(f"no session named {key!r}", hint=self._known_keys_hint())
        parsed = read(source)
        session = self._build(key, path, parsed)
        session.working_state = WorkingStateLog(path).read().text
        if parsed.bad_lines:
            session.warnings.insert(
                0,
                (
                    f"session {key}: {len(parsed.bad_lines)} damaged line(s) in {source} could not be read; "
                    f"they will be moved to {path}.corrupt when the session is next opened"
                ),
            )
        return session

    def infos(self) -> list[SessionInfo]:
        """Every session in the folder, read without taking locks, newest first."""
        infos: dict[str, SessionInfo] = {}
        if not self.directory.is_dir():
            return []
        for path in sorted(self.directory.glob("*.jsonl")):
            if archived_file_stamp(path) is not None:
                continue  # an archived conversation: `archives` lists those
            try:
                parsed = read(path)
            except OSError:
                continue
            key = (
                parsed.meta.get("key")
                or parsed.first_meta.get("key")
                or key_from_name(path)
                or (path.name if is_our_file(path) else path.stem.replace("_", ":", 1))
            )
            if not isinstance(key, str):
                continue
            canonical = path == self.path_for(key)
            if key in infos and not canonical:
                continue  # a v0.1.x file that was already imported
            infos[key] = self._info(key, path, parsed)
        return sorted(infos.values(), key=lambda info: _sort_time(info.updated_at), reverse=True)

    def archives(self, key: str | None = None) -> list[SessionInfo]:
        """Every archived conversation (what /new kept), or those of `key`, newest first; an info's
        `key` is the conversation's name (`<key>@<stamp>`), `updated_at` its last message's time."""
        if not self.directory.is_dir():
            return []
        found: list[tuple[str, SessionInfo]] = []
        pattern = (
            f"{glob.escape(self.path_for(key).stem)}.*.jsonl" if key is not None else "*.jsonl"
        )
        for path in self.directory.glob(pattern):
            stamp = archived_file_stamp(path)
            if stamp is None:
                continue
            try:
                parsed = read(path)
            except OSError:
                continue
            owner = (
                parsed.first_meta.get("key")
                or parsed.meta.get("key")
                or key_from_name(path.with_name(path.name.split(".", 1)[0] + ".jsonl"))
                or path.name.split(".", 1)[0]
            )
            found.append((stamp, self._info(archived_name(str(owner), stamp), path, parsed)))
        found.sort(key=lambda item: (stamp_order(item[0]), item[1].key), reverse=True)
        return [info for _, info in found]

    def _info(self, key: str, path: Path, parsed: Parsed) -> SessionInfo:
        """A session file's line in a listing: its counts, last time and what is wrong with it."""
        session = self._build(key, path, parsed)
        warnings = session.warnings + (
            [f"{len(parsed.bad_lines)} damaged line(s)"] if parsed.bad_lines else []
        )
        return SessionInfo(
            key,
            path,
            len(session.messages),
            session.last_consolidated,
            session.updated_at,
            warnings,
        )

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

    def _build(self, key: str, path: Path, parsed: Parsed) -> Session:
        meta = parsed.meta
        session = Session(key=key, path=path, messages=parsed.messages)
        session.created_at = str(parsed.first_meta.get("created_at") or session.created_at)
        session.updated_at = str(parsed.last_time or session.created_at)
        metadata = meta.get("metadata")
        session.metadata = metadata if isinstance(metadata, dict) else {}
        session.decisions = parsed.decisions
        session._ends_with_newline = parsed.ends_with_newline
        index = session._file = parsed.file or FileIndex(path, parsed.head)
        pointer = index.stored_pointer = meta.get("last_consolidated", 0)
        count = len(session.messages)
        if not plain_int(pointer) or not 0 <= pointer - parsed.pointer_shift(pointer) <= count:
            proven = self._proven_pointer(parsed, session.messages)
            session.warnings.append(
                f"session {key}: consolidation pointer {pointer!r} cannot be right (it must be a whole number "
                f"from 0 to {count}); using {proven}, "
                + (
                    "the last position HISTORY.md shows was archived"
                    if proven
                    else "the start, since HISTORY.md proves no later position"
                )
                + " (messages after it are sent again and may be summarised twice, never skipped)"
            )
            pointer = proven
        else:
            shift = parsed.pointer_shift(pointer)
            if shift:
                session.warnings.append(
                    f"session {key}: {shift} damaged line(s) came before the consolidation pointer; moved it back "
                    f"from {pointer} to {pointer - shift} so no message is skipped (some may be summarised again)"
                )
                pointer -= shift
        session.last_consolidated = pointer
        return session

    def _proven_pointer(self, parsed: Parsed, messages: Sequence[Message]) -> int:
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
            if plain_int(value) and 0 <= value <= before:
                value -= parsed.pointer_shift(value)
                if value > (chain[-1] if chain else 0) and value <= len(messages):
                    chain.append(value)
        for k in range(len(chain) - 1, -1, -1):
            start = chain[k - 1] if k else 0
            if _chunk_stamps(messages[start : chain[k]]) & stamps:
                return chain[k]
        return 0

    # -- opening for writing ------------------------------------------------------------------

    def open(self, key: str) -> Session:
        """Lock and load the session (creating it if new); raises SessionInUseError if held."""
        if not key.strip():  # it would be saved, but listed and shown by its file's name only
            raise UsageError(
                "the session key is empty",
                hint="Name the session, e.g. -s work (without -s the chat uses cli:direct).",
            )
        self._refuse_archived(key, "continued")
        path = self.path_for(key)
        if path.is_dir():
            raise StorageError(
                f"{path} is a folder, not session {key}'s file",
                hint=f"Move that folder out of {self.directory}; nanobot then starts session {key} "
                "afresh.",
                path=str(path),
            )
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
            stored = _file(session).stored_pointer
            if not plain_int(stored) or session.last_consolidated != stored:
                # Persist the clamped pointer so the warning is given once, not on every open.
                self.set_pointer(session, session.last_consolidated)
            elif _file(session).worth_recording():
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

    def _refuse_archived(self, key: str, what: str) -> None:
        split = split_archived_name(key)
        if split is None:
            return
        archive = self.archive_path(key)
        if archive is not None and archive.is_file():
            raise UsageError(
                f"{key} is a conversation /new archived; it is kept as it was and cannot be {what}",
                hint=f"Read it with `nanobot session show {key}` (or search it with `nanobot history "
                f"search`); continue with -s {split[0]}, or start another session with another name.",
            )
        raise UsageError(
            f"{key} is shaped like the name of an archived conversation (KEY@STAMP), which no "
            "session may have",
            hint="Pick another name for the session; `nanobot session list` lists the archived ones.",
        )

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
                first = dumps(self._meta_record(session))
                append_durably(path, first)
                session._file = FileIndex(path, len(first))
                return session
        parsed = read(path, checkpoint=True)
        session = self._build(key, path, parsed)
        if parsed.bad_lines:
            side = self._move_aside(path, parsed.bad_lines)
            # Rewrite with the readable lines verbatim, so the damage is reported once, not every load.
            # An index's prefix is clean and stays byte for byte; a full read's index is redone later.
            prefix = b""
            index = _file(session)
            if index.read_from is not None:
                with path.open("rb") as fh:
                    prefix = fh.read(index.read_from.offset)
            else:
                index.checkpoint = None
            atomic_write(path, prefix + b"".join(line + b"\n" for line in parsed.good_lines))
            session._ends_with_newline = True
            session.warnings.insert(
                0,
                (
                    f"session {key}: {len(parsed.bad_lines)} damaged line(s) could not be read; "
                    f"their bytes were moved to {side}"
                ),
            )
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
        stamped: list[Message] = [
            m if "timestamp" in m else {**m, "timestamp": now_iso()} for m in messages
        ]
        payload = b"".join(dumps(m) for m in stamped)
        self._append_bytes(session, payload)
        session.messages.extend(stamped)
        session.updated_at = stamped[-1]["timestamp"]

    def set_pointer(self, session: Session, last_consolidated: int) -> None:
        """Record a new consolidation pointer by appending a metadata record (the last one wins)."""
        self._require_lock(session)
        if not 0 <= last_consolidated <= len(session.messages):
            raise ValueError(f"pointer {last_consolidated} outside 0..{len(session.messages)}")
        index = _file(session)
        index.pointer_moving(last_consolidated)
        session.last_consolidated = last_consolidated
        session.updated_at = now_iso()
        self._append_bytes(session, dumps(self._meta_record(session)))
        index.pointer_written()

    def set_metadata(self, session: Session, **values: Any) -> None:
        self._require_lock(session)
        session.metadata.update(values)
        session.updated_at = now_iso()
        self._append_bytes(session, dumps(self._meta_record(session)))

    def record_decision(self, session: Session, **fields: Any) -> dict[str, Any]:
        """Append an approval decision (kind, summary, allowed, by, reason) durably, secrets masked."""
        self._require_lock(session)
        record = {"_type": DECISION_TYPE, "timestamp": now_iso(), **mask_value(fields)}
        self._append_bytes(session, dumps(record))
        session.decisions.append(record)
        return record

    def rewrite(self, session: Session) -> None:
        """Replace the file with one metadata record, the decisions and the messages (temp, fsync, rename)."""
        self._require_lock(session)
        session.updated_at = now_iso()
        lines = [dumps(m) for m in session.messages]
        prefix = b"".join(dumps(d) for d in session.decisions) + b"".join(
            lines[: session.last_consolidated]
        )
        index = _file(session)
        index.checkpoint = None
        record = self._meta_record(session)
        first, checkpoint = first_line(
            record, prefix, session.last_consolidated, len(session.decisions)
        )
        payload = first + prefix + b"".join(lines[session.last_consolidated :])
        try:
            atomic_write(session.path, payload)  # the old file stays whole when this fails
        except OSError as exc:
            raise storage_error(exc, "rewrite the session", session.path) from None
        session._ends_with_newline = True
        note_change(session.path)
        index.rewritten(len(first), checkpoint, session.last_consolidated)

    def clear(self, session: Session) -> str | None:
        """/new: keep the conversation whole as an archived one, start the key afresh; returns the
        archive's name (None when there were no messages). The caller records the old messages in
        HISTORY.md first. Each step is one rename, so a crash leaves the conversation either in the
        live file or in the archive: the file moves first, then its working state (a crash between
        leaves that state, already closed by /new, beside the new conversation), then a fresh file."""
        self._require_lock(session)
        name = None
        session.decisions = list(session.decisions)  # kept (read now: a part may still be on disk)
        if session.messages:
            ensure_private_dir(self.directory)
            stamp, target = self._free_archive(session.path)
            try:
                os.replace(session.path, target)  # the only name it has is the archive's from here
            except OSError as exc:
                raise storage_error(exc, "archive the conversation", session.path) from None
            fsync_dir(self.directory)
            note_change(target)
            try:  # (failing, it stays as a crash here leaves it: closed, beside the new conversation)
                if state_path(session.path).exists():
                    os.replace(state_path(session.path), state_path(target))
                    fsync_dir(self.directory)
            except OSError:
                pass
            name = archived_name(session.key, stamp)
            session.created_at = now_iso()
        session.messages = []
        session.last_consolidated = 0
        session._file = FileIndex(session.path)
        self.rewrite(session)
        return name

    def _free_archive(self, live: Path) -> tuple[str, Path]:
        """A stamp (this UTC second) and archive path no archive has yet (the session's lock is held,
        and only its /new names archives of it, so nothing takes the name before the rename)."""
        base = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        for n in range(1, 10_000):
            stamp = base if n == 1 else f"{base}-{n}"
            target = live.with_name(archived_file_name(live, stamp))
            if not target.exists() and not state_path(target).exists():
                return stamp, target
        raise StorageError(f"too many archives of {live} this second", path=str(live))

    def working_state_log(self, session: Session) -> WorkingStateLog:
        """The session's working-state file, beside its session file (session/working_state.py)."""
        return WorkingStateLog(session.path)

    def working_state_for(self, key: str) -> WorkingStateLog:
        """The working-state file of the session `key` (or archived conversation), without loading it."""
        archive = self.archive_path(key)
        if archive is not None and archive.is_file() and not self.path_for(key).exists():
            return WorkingStateLog(archive)
        return WorkingStateLog(self.path_for(key))

    def working_states(self) -> list[tuple[Path, WorkingStateLog]]:
        """Every working-state file in the folder, with the session file it belongs to (by name)."""
        if not self.directory.is_dir():
            return []
        return [
            (session_file, WorkingStateLog(session_file))
            for state_file in sorted(self.directory.glob(f"*.jsonl{SUFFIX}"))
            for session_file in [state_file.with_name(state_file.name[: -len(SUFFIX)])]
        ]

    def repair(self, key: str) -> RepairReport:
        """Rewrite a damaged session cleanly; the original file is kept as `<file>.bak-<time>`."""
        self._refuse_archived(key, "repaired (it is read as it is: damaged lines are skipped)")
        path = self.path_for(key)
        if not self.exists(key):
            raise UnknownSessionError(f"no session named {key!r}", hint=self._known_keys_hint())
        lock = self._lock(key, path)
        try:
            source = path if path.exists() else self._legacy_file(key)
            if source is None:  # gone since `exists`
                raise UnknownSessionError(f"no session named {key!r}", hint=self._known_keys_hint())
            original = source.read_bytes()
            parsed = parse(original, exact_loads)  # these messages are written back
            session = self._build(key, path, parsed)
            fixed, pointer, fixes = repair_messages(
                list(session.messages), session.last_consolidated
            )
            pointer_before = parsed.meta.get("last_consolidated", 0)
            needs_rewrite = (
                parsed.bad_lines
                or fixes.total
                or pointer != pointer_before
                or not parsed.ends_with_newline
                or source != path
            )
            report = RepairReport(
                key,
                path,
                None,
                len(parsed.bad_lines),
                None,
                fixes,
                pointer_before if isinstance(pointer_before, int) else 0,
                pointer,
            )
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
            raise RuntimeError(
                f"session {session.key} is not open for writing (use SessionStore.open)"
            )

    def _append_bytes(self, session: Session, payload: bytes) -> None:
        if not session._ends_with_newline:
            # The file ends in a line with no newline: start on a fresh line rather than glue onto it.
            payload = b"\n" + payload
        try:
            append_durably(session.path, payload)
        except OSError as exc:
            session._ends_with_newline = (
                False  # if the cut-back failed too, start afresh on a new line
            )
            raise storage_error(exc, "save the session", session.path) from None
        session._ends_with_newline = True
        note_change(session.path)  # (for the recall index: memory/recall_journal.py)

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
        index = _file(session).record(session.last_consolidated)
        if index is not None:
            record[INDEX_KEY] = index
        return record


def _file(session: Session) -> FileIndex:
    """The session's file index (a Session made elsewhere gets one on first use)."""
    if session._file is None:
        session._file = FileIndex(session.path)
    return session._file


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
            kind, record = classify(fh.readline().rstrip(b"\n"))
    except OSError:
        return {}
    return record if kind == META else {}


def _sort_time(stamp: str) -> float:
    parsed = parse_timestamp(stamp)  # v0.1.x wrote naive local times; naive reads as local here
    return parsed.timestamp() if parsed is not None else 0.0
