"""ExclusiveLock: one holder across processes, dropped by the kernel when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from nanobot.errors import LockHeld
from nanobot.fsio import ExclusiveLock, held_locks

# Takes the lock on argv[1], says so, then does what argv[2] says: "hold" (until killed), or
# "spawn" (start a long-lived child that inherits nothing, then release and sleep).
_HOLDER = textwrap.dedent("""
    import subprocess, sys, time
    from pathlib import Path
    from nanobot.fsio import ExclusiveLock
    lock = ExclusiveLock(Path(sys.argv[1]))
    lock.acquire()
    if sys.argv[2] == "spawn":
        child = subprocess.Popen(["sleep", "30"], close_fds=False)  # only close-on-exec guards the lock
        lock.release()
        print(child.pid, flush=True)
    else:
        print("held", flush=True)
    time.sleep(30)
""")


def _holder(path: Path, what: str = "hold") -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path), what], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    return p, p.stdout.readline().strip()


def test_a_lock_another_process_holds_is_refused_and_free_once_that_process_is_killed(
    tmp_path: Path,
) -> None:
    target = tmp_path / "session.jsonl"
    holder, said = _holder(target)
    try:
        assert said == "held"
        lock = ExclusiveLock(target)
        with pytest.raises(LockHeld) as refused:
            lock.acquire()
        assert refused.value.lock_file == str(target) + ".lock"
        assert not lock.held
        started = time.monotonic()
        with pytest.raises(LockHeld):
            ExclusiveLock(target, timeout=0.3).acquire()
        assert time.monotonic() - started >= 0.3  # it waited before giving up
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        lock.acquire()  # the kernel dropped the dead holder's lock
        assert lock.held and lock in held_locks()
        lock.release()
        assert not lock.held and lock not in held_locks()
    finally:
        holder.kill()
        holder.wait()


def test_a_waiter_gets_the_lock_when_the_holder_lets_go(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    holder, _ = _holder(target)
    try:
        waiter = ExclusiveLock(target, timeout=10)
        time.sleep(0.2)
        killer = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill {holder.pid}"])
        started = time.monotonic()
        waiter.acquire()
        assert 0.2 < time.monotonic() - started < 5
        assert waiter.held
        waiter.release()
        killer.wait()
    finally:
        holder.kill()
        holder.wait()


def test_a_command_started_while_the_lock_was_held_does_not_keep_it(tmp_path: Path) -> None:
    target = tmp_path / "session.jsonl"
    holder, child_pid = _holder(target, "spawn")
    try:
        assert os.path.exists(f"/proc/{child_pid}")  # the child still runs; the holder released
        with ExclusiveLock(target) as lock:
            assert lock.held
    finally:
        holder.kill()
        holder.wait()
        os.kill(int(child_pid), signal.SIGKILL)


def test_a_lock_dropped_without_release_is_freed_with_its_object(tmp_path: Path) -> None:
    target = tmp_path / "runner"
    lock = ExclusiveLock(target)
    lock.acquire()
    del lock
    again = ExclusiveLock(target)
    again.acquire()
    assert again.held
    again.release()
