"""Tool arguments nested too deep or too long are a tool error the model reads, never a crash
(issue 32, attack 8): the call is not run, the turn goes on, both protocols, streamed or not."""

from __future__ import annotations

import asyncio
import json

import pytest
from nanobot.app import open_assistant
from nanobot.config import load_config
from nanobot.fakellm import Reply
from nanobot.policy.arguments import MAX_CHARS, clip_depth, text_problem, value_problem

from cli_runner import run_cli


def _deep(depth: int) -> str:
    return '{"path": "deep.txt", "content": "a", "extra": ' + "[" * depth + "]" * depth + "}"


def _turn(cfg_path, stream: bool):
    async def go():
        assistant = open_assistant(load_config(cfg_path), "cli:direct", stream=stream)
        try:
            return await assistant.conversation.send("write it")
        finally:
            await assistant.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("arguments", ["deep-500", "deep-5000", "huge"])
def test_deep_or_huge_arguments_are_a_tool_error_not_a_crash(
    configure, fake_llm, isolated_home, protocol, stream, arguments
):
    cfg_path = configure(protocol)
    ws = isolated_home / "workspace"
    raw = (
        json.dumps({"path": "deep.txt", "content": "x" * (MAX_CHARS + 10)})
        if arguments == "huge"
        else _deep(int(arguments.split("-")[1]))
    )
    fake_llm.script(
        Reply.tool_calls([("write_file", raw)]),
        Reply.tool_calls([("write_file", {"path": "fine.txt", "content": "ok"})]),
        Reply.text("done"),
    )
    outcome = _turn(cfg_path, stream)
    assert outcome.content == "done"  # the turn went on
    assert not (ws / "deep.txt").exists()  # the call was not run
    assert (ws / "fine.txt").read_text() == "ok"  # the next one was
    told = [m["content"] for m in fake_llm.requests[1].messages if m.get("role") == "tool"]
    if protocol == "anthropic":
        told = [
            b["content"]
            for m in fake_llm.requests[1].messages
            if isinstance(m.get("content"), list)
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]
    assert len(told) == 1 and ("levels deep" in str(told) or "characters long" in str(told))
    assert len(json.dumps(fake_llm.requests[1].body)) < 100_000  # the huge text was not sent back
    fake_llm.assert_all_valid()


def test_one_shot_survives_arguments_800_levels_deep(configure, fake_llm, isolated_home):
    configure()
    fake_llm.script(Reply.tool_calls([("write_file", _deep(800))]), Reply.text("done"))
    result = run_cli("agent", "-m", "write it")
    assert result.returncode == 0 and "done" in result.stdout, result.stderr
    assert not (isolated_home / "workspace" / "deep.txt").exists()


def test_the_limits_are_checked_without_recursion():
    deep = "[" * 200_000 + "]" * 200_000  # far past any recursion limit
    assert "levels deep" in text_problem(deep, max_chars=10**7)
    value: list = []
    for _ in range(100_000):
        value = [value]
    assert "levels deep" in value_problem(value)
    assert json.loads(clip_depth('{"a": [[["x"]]], "b": "[{"}', 2)) == {
        "a": ["[nanobot: nested too deep, cut here]"],
        "b": "[{",
    }
    assert (
        value_problem({"a": [1, {"b": "c"}]}) is None
        and text_problem('{"a": "[[[[["}', limit=2) is None
    )
