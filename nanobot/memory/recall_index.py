"""The recall index: one SQLite FTS5 table (BM25) over every session message and HISTORY.md entry.

Derived data, never the source of truth. The files stay what they are (session JSONL appended per
turn, HISTORY.md appended per entry); this index is brought up to date lazily, when someone
searches, by reading each file from the byte offset it was indexed to. So the turn path pays
nothing at all, and whatever was written before a search is found by it. Rules:

1. A source (a session file, HISTORY.md) is indexed in whole lines up to its last newline; the
   offset reached, the file's inode and a fingerprint of the bytes before the offset are stored
   in the same transaction as its rows, so a kill at any moment leaves the index as it was before
   the transaction or after it, never in between.
2. A source whose inode and size are as indexed is not opened. One that grew is checked (inode,
   fingerprint) and read on; one that was replaced (a rewrite by /new or repair, an editor's save)
   or changed before its end is indexed again from its start; a source that is gone loses its rows.
   A session file renamed (/new keeps a conversation so, under an archived name) takes its rows
   with it when its inode and fingerprint vouch for them: only what it has beyond them is read.
   Which session files to look at: those the journal names (nanobot.memory.recall_journal) when it
   can vouch for the rest, else every file of the folder (one stat each).
3. A message's unit is its transcript text (messages.transcript_lines: tool results and call
   arguments cut to a bounded size), a HISTORY.md entry's is the entry; a unit longer than
   PASSAGE_CHARS becomes several passages cut at line ends. Secrets are masked before anything
   is stored.
4. An index that cannot be read (missing, damaged, another schema) is deleted and built again from
   the files. One writer at a time (SQLite's lock); a search that finds the index being written by
   another process searches what is there.
5. A query's words are OR-ed and ranked by BM25; "quoted text" stays a phrase; every word is
   quoted for FTS5, so no query text is ever FTS5 syntax.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import re
import sqlite3
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import astuple, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from nanobot.errors import RecallIndexError
from nanobot.memory.history_format import STAMP_RE, without_chunk_markers
from nanobot.memory.recall_journal import Mark, changes_since, mark_for_full_scan
from nanobot.messages import parse_timestamp, transcript_lines
from nanobot.paths import (
    PRIVATE_FILE_MODE,
    archived_file_stamp,
    archived_name,
    nanobot_home,
    split_archived_name,
    stamp_order,
)
from nanobot.secrets_mask import mask_secrets, remember_secrets, remembered_secrets
from nanobot.threads import start_quiet

__all__ = [
    "RecallIndex",
    "Hit",
    "Unit",
    "RefreshReport",
    "query_terms",
    "fts_query",
    "default_index_path",
    "HISTORY_LABEL",
    "PASSAGE_CHARS",
    "best_window",
]

SCHEMA_VERSION = 1
PASSAGE_CHARS = 1500  # a longer unit is stored as passages of at most this many characters
TOOL_RESULT_CHARS = 2000  # a tool result is indexed as its head and tail, this long
ARGUMENT_CHARS = 300  # the arguments of a tool call, likewise
HISTORY_LABEL = "memory/HISTORY.md"  # the `session` of HISTORY.md entries
_FINGERPRINT_BYTES = 256
_COMMIT_BYTES = 8 << 20  # a long source is committed in steps of about this many bytes read
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_TS_FORMAT = "%Y-%m-%d %H:%M:%S"
_STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have he her his how i if in "
    "into is it its me my of on or our she so than that the their them then there these they this to "
    "us was we were what when where which who whom why will with would you your about did do".split()
)


def default_index_path() -> Path:
    return nanobot_home() / "recall.sqlite3"


# ---- the query ------------------------------------------------------------------------------------


def query_terms(query: str) -> list[str]:
    """Words of the query; "quoted text" stays one phrase."""
    return [a or b for a, b in re.findall(r'"([^"]+)"|(\S+)', query) if (a or b).strip()]


def _spaced(text: str) -> str:
    """CJK characters as separate words (the tokenizer would take a whole run as one)."""
    return _CJK.sub(r" \g<0> ", text) if _CJK.search(text) else text


def _content_terms(query: str) -> list[str]:
    """The query's terms that can match (each has a letter or digit), function words left out when
    there are others: they would rank nothing and cost time."""
    terms = [t for t in query_terms(query) if any(c.isalnum() for c in t)]
    content = [
        t for t in terms if " " in t.strip() or t.strip(".,;:!?'\"()").lower() not in _STOPWORDS
    ]
    return list(dict.fromkeys(content or terms))


def _match(terms: list[str]) -> str | None:
    phrases = ['"' + _spaced(term).replace('"', '""') + '"' for term in terms]
    return " OR ".join(dict.fromkeys(phrases)) if phrases else None


def fts_query(query: str) -> str | None:
    """The FTS5 MATCH expression for a user's or model's query (see rule 5); None when it has no word."""
    return _match(_content_terms(query))


def query_words(query: str) -> list[str]:
    """The lowercased words of a query, for picking the part of a long text worth showing."""
    return [w for w in re.findall(r"\w+", query.lower()) if w not in _STOPWORDS]


_RERANK_DEPTH = (
    4  # BM25's best limit x this are reranked by how many of the query's words they hold
)
_COVERAGE_WEIGHT = 0.25


def _stem(word: str) -> str:
    return word[: max(4, len(word) - 2)] if len(word) > 4 else word


def _reranked(bm25: float, text: str, words: list[str]) -> float:
    """BM25 (negative: lower is better) strengthened by a quarter for each further distinct query word
    the unit holds: OR-ed words otherwise let one rare word repeated outrank a unit that has them all."""
    low = text.lower()
    held = sum(1 for w in set(words) if _stem(w) in low)
    return bm25 * (1.0 + _COVERAGE_WEIGHT * max(0, held - 1))


def best_window(text: str, words: list[str], size: int) -> tuple[int, int]:
    """The span of at most `size` characters of `text` that holds the most distinct query words
    (rarer ones count more), widened to line or word edges where that is cheap."""
    if len(text) <= size:
        return 0, len(text)
    low = text.lower()
    hits: list[tuple[int, str]] = []
    for word in set(words):
        stem = _stem(word)
        start = low.find(stem)
        count = 0
        while start >= 0 and count < 50:
            hits.append((start, word))
            count += 1
            start = low.find(stem, start + 1)
    if not hits:
        return 0, size
    freq: dict[str, int] = {}
    for _, w in hits:
        freq[w] = freq.get(w, 0) + 1
    hits.sort()
    best, best_at = -1.0, 0
    for i, (pos, _) in enumerate(hits):
        seen = {w for p, w in hits[i:] if p < pos + size - size // 3}
        score = sum(1.0 / freq[w] + 1.0 for w in seen)
        if score > best:
            best, best_at = score, pos
    start = max(0, best_at - size // 3)
    line = text.rfind("\n", max(0, start - 80), best_at)
    if line >= 0:
        start = line + 1
    start = min(start, len(text) - size)
    return start, start + size


# ---- units ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One stored passage: a message (or part of one) of a session, or an entry (or part) of HISTORY.md."""

    id: int
    session: str  # the session key, or HISTORY_LABEL
    seq: int  # the message's number in its session (0-based), or the entry's number in HISTORY.md
    part: int  # 0 for a unit's first passage
    when: str  # "YYYY-MM-DD HH:MM:SS" local, "" when unknown
    role: str  # user / assistant / tool for messages; summary / archive for HISTORY.md entries
    text: str

    @property
    def ref(self) -> str:
        """How read_history names this place: `<session>#<seq>`."""
        return f"{self.session}#{self.seq}"

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref,
            "session": self.session,
            "message": self.seq,
            "part": self.part,
            "date": self.when or None,
            "role": self.role,
            "text": self.text,
        }


