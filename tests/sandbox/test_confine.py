"""The confinement probes can start early on a background thread (sandbox.prefetch, called when
the assistant opens): the first choose() then waits for them and finds them done, once."""

from __future__ import annotations

import asyncio
import threading
import time
from functools import lru_cache

from nanobot.sandbox import choose, confine, prefetch


def test_a_choose_during_a_prefetch_waits_for_it_and_probes_once(monkeypatch):
    calls: list[str] = []

    @lru_cache(maxsize=8)
    def slow_probe(path_env: str) -> tuple[str | None, str]:
        calls.append(threading.current_thread().name)
        time.sleep(0.3)
        return "/usr/bin/bwrap", "bubblewrap 9.9"

    monkeypatch.setattr(confine.bwrap, "probe", slow_probe)
    prefetch("bwrap")
    got = choose("bwrap")
    assert got.mechanism == "bwrap" and got.detail == "bubblewrap 9.9"
    assert calls == ["confinement-probe"]  # the main thread's choose() did not probe again
    assert choose("bwrap") == got and calls == ["confinement-probe"]


def test_opening_the_assistant_starts_the_probe_before_the_session_loads(configure, monkeypatch):
    from nanobot.app import open_assistant
    from nanobot.config import load_config

    configure()
    seen: list[str] = []
    real = confine.choose

    def recording(mode: str = "auto", limits=None):
        seen.append(threading.current_thread().name)
        return real(mode, limits)

    monkeypatch.setattr(confine, "choose", recording)
    assistant = open_assistant(load_config(None), "cli:direct")
    try:
        assert seen[:1] == ["confinement-probe"]
    finally:
        asyncio.run(assistant.aclose())
