"""Durable file primitives: atomic rewrites, fsynced appends, and per-file OS locks."""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
import weakref
from pathlib import Path

from nanobot.errors import LockHeld

__all__ = [
    "atomic_write",
    "append_durably",
    "fsync_dir",
    "rotate_when_larger",
    "ExclusiveLock",
    "held_locks",
]


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


_HELD: weakref.WeakSet[ExclusiveLock] = weakref.WeakSet()
_POLL_SECONDS = 0.05


class ExclusiveLock:
    """An OS-level lock on `<path>.lock`, taken without waiting (or waiting up to `timeout` seconds).

    It is `flock(2)` on a file nanobot never removes: the kernel drops it when the process ends
    however it ends (a crash, SIGKILL), and the descriptor is not inherited by the commands nanobot
    starts. A waiter whose file was replaced between its open and its lock tries again on the file
    now at the path. `acquire()` raises `LockHeld` when another process holds it.
    """

    def __init__(self, path: Path, *, timeout: float = 0) -> None:
        self.path = Path(str(path) + ".lock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.timeout = timeout
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        deadline = time.monotonic() + self.timeout
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # not inheritable (PEP 446)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if time.monotonic() >= deadline:
                    raise LockHeld(self.path) from None
                time.sleep(_POLL_SECONDS)
                continue
            except BaseException:
                os.close(fd)
                raise
            if self._still_in_place(fd):
                self._fd = fd
                _HELD.add(self)
                return
            os.close(fd)  # locked a file someone removed meanwhile: lock the one now at the path

    def _still_in_place(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            _HELD.discard(self)
            os.close(fd)  # closing the only descriptor drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> ExclusiveLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # noqa: BLE001 - late in interpreter shutdown; the exit drops the lock anyway
            pass


def held_locks() -> list[ExclusiveLock]:
    """The locks this process holds now (the in-process CLI tests release what a command left held,
    as the end of its process would)."""
    return [lock for lock in list(_HELD) if lock.held]