@dataclass(frozen=True)
class Hit:
    unit: Unit
    score: float  # BM25 as SQLite gives it: lower is better
    before: Unit | None  # the unit just before, in the same source
    after: Unit | None


@dataclass
class RefreshReport:
    complete: bool  # every source is indexed up to its end
    bytes_done: int  # bytes read this time
    bytes_left: int  # bytes still to read (0 when complete)
    full_scan: bool = False  # every session file was looked at (the journal could not vouch)


def _passages(text: str) -> list[str]:
    """`text` in pieces of at most PASSAGE_CHARS, cut at line ends (or spaces in a long line)."""
    if len(text) <= PASSAGE_CHARS:
        return [text]
    out: list[str] = []
    cur = ""
    for line in text.split("\n"):
        while len(line) > PASSAGE_CHARS:
            cut = line.rfind(" ", PASSAGE_CHARS // 2, PASSAGE_CHARS)
            cut = cut if cut > 0 else PASSAGE_CHARS
            if cur:
                out.append(cur)
                cur = ""
            out.append(line[:cut])
            line = line[cut:].lstrip(" ")
        if cur and len(cur) + 1 + len(line) > PASSAGE_CHARS:
            out.append(cur)
            cur = line
        else:
            cur = f"{cur}\n{line}" if cur else line
    if cur.strip():
        out.append(cur)
    return [p for p in out if p.strip()] or [text[:PASSAGE_CHARS]]


def _local(when: datetime | None) -> str:
    return when.strftime(_TS_FORMAT) if when is not None else ""


def _message_text(record: dict[str, Any]) -> str:
    """The transcript lines of a message, without the "USER: " its speaker already says."""
    text = "\n".join(
        transcript_lines(record, tool_chars=TOOL_RESULT_CHARS, arg_chars=ARGUMENT_CHARS)
    )
    prefix = f"{str(record.get('role', '')).upper()}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


# ---- the index ------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE sources (
    id INTEGER PRIMARY KEY,
    path TEXT UNIQUE NOT NULL,
    kind TEXT NOT NULL,            -- 'session' or 'history'
    session TEXT NOT NULL,         -- the session key, or HISTORY_LABEL
    inode INTEGER NOT NULL,
    done INTEGER NOT NULL,         -- bytes indexed (a line start)
    fingerprint INTEGER NOT NULL,  -- CRC of the bytes just before `done`
    seq INTEGER NOT NULL,          -- messages / entries indexed
    n INTEGER NOT NULL,            -- units indexed
    pointer INTEGER NOT NULL,      -- a session's consolidation pointer, as its last metadata record says
    last_when TEXT NOT NULL,       -- the last stamp seen (an undated entry inherits it)
    last_role TEXT NOT NULL
);
CREATE TABLE units (
    id INTEGER PRIMARY KEY,
    src INTEGER NOT NULL,
    n INTEGER NOT NULL,            -- its place among the source's units
    seq INTEGER NOT NULL,          -- the message's (entry's) number in the source
    part INTEGER NOT NULL,         -- which passage of it
    ts TEXT NOT NULL,
    role TEXT NOT NULL,
    pos INTEGER NOT NULL,          -- where the message (entry) is in the source: its text is read from there
    len INTEGER NOT NULL
);
CREATE INDEX units_place ON units (src, n);
CREATE INDEX units_seq ON units (src, seq);
CREATE VIRTUAL TABLE fts USING fts5(text, content='', tokenize='porter unicode61 remove_diacritics 2')
"""

# A contentless FTS5 row can only be deleted with its text, and a rewritten source no longer has
# it: such rows stay as orphans (no unit joins them, so no search returns them) until they are
# more than the live units, and then the index is built again.
_ORPHANS_REBUILD_MIN = 20_000


def _is_busy(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and (
        "locked" in str(exc) or "busy" in str(exc)
    )


@dataclass
class _Source:
    path: str
    kind: str
    session: str


_Row = tuple[int, int, str, str, int, int, str]  # seq, part, when, role, pos, len, text


class RecallIndex:
    """The index at `path` over the session files in `sessions` and the HISTORY.md at `history`."""

    def __init__(self, path: Path, *, sessions: Path, history: Path | None) -> None:
        self.path = Path(path)
        self.sessions = Path(sessions)
        self.history = Path(history) if history is not None else None
        self._db: sqlite3.Connection | None = None
        self.rebuilt = False  # set when this object found the index unusable and started it again

    # -- the connection -------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._db is not None:
            return self._db
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(2):
            try:
                self._db = self._open()
                return self._db
            except sqlite3.Error as exc:
                if _is_busy(exc):
                    raise
                if attempt:
                    raise RecallIndexError(
                        f"the recall index {self.path} cannot be used: {exc}",
                        hint="check that the nanobot home is writable and not full; the index "
                        "is rebuilt from the session files and HISTORY.md",
                        path=str(self.path),
                    ) from None
                self._delete()
        raise AssertionError("unreachable")

    def _open(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        db = sqlite3.connect(self.path, timeout=0.2, isolation_level=None, check_same_thread=False)
        try:
            if fresh:
                os.chmod(
                    self.path, PRIVATE_FILE_MODE
                )  # it says what was said: as private as the sessions
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
                db.execute("BEGIN IMMEDIATE")  # (another process may be creating it this moment)
                try:
                    version = db.execute("PRAGMA user_version").fetchone()[0]
                    if (
                        version == 0
                        and not db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                    ):
                        for statement in _SCHEMA.split(";"):
                            db.execute(statement)
                        db.execute("INSERT INTO meta VALUES ('next_id', 1), ('orphans', 0)")
                        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                        self.rebuilt = self.rebuilt or not fresh
                    elif version != SCHEMA_VERSION:
                        raise sqlite3.DatabaseError(
                            f"index schema {version}, expected {SCHEMA_VERSION}"
                        )
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
            db.execute("SELECT count(*) FROM sources").fetchone()
        except BaseException:
            db.close()
            raise
        return db

    def _delete(self) -> None:
        self.close()
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(f"{self.path}{suffix}")
            except FileNotFoundError:
                pass
        self.rebuilt = True

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def _guarded(self, work: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `work`; an index found damaged on the way is deleted and `work` runs once more on a new one."""
        for attempt in range(2):
            try:
                return work(self._connect())
            except sqlite3.Error as exc:
                if _is_busy(exc) or attempt:
                    raise
                self._delete()
        raise AssertionError("unreachable")

    # -- bringing it up to date -----------------------------------------------------------------

    def _sources(self) -> list[_Source]:
        found: list[_Source] = []
        try:  # (plain strings: a search over thousands of sessions lists them all each time)
            with os.scandir(self.sessions) as entries:
                names = sorted(e.name for e in entries if e.name.endswith(".jsonl"))
        except OSError:
            names = []
        folder = str(self.sessions).rstrip(os.sep) + os.sep
        found.extend(_Source(folder + name, "session", "") for name in names)
        if self.history is not None and self.history.is_file():
            found.append(_Source(str(self.history), "history", HISTORY_LABEL))
        return found

    def _changed(self, known: dict[str, tuple[int, int]]) -> tuple[list[_Source], set[str]]:
        """The sources not indexed to their end as they are now (new, grown or replaced: rule 2), in
        order, and the paths of every source there is. One pass over the folder, one stat per file:
        what every search pays, over thousands of sessions."""
        present: set[str] = set()
        changed: list[_Source] = []
        folder = str(self.sessions).rstrip(os.sep) + os.sep
        try:
            with os.scandir(self.sessions) as entries:
                for entry in entries:
                    if not entry.name.endswith(".jsonl"):
                        continue
                    path = folder + entry.name
                    present.add(path)
                    was = known.get(path)
                    if was is not None:
                        try:
                            st = entry.stat()
                            if st.st_ino == was[0] and st.st_size == was[1]:
                                continue
                        except OSError:
                            pass
                    changed.append(_Source(path, "session", ""))
        except OSError:
            pass
        changed.sort(key=lambda src: src.path)
        self._history_changed(known, changed, present)
        return changed, present

    def _history_changed(
        self, known: dict[str, tuple[int, int]], changed: list[_Source], present: set[str]
    ) -> None:
        if self.history is not None and self.history.is_file():
            path = str(self.history)
            present.add(path)
            if not _unchanged(path, known.get(path)):
                changed.append(_Source(path, "history", HISTORY_LABEL))

    def _named(self, db: sqlite3.Connection, names: list[str]) -> tuple[list[_Source], set[str]]:
        """Like _changed, but only for the session files the journal names (and HISTORY.md): the
        sources not indexed to their end, and the paths among them that are gone."""
        folder = str(self.sessions).rstrip(os.sep) + os.sep
        paths = [folder + name for name in names]
        if self.history is not None:
            paths.append(str(self.history))
        known: dict[str, tuple[int, int]] = {}
        for path in paths:
            row = db.execute("SELECT inode, done FROM sources WHERE path = ?", (path,)).fetchone()
            if row is not None:
                known[path] = (row[0], row[1])
        changed: list[_Source] = []
        gone: set[str] = set()
        for path in paths[: len(names)]:
            if os.path.isfile(path):
                if not _unchanged(path, known.get(path)):
                    changed.append(_Source(path, "session", ""))
            elif path in known:
                gone.add(path)
        changed.sort(key=lambda src: src.path)
        present: set[str] = set()
        self._history_changed(known, changed, present)
        if self.history is not None and str(self.history) in known and not present:
            gone.add(str(self.history))
        return changed, gone

    def _plan(
        self, db: sqlite3.Connection, *, for_refresh: bool
    ) -> tuple[list[_Source], set[str], Mark | None, bool]:
        """What a refresh reads (in order), the sources that are gone, and the mark to keep once it is
        all read: from the journal when it can vouch for what changed, else by a full scan (one
        stat per file; nanobot.memory.recall_journal says when). Without `for_refresh`, nothing on
        disk is touched (a full scan neither starts nor rotates the journal)."""
        news = changes_since(self.sessions, _read_mark(db))
        if news is not None:
            names, mark = news
            queue, gone = self._named(db, names)
            return queue, gone, mark, False
        full_mark = mark_for_full_scan(self.sessions) if for_refresh else None
        known = {
            path: (inode, done)
            for path, inode, done in db.execute("SELECT path, inode, done FROM sources")
        }
        queue, present = self._changed(known)
        return queue, known.keys() - present, full_mark, True

    def _left(self, db: sqlite3.Connection, queue: list[_Source]) -> int:
        """How many bytes reading `queue` would take (an estimate: a rewritten file counts whole)."""
        total = 0
        for src in queue:
            try:
                st = os.stat(src.path)
            except OSError:
                continue
            row = db.execute(
                "SELECT inode, done FROM sources WHERE path = ?", (src.path,)
            ).fetchone()
            inode, done = row if row is not None else (None, 0)
            total += st.st_size - done if inode == st.st_ino and done <= st.st_size else st.st_size
        return total

    def pending_bytes(self) -> int:
        """How many bytes a refresh would read (an estimate: a rewritten file counts whole)."""

        def work(db: sqlite3.Connection) -> int:
            return self._left(db, self._plan(db, for_refresh=False)[0])

        return int(self._guarded(work))

    def refresh(
        self,
        *,
        budget_seconds: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> RefreshReport:
        """Index what was written since the last refresh (rules 1, 2); stops after `budget_seconds`.
        Another process writing the index meanwhile: returns at once, incomplete."""
        try:
            report: RefreshReport = self._guarded(
                lambda db: self._refresh(db, budget_seconds, progress)
            )
            return report
        except sqlite3.OperationalError as exc:
            if _is_busy(exc):
                return RefreshReport(False, 0, 0)
            raise

    def _refresh(
        self,
        db: sqlite3.Connection,
        budget: float | None,
        progress: Callable[[int, int], None] | None,
    ) -> RefreshReport:
        deadline = time.monotonic() + budget if budget is not None else None
        orphans = db.execute("SELECT value FROM meta WHERE key = 'orphans'").fetchone()[0]
        if (
            orphans > _ORPHANS_REBUILD_MIN
            and orphans > db.execute("SELECT count(*) FROM units").fetchone()[0]
        ):
            self._delete()
            db = self._connect()
        queue, gone, mark, full_scan = self._plan(db, for_refresh=True)
        if gone:
            with _transaction(db):
                for path in sorted(gone):
                    src_id = db.execute(
                        "SELECT id FROM sources WHERE path = ?", (path,)
                    ).fetchone()[0]
                    self._forget(db, src_id)
                    db.execute("DELETE FROM sources WHERE id = ?", (src_id,))
        big = budget is None and len(queue) >= _AHEAD_MIN_FILES
        total = self._left(db, queue) if progress is not None or big else 0
        done_bytes = 0
        ahead = _ParsedAhead.start() if big and total >= _AHEAD_MIN_BYTES else None
        try:
            while queue:
                if deadline is not None and time.monotonic() > deadline:
                    break
                room = _COMMIT_BYTES
                with _transaction(
                    db
                ):  # several small sources, or a part of a large one, per transaction
                    while queue and room > 0:
                        if ahead is not None:
                            ahead.feed(queue)
                        parsed = ahead.take(queue[0]) if ahead is not None else None
                        got = self._insert_parsed(db, queue[0], parsed) if parsed else None
                        finished = got is not None
                        if got is None:
                            got, finished = self._index_step(db, queue[0], room)
                        room -= max(got, 1)
                        done_bytes += got
                        if finished:
                            queue.pop(0)
                        if progress is not None and got:
                            progress(done_bytes, max(total, done_bytes))
        finally:
            if ahead is not None:
                ahead.stop()
        complete = not queue
        if complete and mark is not None:
            with _transaction(db):  # (only now: an interrupted catch-up reads the same news again)
                db.executemany(
                    "INSERT OR REPLACE INTO meta VALUES (?, ?)", zip(_MARK_KEYS, astuple(mark))
                )
        left = 0 if complete else self._left(db, queue)
        return RefreshReport(complete, done_bytes, left, full_scan)

    def _forget(self, db: sqlite3.Connection, src_id: int) -> None:
        """Drop a source's units; their FTS5 rows stay as orphans (see _ORPHANS_REBUILD_MIN)."""
        count = db.execute("DELETE FROM units WHERE src = ?", (src_id,)).rowcount
        db.execute("UPDATE meta SET value = value + ? WHERE key = 'orphans'", (count,))

    def _index_step(self, db: sqlite3.Connection, src: _Source, room: int) -> tuple[int, bool]:
        """Index up to about `room` more bytes of one source; (bytes read, whether it is now indexed to its end)."""
        try:
            fh = open(src.path, "rb")
        except OSError:
            return 0, True
        with fh:
            st = os.fstat(fh.fileno())
            row = db.execute(
                "SELECT id, inode, done, fingerprint, seq, n, pointer, last_when, last_role, session "
                "FROM sources WHERE path = ?",
                (src.path,),
            ).fetchone()
            if row is None and src.kind == "session":
                row = self._moved_here(db, src.path, st, fh)
            if row is not None:
                src_id, inode, done, fingerprint, seq, n, pointer, last_when, last_role, session = (
                    row
                )
                if inode != st.st_ino or done > st.st_size or _fingerprint(fh, done) != fingerprint:
                    self._forget(db, src_id)  # rewritten or changed: index it again (rule 2)
                    done, seq, n, pointer, last_when, last_role = 0, 0, 0, 0, "", ""
                    session = src.session
            else:
                done, seq, n, pointer, last_when, last_role, session = (
                    0,
                    0,
                    0,
                    0,
                    "",
                    "",
                    src.session,
                )
                cur = db.execute(
                    "INSERT INTO sources (path, kind, session, inode, done, fingerprint, seq, n, "
                    "pointer, last_when, last_role) VALUES (?, ?, ?, ?, 0, 0, 0, 0, 0, '', '')",
                    (src.path, src.kind, session, st.st_ino),
                )
                src_id = cur.lastrowid
            if done >= st.st_size:
                return 0, True
            fh.seek(done)
            data = fh.read(max(room, 1 << 16))
            whole = fh.tell() >= st.st_size
            if not whole:
                data += fh.readline()  # to the end of the line the block cut
                whole = fh.tell() >= st.st_size
            end = data.rfind(b"\n") + 1
            if end == 0:
                return 0, True  # no whole line yet: the rest is being written
            if src.kind == "history" and not whole:
                # stop before the entry the block cut, so an entry is one unit even in a huge file
                cut = _last_entry_start(data, end)
                end = cut if cut > 0 else end
            data = data[:end]
            rows: list[_Row] = []
            if src.kind == "session":
                if done == 0:
                    session = _session_key(data, src.path)
                seq, pointer, last_when = _session_units(data, done, seq, pointer, last_when, rows)
            else:
                seq, last_when, last_role = _history_units(
                    data, done, seq, last_when, last_role, rows
                )
            self._insert(db, src_id, n, rows)
            n += len(rows)
            new_done = done + len(data)
            db.execute(
                "UPDATE sources SET inode = ?, done = ?, fingerprint = ?, seq = ?, n = ?, pointer = ?, "
                "last_when = ?, last_role = ?, session = ? WHERE id = ?",
                (
                    st.st_ino,
                    new_done,
                    _fingerprint_of(data, done, fh, new_done),
                    seq,
                    n,
                    pointer,
                    last_when,
                    last_role,
                    session,
                    src_id,
                ),
            )
            return len(data), whole

    def _moved_here(
        self, db: sqlite3.Connection, path: str, st: os.stat_result, fh: Any
    ) -> tuple[Any, ...] | None:
        """The source row of a session file renamed to `path` (how /new keeps a conversation), moved
        with it and renamed after it, when nothing is at its old path any more (or another file is)
        and the bytes it indexed are still the file's: then nothing is read again."""
        rows = db.execute(
            "SELECT id, path, done, fingerprint FROM sources WHERE inode = ? AND kind = 'session'",
            (st.st_ino,),
        ).fetchall()
        for src_id, old, done, fingerprint in rows:
            try:
                if os.stat(old).st_ino == st.st_ino:
                    continue  # still there (a second name for it): not a move
            except OSError:
                pass
            if done > st.st_size or _fingerprint(fh, done) != fingerprint:
                continue
            fh.seek(0)
            label = _session_key(fh.readline(), path)
            db.execute(
                "UPDATE sources SET path = ?, session = ? WHERE id = ?", (path, label, src_id)
            )
            moved: tuple[Any, ...] = db.execute(
                "SELECT id, inode, done, fingerprint, seq, n, pointer, last_when, last_role, "
                "session FROM sources WHERE id = ?",
                (src_id,),
            ).fetchone()
            return moved
        return None

    def _insert(
        self,
        db: sqlite3.Connection,
        src_id: int,
        n: int,
        rows: list[_Row],
        texts: list[str] | None = None,
    ) -> None:
        """The rows' units and their words; `texts`: the rows' texts already masked and spaced."""
        if not rows:
            return
        first = db.execute("SELECT value FROM meta WHERE key = 'next_id'").fetchone()[0]
        if texts is None:
            texts = _indexed_texts(rows)
        db.executemany(
            "INSERT INTO units (id, src, n, seq, part, ts, role, pos, len) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ((first + k, src_id, n + k, *row[:6]) for k, row in enumerate(rows)),
        )
        db.executemany(
            "INSERT INTO fts (rowid, text) VALUES (?, ?)",
            ((first + k, text) for k, text in enumerate(texts)),
        )
        db.execute("UPDATE meta SET value = ? WHERE key = 'next_id'", (first + len(rows),))

    def _insert_parsed(self, db: sqlite3.Connection, src: _Source, parsed: _Parsed) -> int | None:
        """Index a session file the helper process read whole (`parsed`); the bytes indexed, or None
        when it is no longer as read or is indexed already (then _index_step takes it)."""
        try:
            st = os.stat(src.path)
        except OSError:
            return None
        if st.st_ino != parsed.inode or st.st_size < parsed.done:
            return None
        if db.execute("SELECT 1 FROM sources WHERE path = ?", (src.path,)).fetchone():
            return None
        cur = db.execute(
            "INSERT INTO sources (path, kind, session, inode, done, fingerprint, seq, n, pointer, "
            "last_when, last_role) VALUES (?, 'session', ?, ?, ?, ?, ?, ?, ?, ?, '')",
            (
                src.path,
                parsed.session,
                parsed.inode,
                parsed.done,
                parsed.fingerprint,
                parsed.seq,
                len(parsed.rows),
                parsed.pointer,
                parsed.last_when,
            ),
        )
        assert cur.lastrowid is not None
        self._insert(db, cur.lastrowid, 0, parsed.rows, parsed.texts)
        return parsed.done

    # -- asking it --------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        since: datetime | None = None,
        until: datetime | None = None,
        session: str | None = None,
        role: str | None = None,
        exclude_live: str | None = None,
        only_sessions: set[str] | None = None,
        neighbours: bool = True,
    ) -> list[Hit]:
        """The best `limit` messages or entries for `query` (rule 5) within the filters, each hit a
        message's (entry's) best passage: its other passages take no other hit's place.
        `session`: a key (its current conversation and those /new archived of it), an archived
        conversation's name, or HISTORY_LABEL. `exclude_live` (a session key): that session's unconsolidated messages (already in the
        prompt) are left out; `only_sessions` keeps hits from those sessions (with the conversations
        /new archived of them) and HISTORY.md only."""
        terms = _content_terms(query)
        if not terms or limit <= 0:
            return []
        if only_sessions is not None:
            only_sessions = set(only_sessions) | set(self.archives_of(only_sessions))
        where = ["fts MATCH ?"]
        args: list[Any] = [None]
        if since is not None:
            where.append("u.ts >= ?")
            args.append(_local(since))
        if until is not None:
            where.append("u.ts != '' AND u.ts <= ?")
            args.append(_local(until))
        if session is not None:  # a key covers the conversations its /new archived
            labels = [session, *self.archives_of({session})]
            where.append(f"s.session IN ({', '.join('?' for _ in labels)})")
            args.extend(labels)
        if role is not None:
            where.append("u.role = ?")
            args.append(role)
        if exclude_live is not None:
            where.append("NOT (s.session = ? AND s.kind = 'session' AND u.seq >= s.pointer)")
            args.append(exclude_live)
        if only_sessions is not None:
            marks = ", ".join("?" for _ in only_sessions)
            where.append(f"(s.kind = 'history' OR s.session IN ({marks}))")
            args.extend(sorted(only_sessions))
        sql = (
            f"SELECT {_UNIT_COLUMNS}, {{score}} AS score FROM fts JOIN units u ON u.id = fts.rowid "
            f"JOIN sources s ON s.id = u.src WHERE {' AND '.join(where)} ORDER BY {{order}} LIMIT ?"
        )
        args.append(
            limit * _RERANK_DEPTH + 5
        )  # candidates for the rerank, and spares for stale sources
        wanted = query_words(query)

        def work(db: sqlite3.Connection) -> list[Hit]:
            kept, common = _without_common(db, terms)
            if (
                kept
            ):  # (equal scores keep the order FTS5's own ranking gives them: the older unit first)
                args[0] = _match(kept)
                rows = db.execute(
                    sql.format(score="bm25(fts)", order="score, u.id"), args
                ).fetchall()
            else:  # every word is common: the newest units that hold them all (or, failing that, any)
                rows = []
                for joiner in (" AND ", " OR "):
                    args[0] = joiner.join(_match([word]) or "" for word in common)
                    rows = db.execute(
                        sql.format(score="-1.0", order="fts.rowid DESC"), args
                    ).fetchall()
                    if len(rows) >= limit:
                        break
            reader = _Reader(db)
            scored: list[tuple[float, int, Unit, tuple[Any, ...]]] = []
            for row in rows:
                unit = reader.unit(row[:-1])
                if unit is not None:
                    scored.append((_reranked(row[-1], unit.text, wanted), len(scored), unit, row))
            scored.sort(key=lambda item: (item[0], item[1]))
            order = _second_hop(db, [(item[0], item[2]) for item in scored], wanted)
            hits: list[Hit] = []
            taken: set[tuple[int, int]] = set()
            for i in order:  # one hit per message (entry): its best passage stands for it
                score, _, unit, row = scored[i]
                if (row[-3], unit.seq) in taken:
                    continue
                taken.add((row[-3], unit.seq))
                before = after = None
                if (
                    neighbours and row[9] == "history"
                ):  # an entry (a summary of its own): its other parts
                    before = reader.unit_at(row[-3], row[-2] - 1)
                    after = reader.unit_at(row[-3], row[-2] + 1)
                    before = before if before is not None and before.seq == unit.seq else None
                    after = after if after is not None and after.seq == unit.seq else None
                elif neighbours:  # the messages around it, not the message's own other passages
                    before = reader.message_unit(row[-3], unit.seq - 1, last=True)
                    after = reader.message_unit(row[-3], unit.seq + 1, last=False)
                hits.append(Hit(unit, score, before, after))
                if len(hits) == limit:
                    break
            return hits

        found: list[Hit] = self._guarded(work)
        return found

    def around(self, session: str, seq: int, *, before: int = 3, after: int = 3) -> list[Unit]:
        """The units of messages (or entries) seq-before .. seq+after of `session` (or HISTORY_LABEL)."""

        def work(db: sqlite3.Connection) -> list[Unit]:
            reader = _Reader(db)
            rows = db.execute(
                f"SELECT {_UNIT_COLUMNS} FROM units u JOIN sources s ON s.id = u.src "
                "WHERE s.session = ? AND u.seq BETWEEN ? AND ? ORDER BY u.src, u.n",
                (session, seq - before, seq + after),
            ).fetchall()
            return [u for u in map(reader.unit, rows) if u is not None]

        units: list[Unit] = self._guarded(work)
        return units

    def archives_of(self, keys: set[str] | frozenset[str]) -> list[str]:
        """The names of the indexed conversations /new archived of these keys, oldest first."""

        def work(db: sqlite3.Connection) -> list[str]:
            labels = db.execute("SELECT DISTINCT session FROM sources WHERE kind = 'session'")
            found = [
                label
                for (label,) in labels
                if (split := split_archived_name(label)) is not None and split[0] in keys
            ]
            return sorted(found, key=lambda label: stamp_order(label.rpartition("@")[2]))

        names: list[str] = self._guarded(work)
        return names

    def stats(self) -> dict[str, int]:
        """Units, sources, bytes indexed and orphaned rows (for the benchmarks)."""

        def work(db: sqlite3.Connection) -> dict[str, int]:
            units = db.execute("SELECT count(*) FROM units").fetchone()[0]
            sources, done = db.execute(
                "SELECT count(*), coalesce(sum(done), 0) FROM sources"
            ).fetchone()
            orphans = db.execute("SELECT value FROM meta WHERE key = 'orphans'").fetchone()[0]
            return {"units": units, "sources": sources, "bytes_indexed": done, "orphans": orphans}

        found: dict[str, int] = self._guarded(work)
        return found


