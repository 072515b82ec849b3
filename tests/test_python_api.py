"""The Python API: the names `nanobot` exports open an assistant and run a turn (docs/python-api.md)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import nanobot
import pytest
from nanobot.fakellm import Reply

DOC = Path(__file__).parent.parent / "docs" / "python-api.md"


def test_every_exported_name_is_there_and_documented():
    page = DOC.read_text(encoding="utf-8")
    for name in nanobot.__all__:
        assert getattr(nanobot, name) is not None
        assert name == "__version__" or f"`{name}" in page, name
    assert issubclass(nanobot.MissingKeyError, nanobot.NanobotError)
    with pytest.raises(AttributeError):
        nanobot.open_assistent  # noqa: B018  # a misspelt name fails as on any module


def test_the_documented_example_runs_a_turn_against_the_fake_server(
    configure, fake_llm, isolated_home
):
    configure()
    (isolated_home / "workspace").mkdir(parents=True, exist_ok=True)
    fake_llm.script(Reply.tool_calls([("list_dir", {"path": "."})]), Reply.text("Only notes.md."))
    example = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S).group(1)
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ['tool: list_dir(".")', "Only notes.md."]
    assert [r.messages[-1]["role"] for r in fake_llm.requests] == [
        "user",
        "tool",
    ]  # the tool ran, its result sent
    saved = [
        json.loads(line)
        for path in (isolated_home / "sessions").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert [m.get("content") for m in saved if m.get("role") == "assistant"][-1] == "Only notes.md."


def test_a_turn_through_the_public_names_reports_events_and_the_outcome(configure, fake_llm):
    configure()
    fake_llm.script(Reply.text("Hello from the fake model."))
    events: list[nanobot.Event] = []

    async def go() -> nanobot.TurnOutcome:
        assistant = nanobot.open_assistant(nanobot.load_config(), "cli:direct", stream=True)
        try:
            with pytest.raises(
                nanobot.NanobotError
            ):  # the session is locked while an assistant holds it
                nanobot.open_assistant(nanobot.load_config(), "cli:direct")
            return await assistant.conversation.send("hi", emit=events.append)
        finally:
            await assistant.aclose()

    outcome = asyncio.run(go())
    assert (
        outcome.stop_reason is nanobot.StopReason.DONE
        and outcome.content == "Hello from the fake model."
    )
    assert (
        "".join(e.text for e in events if isinstance(e, nanobot.TextDelta))
        == "Hello from the fake model."
    )
    assert fake_llm.requests[-1].messages[-1]["content"].endswith("hi")


def test_a_missing_key_is_a_nanobot_error_with_a_hint(isolated_home):
    with pytest.raises(nanobot.MissingKeyError) as caught:
        nanobot.open_assistant(
            nanobot.load_config(overrides={"agents.defaults.model": "openai/gpt-4.1"}), "cli:direct"
        )
    assert caught.value.hint and "OPENAI_API_KEY" in caught.value.hint


def test_importing_nanobot_loads_none_of_the_api_until_asked():
    code = "import sys, nanobot; print(sorted(m for m in sys.modules if m.startswith('nanobot')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (
        done.stdout.strip() == "['nanobot']"
    )  # every `nanobot` command starts as cheaply as before
