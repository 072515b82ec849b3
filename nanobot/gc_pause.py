"""The cyclic garbage collector, paused while a `nanobot` process loads its code.

A one-shot turn imports over 1,100 modules; the SDK alone makes about 130,000 objects, and nearly
none of them are garbage (about 800 objects after a full load). With the collector on, each new
batch of objects triggers another pass over the young ones and now and then over all of them:
about a tenth of the import's CPU. So the `nanobot` command pauses the collector as it starts
(`pause`), and `resume` turns it back on once the provider's SDK is loaded (the first request, or
the chat's prewarm), or RESUME_AFTER_S after the start if no SDK is loaded by then (a read-only
command, a gateway waiting for its first job).

`resume` first moves everything alive into the permanent generation (`gc.freeze`), so no later
collection walks the loaded code again; such objects are still freed when nothing refers to them,
and only the cyclic garbage made while loading (those ~800 objects) is never reclaimed.
Processes that only import nanobot (tests, scripts) are not affected.
"""

from __future__ import annotations

import gc
import threading
import time

from nanobot.threads import start_quiet

RESUME_AFTER_S = 10.0

_lock = threading.Lock()
_paused = False


def pause() -> None:
    """Turn the collector off until resume() (called here after RESUME_AFTER_S at the latest)."""
    global _paused
    with _lock:
        if _paused or not gc.isenabled():
            return
        gc.disable()
        _paused = True
    start_quiet(_resume_later, RESUME_AFTER_S, name="gc-resume")


def _resume_later(seconds: float) -> None:
    time.sleep(seconds)
    resume()


def resume() -> None:
    """Freeze what is loaded and turn the collector back on; a no-op unless pause() turned it off."""
    global _paused
    with _lock:
        if not _paused:
            return
        _paused = False
        gc.freeze()
        gc.enable()