_UNIT_COLUMNS = (
    "u.id, s.session, u.seq, u.part, u.ts, u.role, u.pos, u.len, s.path, s.kind, s.inode, s.done, "
    "s.fingerprint, u.src, u.n"
)


# A word in more units than this is left out of a query that has rarer words (the rerank still counts
# it in the units found): ranking every unit a word is in is what makes a query slow on a large archive
# (BM25 counts all of them). When every word is that common, the units holding all of them are taken,
# newest first, unranked.
_COMMON_DOCS = 5000


def _doc_counts(db: sqlite3.Connection, words: list[str], cap: int) -> list[int]:
    """How many units hold each word, counted up to `cap` + 1 (counting further is what is slow)."""
    return [
        db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM fts WHERE fts MATCH ? LIMIT ?)",
            (_match([word]), cap + 1),
        ).fetchone()[0]
        for word in words
    ]


def _unit_count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT coalesce(sum(n), 0) FROM sources").fetchone()[0])


def _without_common(db: sqlite3.Connection, terms: list[str]) -> tuple[list[str], list[str]]:
    """The terms without the common words, and the common words."""
    words = [t for t in terms if " " not in t.strip()]
    if not words or _unit_count(db) <= _COMMON_DOCS:
        return terms, []
    common = [
        w for w, count in zip(words, _doc_counts(db, words, _COMMON_DOCS)) if count > _COMMON_DOCS
    ]
    return [t for t in terms if t not in common], common


