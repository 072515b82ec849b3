"""Background threads that never take a signal.

The kernel hands a signal sent to the process (Ctrl-C's SIGINT, SIGTERM) to any thread that does
not block it. Python runs its handlers on the main thread in any case, but a main thread waiting
in a plain blocking call (a lock, a sleep) is only woken when the signal lands on it. So a
short-lived helper thread (the SDK or TLS prewarm, the collector's resume timer) blocks every
signal first, and signals always reach the main thread.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any


def start_quiet(target: Callable[..., Any], *args: Any, name: str) -> threading.Thread:
    """Start a daemon thread running target(*args) with every signal blocked."""

    def run() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        target(*args)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
