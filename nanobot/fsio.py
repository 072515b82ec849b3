"""Durable file primitives: atomic rewrites, fsynced appends, and per-file OS locks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["atomic_write", "append_durably", "fsync_dir", "rotate_when_larger", "ExclusiveLock", "Timeout"]


def fsync_dir(path: Path) -> None:
    """fsync a folder so a rename or a new file inside it survives a crash."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: str | bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data`: temp file in the same folder, fsync, rename, fsync folder.

    Readers see either the old file or the new one, never a mix. `mode` sets permissions
    before the data is written (so a key file is never briefly world-readable).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def append_durably(path: Path, data: str | bytes) -> None:
    """Append `data` to `path` and fsync before returning (creates the file if needed).

    All or nothing: when the write fails (disk full, I/O error) the file is truncated back to
    its old length before the OSError is raised, so no torn line is left behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # logs hold conversations
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(payload)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        except OSError:
            # a full disk can take half a record: cut back to the last whole one, then report
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def rotate_when_larger(path: Path, limit: int) -> None:
    """When an append-only log passes `limit` bytes, it becomes `<name>.1` (replacing the older one)."""
    try:
        if path.stat().st_size <= limit:
            return
    except FileNotFoundError:
        return
    os.replace(path, path.with_name(path.name + ".1"))
    fsync_dir(path.parent)


class ExclusiveLock:
    """An OS-level lock on `<path>.lock`, taken without waiting (or waiting up to `timeout` seconds).

    `acquire()` raises `filelock.Timeout` when another process holds it.
    """

    def __init__(self, path: Path, *, timeout: float = 0) -> None:
        self.path = Path(str(path) + ".lock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = FileLock(str(self.path), timeout=timeout, thread_local=False, mode=0o600)

    def acquire(self) -> None:
        self._lock.acquire()

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release()

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def __enter__(self) -> ExclusiveLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