# The second hop. A question about two facts said in two places ("what is the cat we adopted called,
# and what is it allergic to?") often has them tied by a word the question does not say (the cat's
# name): among the units that match the question's other words equally well, the one that shares a
# rare word with the best hit is the likelier answer. Such a unit is strengthened by up to this much,
# by how rare the shared word is (only words in fewer units than the square root of their number).
_LINK_WEIGHT = 0.5
_LINK_WORD = re.compile(r"\w{3,}")
_LINK_CANDIDATES = 16  # words whose rarity is looked up, at most
_LINK_DOCS = 400  # a word in more units than this links nothing (and is counted no further)


def _link_words(text: str, asked: set[str]) -> set[str]:
    found = set(_LINK_WORD.findall(text.lower())) - _STOPWORDS
    return {w for w in found if _stem(w) not in asked}


def _second_hop(
    db: sqlite3.Connection, ranked: list[tuple[float, Unit]], words: list[str]
) -> list[int]:
    """The order of `ranked` (reranked candidates, best first) after the second hop: the best stays
    first; each other is strengthened by the rarest word it shares with the best."""
    if len(ranked) < 3:
        return list(range(len(ranked)))
    asked = {_stem(w) for w in words}
    first = _link_words(ranked[0][1].text, asked)
    shared = [
        first & _link_words(unit.text, asked) if i else set() for i, (_, unit) in enumerate(ranked)
    ]
    spread: dict[str, int] = {}
    for words_shared in shared:
        for word in words_shared:
            spread[word] = spread.get(word, 0) + 1
    # (the words shared with the fewest others first: a word in half of them links nothing)
    candidates = sorted(
        (w for w, c in spread.items() if c <= len(ranked) // 2), key=lambda w: (spread[w], w)
    )
    candidates = candidates[:_LINK_CANDIDATES]
    total = _unit_count(db)
    if not candidates or total < 4:
        return list(range(len(ranked)))
    cap = min(int(total**0.5), _LINK_DOCS)
    rarity = {
        word: math.log(total / df) / math.log(total)
        for word, df in zip(candidates, _doc_counts(db, candidates, cap))
        if 0 < df <= cap
    }

    def strength(i: int) -> float:
        return max((rarity.get(w, 0.0) for w in shared[i]), default=0.0)

    rest = sorted(
        range(1, len(ranked)), key=lambda i: (ranked[i][0] * (1.0 + _LINK_WEIGHT * strength(i)), i)
    )
    return [0, *rest]


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *_: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def _transaction(db: sqlite3.Connection) -> _Transaction:
    return _Transaction(db)


class _Reader:
    """Reads units' text back from their sources, checking first that each source is as indexed."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self._ok: dict[str, bool] = {}

    def _source_ok(self, path: str, inode: int, done: int, fingerprint: int) -> bool:
        if path not in self._ok:
            try:
                with open(path, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    self._ok[path] = (
                        st.st_ino == inode
                        and st.st_size >= done
                        and _fingerprint(fh, done) == fingerprint
                    )
            except OSError:
                self._ok[path] = False
        return self._ok[path]

    def unit(self, row: tuple[Any, ...]) -> Unit | None:
        uid, sess, seq, part, ts, role, pos, length, path, kind, inode, done, fingerprint = row[:13]
        if not self._source_ok(path, inode, done, fingerprint):
            return None
        try:
            with open(path, "rb") as fh:
                fh.seek(pos)
                data = fh.read(length)
        except OSError:
            return None
        passages = _texts_of(kind, data)
        if part >= len(passages):
            return None
        return Unit(uid, sess, seq, part, ts, role, mask_secrets(passages[part]))

    def message_unit(self, src: int, seq: int, *, last: bool) -> Unit | None:
        """Message (entry) `seq` of a source: its last passage (`last`), else its first."""
        row = self.db.execute(
            f"SELECT {_UNIT_COLUMNS} FROM units u JOIN sources s ON s.id = u.src "
            f"WHERE u.src = ? AND u.seq = ? ORDER BY u.part {'DESC' if last else 'ASC'} LIMIT 1",
            (src, seq),
        ).fetchone()
        return self.unit(row) if row else None

    def unit_at(self, src: int, n: int) -> Unit | None:
        row = self.db.execute(
            f"SELECT {_UNIT_COLUMNS} FROM units u JOIN sources s ON s.id = u.src "
            "WHERE u.src = ? AND u.n = ?",
            (src, n),
        ).fetchone()
        return self.unit(row) if row else None


# ---- a large build: session files read, parsed and masked in a helper process ------------------
#
# Parsing and masking are about half of a build's CPU, inserting into SQLite the other half: with
# more than these to read (a build from nothing, a large import) and no time budget, a helper
# process reads whole session files ahead of the one that inserts them. It only reads; every
# write (and so what a kill leaves) stays in this process, the same as without it.

_AHEAD_MIN_FILES = 64
_AHEAD_MIN_BYTES = 64 << 20
_AHEAD_FILES = 16  # session files handed to the helper ahead of the one being inserted


@dataclass(frozen=True)
class _Parsed:
    """A session file read from its start to its last newline, as _index_step would store it."""

    inode: int
    done: int
    fingerprint: int
    session: str
    seq: int
    pointer: int
    last_when: str
    rows: list[_Row]  # (their text left empty: `texts` holds it, masked and spaced)
    texts: list[str]


def _indexed_texts(rows: list[_Row]) -> list[str]:
    """The rows' texts as the words index takes them: secrets masked, CJK spaced."""
    return [_spaced(text) for text in _mask_many([row[6] for row in rows])]


def _parse_whole(path: str) -> _Parsed | None:
    """(In the helper process.) A session file of at most _COMMIT_BYTES, whole; None when it is
    longer, unreadable or has no whole line."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(_COMMIT_BYTES + 1)
    except OSError:
        return None
    end = data.rfind(b"\n") + 1
    if len(data) > _COMMIT_BYTES or end == 0:
        return None
    data = data[:end]
    rows: list[_Row] = []
    seq, pointer, last_when = _session_units(data, 0, 0, 0, "", rows)
    texts = _indexed_texts(rows)
    return _Parsed(
        st.st_ino,
        end,
        zlib.crc32(data[-_FINGERPRINT_BYTES:]),
        _session_key(data, path),
        seq,
        pointer,
        last_when,
        [(*row[:6], "") for row in rows],
        texts,
    )


def _helper_started(secrets: list[str], parent: int) -> None:
    """(In the helper process.) Mask the configured keys too, and end when the parent has ended
    (a kill -9 leaves no helper behind)."""
    remember_secrets(secrets)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    start_quiet(watch, name="recall-helper-watch")


class _ParsedAhead:
    """The helper process and the session files handed to it, by path."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self.pool = pool
        self.pending: dict[str, Future[_Parsed | None]] = {}
        self.handed: set[str] = set()  # (each file once: one it could not take is read here)

    @classmethod
    def start(cls) -> _ParsedAhead | None:
        if (os.cpu_count() or 1) < 2:
            return None
        try:  # (spawn: a fresh interpreter, whatever threads this process runs)
            pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_helper_started,
                initargs=(remembered_secrets(), os.getpid()),
            )
            return cls(pool)
        except (OSError, ValueError):
            return None

    def feed(self, queue: list[_Source]) -> None:
        for src in queue[: _AHEAD_FILES + 1]:
            if src.kind == "session" and src.path not in self.handed:
                self.handed.add(src.path)
                try:
                    self.pending[src.path] = self.pool.submit(_parse_whole, src.path)
                except RuntimeError:  # (the helper died: what it has not read is read here)
                    return

    def take(self, src: _Source) -> _Parsed | None:
        future = self.pending.pop(src.path, None)
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # (a helper that died or failed: this process reads the file itself)
            return None

    def stop(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)  # (it ends within the file it reads)


