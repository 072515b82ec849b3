"""nanobot's background threads block every signal (nanobot/threads.py), so Ctrl-C and SIGTERM
always land on the main thread: read from the kernel's own record of each thread's mask."""

from __future__ import annotations

import signal
import threading

from nanobot.threads import start_quiet


def _blocked(tid: int) -> set[int]:
    """The signals the kernel says thread `tid` of this process blocks (/proc/self/task/<tid>/status)."""
    with open(f"/proc/self/task/{tid}/status") as fh:
        mask = int(next(line for line in fh if line.startswith("SigBlk:")).split()[1], 16)
    return {n for n in range(1, 65) if mask & (1 << (n - 1))}


def test_a_quiet_thread_blocks_ctrl_c_and_sigterm_and_runs_its_target():
    seen: dict[str, object] = {}
    ready, done = threading.Event(), threading.Event()

    def work(value: int) -> None:
        seen["tid"] = threading.get_native_id()
        seen["value"] = value
        ready.set()
        done.wait(5)

    thread = start_quiet(work, 42, name="quiet-test")
    assert ready.wait(5)
    try:
        blocked = _blocked(int(seen["tid"]))  # type: ignore[arg-type]
        assert {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} <= blocked
        assert seen["value"] == 42 and thread.daemon and thread.name == "quiet-test"
        assert signal.SIGINT not in _blocked(
            threading.get_native_id()
        )  # the caller's mask is its own
    finally:
        done.set()
        thread.join(5)


def test_the_prewarm_thread_is_quiet(monkeypatch, tmp_path):
    """The thread nanobot starts for the TLS context while the SDK is imported."""
    from nanobot import tls

    started: list[str] = []
    real = tls.start_quiet

    def recording(target, *args, name):
        started.append(name)
        return real(target, *args, name=name)

    monkeypatch.setattr(tls, "start_quiet", recording)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # a context not built yet in this process
    tls.prewarm_tls_context()
    assert started == ["tls-prewarm"]
