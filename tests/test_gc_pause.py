"""The garbage collector is paused while the `nanobot` command loads its code (nanobot/gc_pause.py):
on again, with the loaded code frozen, once the SDK is in; on again after a while in any case."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time

import pytest
from nanobot import gc_pause

REPORT = ("import atexit, gc, sys\n"
          "atexit.register(lambda: print('GC', gc.isenabled(), gc.get_freeze_count(), file=sys.stderr))\n"
          "sys.argv = ['nanobot', *sys.argv[1:]]\n"
          "from nanobot.cli.app import run\nrun()\n")


def _gc_at_exit(*args: str) -> tuple[subprocess.CompletedProcess, bool, int]:
    """Run the real command (run(), as the console script does) and read the collector's state at exit."""
    out = subprocess.run([sys.executable, "-c", REPORT, *args], capture_output=True, text=True, timeout=60)
    line = next(ln for ln in out.stderr.splitlines() if ln.startswith("GC "))
    _, enabled, frozen = line.split()
    return out, enabled == "True", int(frozen)


@pytest.fixture
def restore_gc():
    yield
    gc_pause.resume()
    gc.unfreeze()
    gc.enable()


def test_a_one_shot_turn_turns_the_collector_back_on_once_the_sdk_is_loaded(configure, fake_llm, isolated_home):
    configure()
    from nanobot.fakellm import Reply

    fake_llm.script(Reply.text("hello there"))
    out, enabled, frozen = _gc_at_exit("agent", "-m", "hi")
    assert out.returncode == 0 and "hello there" in out.stdout, out.stderr[-2000:]
    assert enabled  # resumed by the first request, long before the 10 s fallback
    assert frozen > 50_000  # the loaded code (the SDK's types among it) no longer walked by collections
    saved = [json.loads(line) for path in (isolated_home / "sessions").glob("*.jsonl")
             for line in path.read_text().splitlines()]
    assert [m.get("content") for m in saved if m.get("role") == "assistant"] == ["hello there"]


def test_a_command_that_loads_no_sdk_leaves_the_collector_paused_only_briefly(isolated_home):
    out, enabled, frozen = _gc_at_exit("--version")
    assert out.returncode == 0 and out.stdout.startswith("nanobot ")
    assert not enabled and frozen == 0  # a short command ends inside the pause: nothing was collected


def test_the_pause_ends_by_itself(monkeypatch, restore_gc):
    monkeypatch.setattr(gc_pause, "RESUME_AFTER_S", 0.05)
    gc_pause.pause()
    assert not gc.isenabled()
    deadline = time.monotonic() + 5
    while not gc.isenabled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gc.isenabled() and gc.get_freeze_count() > 0


def test_the_chat_prewarm_ends_the_pause(monkeypatch, restore_gc):
    from nanobot.config import ResolvedModel
    from nanobot.providers.factory import DeferredProvider
    from nanobot.providers.registry import find

    monkeypatch.setattr(gc_pause, "RESUME_AFTER_S", 60.0)
    spec = find("custom")
    assert spec is not None
    provider = DeferredProvider(ResolvedModel(spec=spec, model="m", api_key="k", api_base="http://127.0.0.1:9/v1",
                                              extra_headers={}))
    gc_pause.pause()
    provider.prewarm()
    deadline = time.monotonic() + 30
    while not gc.isenabled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gc.isenabled()


def test_importing_nanobot_does_not_pause_the_collector():
    code = "import gc, nanobot.cli.app, nanobot.app, nanobot.providers.factory; print('ON', gc.isenabled())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "ON True" in out.stdout, out.stderr
