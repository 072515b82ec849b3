"""The recall journal: which session files were written, so a search need not stat them all.

`<sessions>/recall-changes.log` holds one line per write to a session file: the file's name. The
session store appends it after each append or rewrite (open, one write, close: no fsync, some
tens of µs; a failure never fails the turn, it deletes the journal instead, so it is not trusted). The
recall index reads it from the offset it read to, and brings up to date only the files it names.

It is a hint, never the truth: the index still checks each named file (inode, size, fingerprint),
and does a full scan of the folder (one stat per file) whenever the journal cannot vouch for
what it did not name:

- the journal is missing, was replaced, got shorter, or holds a line that is not a session file's
  name (damage, a torn write);
- the folder changed (its mtime): a file created, deleted or renamed, which is also how an atomic
  rewrite and most editors' saves land;
- the last full scan is more than FULL_SCAN_SECONDS old: a file changed in place by something
  that does not write the journal (an edit by hand that keeps the file, an older nanobot), or a
  line a power cut took from the unsynced journal, is found by then.

Everything here reads and writes plain files; the index keeps the `Mark` between searches.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "JOURNAL_NAME",
    "FULL_SCAN_SECONDS",
    "Mark",
    "note_change",
    "mark_for_full_scan",
    "changes_since",
]

JOURNAL_NAME = "recall-changes.log"
FULL_SCAN_SECONDS = 300  # the staleness bound for changes the journal cannot see (see above)
ROTATE_BYTES = 1 << 20  # a full scan starts a new journal when the old one is this long
_SETTLE_NS = 2_000_000_000  # a folder mtime this recent may hide a change made in the same tick
_NAME = re.compile(r"[^/\\\x00]+\.jsonl")


@dataclass(frozen=True)
class Mark:
    """Where the index stood after its last complete catch-up: the folder's mtime and the journal's
    inode and offset then, and when the last full scan started (seconds since the epoch)."""

    folder_mtime_ns: int  # -1: not to be trusted (the next search scans the folder)
    journal_inode: int
    journal_offset: int
    scanned_at: int


def journal_path(folder: Path) -> Path:
    return Path(folder) / JOURNAL_NAME


def note_change(session_file: Path) -> None:
    """Record that `session_file` was written (after the write: a search reading the line finds the
    bytes). Never raises: a journal that could not take the line is deleted, so it is not trusted."""
    journal = journal_path(Path(session_file).parent)
    line = Path(session_file).name.encode("utf-8", "surrogateescape") + b"\n"
    try:
        fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.write(fd, line) != len(line):
                raise OSError("short write")
        finally:
            os.close(fd)
    except OSError:
        try:
            os.unlink(journal)
        except OSError:
            pass


def mark_for_full_scan(folder: Path) -> Mark:
    """Taken just before a full scan of `folder` (what it sees is then covered): starts a journal
    when there is none or the old one is long, and notes the folder's mtime and the journal's end."""
    journal = journal_path(folder)
    now = time.time()
    try:
        if journal.stat().st_size >= ROTATE_BYTES:
            # (a writer that opened the old one before this unlink wrote its session file before it,
            # so the full scan that follows sees that file)
            journal.unlink()
    except OSError:
        pass
    try:
        os.close(os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600))
        folder_st = os.stat(folder)
        st = os.stat(journal)
    except OSError:
        return Mark(-1, 0, 0, int(now))
    mtime = folder_st.st_mtime_ns
    if time.time_ns() - mtime < _SETTLE_NS:
        mtime = -1  # a change in the same clock tick would leave it as it is: scan again next time
    return Mark(mtime, st.st_ino, st.st_size, int(now))


def changes_since(folder: Path, mark: Mark | None) -> tuple[list[str], Mark] | None:
    """The names of the session files written since `mark` (each once, in journal order) and the mark
    to keep once they are indexed; None when the journal cannot vouch for it: do a full scan."""
    if mark is None or mark.folder_mtime_ns < 0 or mark.journal_inode == 0:
        return None
    if time.time() - mark.scanned_at > FULL_SCAN_SECONDS or time.time() < mark.scanned_at:
        return None
    try:
        if os.stat(folder).st_mtime_ns != mark.folder_mtime_ns:
            return None
        with open(journal_path(folder), "rb") as fh:
            st = os.fstat(fh.fileno())
            if st.st_ino != mark.journal_inode or st.st_size < mark.journal_offset:
                return None
            fh.seek(mark.journal_offset)
            data = fh.read(st.st_size - mark.journal_offset)
    except OSError:
        return None
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next search
    try:
        lines = data[:end].decode("utf-8").split("\n")[:-1] if end else []
    except UnicodeDecodeError:
        return None
    if not all(_NAME.fullmatch(line) for line in lines):
        return None
    names = list(dict.fromkeys(lines))
    return names, Mark(
        mark.folder_mtime_ns, mark.journal_inode, mark.journal_offset + end, mark.scanned_at
    )