_MASK_JOIN = "\n\x00\n"


def _mask_many(texts: list[str]) -> list[str]:
    """mask_secrets of each text, in one pass over them all: joined by a separator no secret pattern
    can match inside; a mask that touched a separator is redone text by text (same result either way)."""
    if len(texts) < 2:
        return [mask_secrets(t) for t in texts]
    joined = _MASK_JOIN.join(texts)
    masked = mask_secrets(joined)
    if masked is joined or masked == joined:
        return texts
    parts = masked.split(_MASK_JOIN)
    return parts if len(parts) == len(texts) else [mask_secrets(t) for t in texts]


def _texts_of(kind: str, data: bytes) -> list[str]:
    """The passages of one message line or HISTORY.md entry, as they were indexed (before masking)."""
    if kind == "session":
        try:
            record = orjson.loads(data)
        except orjson.JSONDecodeError:
            return []
        return _passages(_message_text(record)) if isinstance(record, dict) else []
    return _passages(without_chunk_markers(data.decode("utf-8", "replace")).strip())


# ---- reading sources ------------------------------------------------------------------------------


_MARK_KEYS = ("mark_folder_mtime", "mark_journal_inode", "mark_journal_offset", "mark_scanned_at")


def _read_mark(db: sqlite3.Connection) -> Mark | None:
    """The journal mark the last complete catch-up kept (None: none yet, as in a new index)."""
    rows = dict(db.execute("SELECT key, value FROM meta WHERE key LIKE 'mark_%'").fetchall())
    if not all(isinstance(rows.get(key), int) for key in _MARK_KEYS):
        return None
    return Mark(*(int(rows[key]) for key in _MARK_KEYS))


