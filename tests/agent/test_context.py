"""ContextBuilder, directly: the system prompt, the runtime context and the request it builds."""

from __future__ import annotations

from pathlib import Path

import pytest
from nanobot.agent.context import ContextBuilder
from nanobot.memory.store import MemoryStore
from nanobot.messages import assistant, user
from nanobot.session.runtime_context import (
    RUNTIME_CONTEXT_KEY,
    RUNTIME_CONTEXT_OPEN,
    split_runtime_context,
)


class _Skills:
    def prompt_section(self) -> str:
        return "# Skills\n\n- weather: look up the forecast"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def test_the_system_prompt_holds_identity_bootstrap_files_memory_and_skills_in_that_order(ws):
    (ws / "SOUL.md").write_text("Be warm.\n")
    (ws / "AGENTS.md").write_text("Answer in Portuguese.\n")
    (ws / "TOOLS.md").write_text("   \n")  # empty files add no section
    memory = MemoryStore(ws)
    memory.write_memory("# Memory\n\n- Ana lives in Porto.\n", reason="test")
    prompt = ContextBuilder(ws, memory=memory, skills=_Skills()).system_prompt()
    order = [
        prompt.index(s)
        for s in (
            "# nanobot",
            "## AGENTS.md — last written by the user\n\nAnswer in Portuguese.",
            "## SOUL.md — last written by the user\n\nBe warm.",
            "# Memory (MEMORY.md)",
            "- Ana lives in Porto.",
            "# Skills",
        )
    ]
    assert order == sorted(order)
    assert "## TOOLS.md" not in prompt
    assert (
        '<untrusted-data source="MEMORY.md' in prompt
    )  # memory is fenced as data, not instructions
    assert str(ws) in prompt


def test_the_system_prompt_is_byte_identical_between_turns_and_carries_no_time(ws):
    builder = ContextBuilder(ws)
    first = builder.system_prompt()
    assert builder.system_prompt() == first
    assert "Current time" not in first and RUNTIME_CONTEXT_OPEN not in first


def test_a_key_pasted_into_a_workspace_file_never_reaches_the_prompt(ws):
    key = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    (ws / "USER.md").write_text(f"My OpenAI key is {key}\n")
    prompt = ContextBuilder(ws).system_prompt()
    assert key not in prompt and "My OpenAI key is" in prompt


def test_the_runtime_context_names_the_time_in_the_configured_zone_and_the_channel(ws):
    context = ContextBuilder(ws, timezone="Asia/Tokyo").runtime_context("cli", "direct")
    lines = context.splitlines()
    assert lines[0].startswith("Current time: ") and lines[0].endswith("(UTC+09:00)")
    assert lines[1:] == ["Channel: cli", "Chat ID: direct"]


def test_an_unknown_zone_falls_back_to_local_time(ws):
    assert (
        ContextBuilder(ws, timezone="Mars/Olympus")
        .runtime_context("cli", "x")
        .startswith("Current time: ")
    )


def test_user_message_returns_the_text_and_the_context_apart(ws):
    msg = ContextBuilder(ws).user_message("what's up?", channel="cron", chat_id="job-7")
    assert msg["role"] == "user" and msg["content"] == "what's up?"
    assert RUNTIME_CONTEXT_OPEN not in msg["content"]
    assert (
        msg[RUNTIME_CONTEXT_KEY].startswith("Current time: ")
        and "Channel: cron\nChat ID: job-7" in msg[RUNTIME_CONTEXT_KEY]
    )


def test_build_messages_sends_system_history_and_the_current_message_with_one_context_block(ws):
    builder = ContextBuilder(ws)
    history = [user("hi"), assistant("hello")]
    request = builder.build_messages(history, "and now?", system_prompt="SYSTEM")
    assert request[0] == {"role": "system", "content": "SYSTEM"} and request[1:3] == history
    current = request[3]
    assert set(current) == {"role", "content"}  # the stored-apart key is never a wire key
    context, text = split_runtime_context(current["content"])
    assert text == "and now?" and current["content"].count(RUNTIME_CONTEXT_OPEN) == 1
    assert context is not None and context.startswith("Current time: ")
    assert context.endswith("Channel: cli\nChat ID: direct")


def test_build_messages_without_text_is_the_system_prompt_and_history(ws):
    request = ContextBuilder(ws).build_messages([user("q")])
    assert [m["role"] for m in request] == ["system", "user"] and request[0]["content"].startswith(
        "# nanobot"
    )
