"""The usage ledger: one content-free JSON line per provider call, in <nanobot home>/usage/.

A record holds the time, the session key, the source (chat, one-shot, subagent, consolidation,
cron, heartbeat, memory-tidy), the cron job (or "heartbeat") it was spent for, the model, the prompt /
completion / cache-read / cache-write tokens as the provider reported them (or estimated, and
marked so), the duration and the outcome. Never message text, never a key.

Durability, and why there is no fsync per record: each record is one write(2) on an O_APPEND
descriptor, so the records of several processes (serve and a chat) never interleave, and a
kill -9 loses nothing already written (the bytes are the kernel's from then on). An fsync costs
1-10 ms on common disks, ten times the overhead this ledger may add to a call; what it would
protect against (a power cut) costs at most the last seconds of accounting, never the user's
words. So the file is fsynced when it is rotated and when the ledger closes. A torn last line
(a full disk) is skipped by readers, and the next record starts on a line of its own.

Bounded on disk: past ROTATE_BYTES the file becomes usage-<time>.jsonl, and only the newest
KEEP_FILES of those are kept (about 100 MB, half a million calls).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nanobot.fsio import fsync_dir
from nanobot.paths import PRIVATE_FILE_MODE, ensure_private_dir, nanobot_home

CURRENT = "usage.jsonl"
ROTATE_BYTES = 8 << 20  # about 40,000 records
KEEP_FILES = 12
OUTCOMES = ("ok", "error", "cancelled", "cut")


def ledger_dir() -> Path:
    return nanobot_home() / "usage"


@dataclass
class UsageRecord:
    """One provider call."""

    t: float  # when it ended, seconds since the epoch
    session: str  # the session key ("cli:direct", "cron:<id>", ...)
    source: str  # chat | one-shot | subagent | consolidation | cron | heartbeat | memory-tidy
    model: str  # provider/model as configured
    prompt: int = 0  # every prompt token, cache reads and writes included
    completion: int = 0
    cache_read: int = 0
    cache_write: int = 0
    estimated: bool = False  # the provider reported no usage: the counts are nanobot's estimate
    ms: int = 0  # how long the call took
    outcome: str = "ok"  # ok | error | cancelled | cut (a stream cut, then made again)
    job: str | None = (
        None  # the cron job id (or "heartbeat") the call was made for: background work
    )

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    @property
    def background(self) -> bool:
        return self.job is not None

    def to_line(self) -> str:
        # "t" first, so a reader can skip old lines without parsing them (see read_records)
        return (
            json.dumps(
                {
                    "t": round(self.t, 3),
                    "session": self.session,
                    "source": self.source,
                    "job": self.job,
                    "model": self.model,
                    "prompt": self.prompt,
                    "completion": self.completion,
                    "cacheRead": self.cache_read,
                    "cacheWrite": self.cache_write,
                    "estimated": self.estimated,
                    "ms": self.ms,
                    "outcome": self.outcome,
                },
                separators=(",", ":"),
                ensure_ascii=True,
            )
            + "\n"
        )

    @classmethod
    def from_json(cls, data: dict) -> UsageRecord:
        job = data.get("job")
        return cls(
            t=float(data["t"]),
            session=str(data.get("session", "")),
            source=str(data.get("source", "?")),
            model=str(data.get("model", "?")),
            prompt=int(data.get("prompt") or 0),
            completion=int(data.get("completion") or 0),
            cache_read=int(data.get("cacheRead") or 0),
            cache_write=int(data.get("cacheWrite") or 0),
            estimated=bool(data.get("estimated")),
            ms=int(data.get("ms") or 0),
            outcome=str(data.get("outcome", "ok")),
            job=str(job) if job is not None else None,
        )


def parse_line(line: bytes | str) -> UsageRecord | None:
    """A record, or None for a torn or foreign line."""
    try:
        data = json.loads(line)
        return UsageRecord.from_json(data) if isinstance(data, dict) else None
    except (ValueError, KeyError, TypeError):
        return None


def _line_time(line: bytes) -> float | None:
    """The "t" of a line written by to_line, without parsing the rest."""
    if not line.startswith(b'{"t":'):
        return None
    end = line.find(b",", 5)
    try:
        return float(line[5:end])
    except ValueError:
        return None


class Ledger:
    """Appends records to the current file; rotates it when it grows past `rotate_bytes`."""

    def __init__(
        self,
        directory: Path | None = None,
        *,
        rotate_bytes: int = ROTATE_BYTES,
        keep_files: int = KEEP_FILES,
    ) -> None:
        self.dir = Path(directory) if directory is not None else ledger_dir()
        self.path = self.dir / CURRENT
        self.rotate_bytes = rotate_bytes
        self.keep_files = keep_files
        self.failed = (
            ""  # why the last append failed (a full disk, a read-only home), "" when it did not
        )
        self._fd: int | None = None
        self._fresh_line = (
            False  # the file may end inside a torn line: start the next record on a new one
        )

    def append(self, record: UsageRecord) -> None:
        """Write one record; never raises (accounting must not break a turn), `failed` says why."""
        data = record.to_line().encode("ascii")
        try:
            fd = self._open()
            if self._fresh_line:
                data = b"\n" + data
            written = os.write(fd, data)
            self._fresh_line = written != len(data)
            st = os.fstat(fd)
            if st.st_size >= self.rotate_bytes:
                self._rotate(st)
            self.failed = ""
        except OSError as exc:
            self._fresh_line = True
            self.failed = f"{self.path}: {exc.strerror or exc}"

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.fsync(self._fd)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        if self._fd is not None:
            try:
                if os.stat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    return self._fd
            except FileNotFoundError:
                pass
            os.close(self._fd)  # another process rotated the file: write to the new one
            self._fd = None
        ensure_private_dir(self.dir)
        created = not self.path.exists()
        fd = os.open(
            self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE
        )
        size = os.fstat(fd).st_size
        self._fresh_line = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
        if created:
            fsync_dir(self.dir)
        self._fd = fd
        return fd

    def _rotate(self, st: os.stat_result) -> None:
        assert self._fd is not None
        try:
            if os.stat(self.path).st_ino != st.st_ino:
                return  # another process rotated it first
        except FileNotFoundError:
            return
        os.fsync(self._fd)
        target = (
            self.dir / f"usage-{time.time_ns():020d}-{os.getpid()}.jsonl"
        )  # unique, and sorts by time
        try:
            os.replace(self.path, target)
        except FileNotFoundError:  # another process rotated it just now
            return
        fsync_dir(self.dir)
        os.close(self._fd)
        self._fd = None
        for old in rotated_files(self.dir)[: -self.keep_files]:
            try:
                old.unlink()
            except OSError:
                pass


def rotated_files(directory: Path) -> list[Path]:
    """The rotated files, oldest first (their names sort by time)."""
    try:
        return sorted(p for p in directory.glob("usage-*.jsonl") if p.is_file())
    except OSError:
        return []


def ledger_files(directory: Path | None = None, *, since: float = 0.0) -> list[Path]:
    """Every file that may hold a record from `since` on, oldest first."""
    directory = Path(directory) if directory is not None else ledger_dir()
    files = [*rotated_files(directory), directory / CURRENT]
    out = []
    for path in files:
        try:
            if (
                path.stat().st_mtime >= since
            ):  # a file last written before `since` holds nothing newer
                out.append(path)
        except OSError:
            continue
    return out


def read_records(directory: Path | None = None, *, since: float = 0.0) -> Iterator[UsageRecord]:
    """Every readable record from `since` on, oldest file first; torn and foreign lines are skipped."""
    for path in ledger_files(directory, since=since):
        yield from read_records_in(path, since)


def read_records_in(path: Path, since: float = 0.0) -> Iterator[UsageRecord]:
    try:
        data = path.read_bytes()
    except OSError:
        return
    for line in data[_first_offset(data, since) :].splitlines():
        t = _line_time(line)
        if t is not None and t < since:
            continue  # most of a year's lines: skipped without parsing them
        record = parse_line(line)
        if record is not None and record.t >= since:
            yield record


# records are appended in time order, give or take a clock set back: the search for where `since`
# begins starts this much earlier, and every line after it is still checked
ORDER_SLACK_SECONDS = 86_400


def _first_offset(data: bytes, since: float) -> int:
    """An offset at a line start before which no record is newer than `since` (binary search)."""
    if since <= 0:
        return 0
    target = since - ORDER_SLACK_SECONDS
    lo, hi = 0, len(data)  # lines starting before lo are older than target; lo is a line start
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        start = data.find(b"\n", mid) + 1
        if start <= 0 or start >= hi:
            hi = mid
            continue
        end = data.find(b"\n", start)
        t = _line_time(data[start : end if end >= 0 else len(data)])
        if t is not None and t < target:
            lo = start
        else:
            hi = mid
    return lo


def day_start(now: float) -> float:
    """Local midnight of the day `now` falls in."""
    lt = time.localtime(now)
    return time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))


@dataclass
class DaySpend:
    """Tokens spent on one day: in total, on background work, per job."""

    start: float = 0.0
    total: int = 0
    background: int = 0
    calls: int = 0
    by_job: dict[str, int] = field(default_factory=dict)

    def add(self, record: UsageRecord) -> None:
        self.calls += 1
        self.total += record.tokens
        if record.job is not None:
            self.background += record.tokens
            self.by_job[record.job] = self.by_job.get(record.job, 0) + record.tokens


class TodaySpend:
    """Today's spend across every process that writes the ledger, kept current cheaply: each
    `refresh()` reads only the bytes the current file gained since the last one."""

    def __init__(
        self, directory: Path | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.dir = Path(directory) if directory is not None else ledger_dir()
        self.path = self.dir / CURRENT
        self._clock = clock
        self.day = DaySpend()
        self._day_end = 0.0  # the next local midnight
        self._fd: int | None = None  # the current file, as last read
        self._ino: int | None = None
        self._offset = 0

    def refresh(self) -> DaySpend:
        now = self._clock()
        if not self.day.start <= now < self._day_end:
            start = day_start(now)
            self._day_end = day_start(
                start + 36 * 3600
            )  # 36 h: past the next midnight, whatever DST does
            self._rescan(start)
            return self.day
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return self.day
        if (
            st.st_ino != self._ino
        ):  # rotated since: what the old file gained is in a rotated file now
            self._rescan(self.day.start)
        elif st.st_size > self._offset:
            self._read_new(st.st_size)
        return self.day

    def close(self) -> None:
        """Let the file go; the next refresh reads today's records again."""
        self._close_fd()
        self._day_end = 0.0

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _rescan(self, start: float) -> None:
        self._close_fd()
        self.day = DaySpend(start=start)
        self._ino, self._offset = None, 0
        for path in ledger_files(self.dir, since=start):
            if path.name != CURRENT:
                for record in read_records_in(path, start):
                    self.day.add(record)
                continue
            try:
                self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            st = os.fstat(self._fd)
            self._ino = st.st_ino
            self._offset = (
                _first_offset(os.pread(self._fd, st.st_size, 0), start) if st.st_size else 0
            )
            self._read_new(st.st_size)

    def _read_new(self, size: int) -> None:
        if self._fd is None:
            return
        try:
            data = os.pread(self._fd, size - self._offset, self._offset)
        except OSError:
            return
        end = data.rfind(b"\n") + 1  # an unfinished last line is read once it is whole
        for line in data[:end].splitlines():
            record = parse_line(line)
            if record is not None and record.t >= self.day.start:
                self.day.add(record)
        self._offset += end