def _unchanged(path: str, known: tuple[int, int] | None) -> bool:
    """Indexed to its end and not replaced since, by its stat alone: the cheap check that lets a
    search over thousands of sessions open only the files that grew (a rewrite has a new inode)."""
    if known is None:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return st.st_ino == known[0] and st.st_size == known[1]


def _fingerprint(fh: Any, done: int) -> int:
    if done <= 0:
        return 0
    start = max(0, done - _FINGERPRINT_BYTES)
    fh.seek(start)
    return zlib.crc32(fh.read(done - start))


def _fingerprint_of(data: bytes, base: int, fh: Any, done: int) -> int:
    if len(data) >= _FINGERPRINT_BYTES or base == 0:
        return zlib.crc32(data[-_FINGERPRINT_BYTES:]) if done else 0
    return _fingerprint(fh, done)


def _last_entry_start(data: bytes, end: int) -> int:
    i = data.rfind(b"\n[", 0, end - 1)
    while i >= 0:
        if STAMP_RE.match(data[i + 1 : i + 40].decode("utf-8", "replace")):
            return i + 1
        i = data.rfind(b"\n[", 0, i)
    return -1


def _session_key(data: bytes, path: str) -> str:
    """The session a file's units belong to: its key, or for a conversation /new archived, its
    name `<key>@<stamp>` (nanobot.paths), so its refs never mix with the key's live conversation."""
    key = _file_key(data, path)
    stamp = archived_file_stamp(path)
    return archived_name(key, stamp) if stamp is not None else key


def _file_key(data: bytes, path: str) -> str:
    first = data.split(b"\n", 1)[0]
    try:
        record = orjson.loads(first)
    except orjson.JSONDecodeError:
        record = None
    if (
        isinstance(record, dict)
        and record.get("_type") == "metadata"
        and isinstance(record.get("key"), str)
    ):
        return str(record["key"])
    stem = Path(path).stem
    if archived_file_stamp(path) is not None:
        stem = stem.rsplit(".", 1)[0]
    return stem.rsplit("-", 1)[0] if "-" in stem else stem


def _session_units(
    data: bytes, base: int, seq: int, pointer: int, last_when: str, rows: list[_Row]
) -> tuple[int, int, str]:
    """Append a row per passage of each message in `data` (whole lines, at byte `base` of the file);
    returns the new counters."""
    pos = base
    for raw in data.split(b"\n"):
        start = pos
        pos += len(raw) + 1
        if not raw.strip():
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a damaged line: the session store sets it aside; it was never a message
        if not isinstance(record, dict):
            continue
        kind = record.get("_type")
        if kind == "metadata":
            value = record.get("last_consolidated")
            if isinstance(value, int) and not isinstance(value, bool):
                pointer = value
            continue
        if kind is not None or not isinstance(record.get("role"), str):
            continue
        role = record["role"]
        when = _local(parse_timestamp(record.get("timestamp"))) or last_when
        last_when = when
        if role != "system":
            text = _message_text(record)
            if text.strip():
                for part, passage in enumerate(_passages(text)):
                    rows.append((seq, part, when, role, start, len(raw), passage))
        seq += 1
    return seq, pointer, last_when


_ENTRY_LINE = re.compile(rb"(?m)^\[")
_STAMP_B = re.compile(STAMP_RE.pattern.encode())


def _history_units(
    data: bytes, base: int, seq: int, last_when: str, last_role: str, rows: list[_Row]
) -> tuple[int, str, str]:
    """Append a row per passage of each HISTORY.md entry in `data` (whole entries, or the continuation
    of the last one, which keeps its stamp, at byte `base` of the file); returns the new counters."""
    starts = [m.start() for m in _ENTRY_LINE.finditer(data) if _STAMP_B.match(data, m.start())]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        raw = data[start:end]
        entry = without_chunk_markers(raw.decode("utf-8", "replace")).strip()
        if not entry:
            continue
        m = STAMP_RE.match(entry)
        if m is not None:
            y, mo, d, h, mi, sec = m.groups()
            try:
                last_when = _local(
                    datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec or 0))
                )
            except ValueError:
                pass
            first_line = entry.split("\n", 1)[0]
            last_role = "archive" if " RAW archive of " in first_line else "summary"
        role = last_role or "summary"
        for part, passage in enumerate(_passages(entry)):
            rows.append((seq, part, last_when, role, base + start, len(raw), passage))
        seq += 1
    return seq, last_when, last_role
