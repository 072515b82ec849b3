"""MiniMax's reasoning_details (its OpenAI-compatible API with reasoning_split): captured from the
stream and sent back whole with the turn's assistant messages, as MiniMax's guide asks."""

from __future__ import annotations

import asyncio
import json

from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore

THOUGHT = "The user wants the files. I will list the directory first."


def _minimax(home, base: str, **provider) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "minimax/MiniMax-M2"}},
                "providers": {
                    "minimax": {"apiKey": "sk-minimax-test-123456", "apiBase": base, **provider}
                },
            }
        )
    )
    (home / "config.json").chmod(0o600)


DETAILS = [
    {
        "type": "reasoning.text",
        "id": "reasoning-text-1",
        "format": "MiniMax-response-v1",
        "index": 0,
        "text": THOUGHT,
    }
]


def test_minimax_reasoning_details_go_back_whole_with_the_tool_call(
    nanobot_run, fake_llm, isolated_home
):
    _minimax(isolated_home, fake_llm.openai_base_url)
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})], reasoning=THOUGHT, reasoning_details=True),
        Reply.text("Nothing here yet."),
        Reply.text("Still nothing."),
    )
    assert nanobot_run("agent", "-m", "what is here?").returncode == 0
    first, second = fake_llm.requests[:2]
    assert (
        first.body["reasoning_split"] is True
    )  # asked for, so the thinking comes apart from the answer
    [call] = [m for m in second.messages if m.get("tool_calls")]
    assert call["reasoning_details"] == DETAILS
    assert "reasoning_content" not in call  # MiniMax gets its own field, not DeepSeek's
    # on disk with the call; the next turn starts afresh (MiniMax keeps thinking within a turn)
    saved = [m for m in SessionStore().load("cli:direct").messages if m.get("tool_calls")]
    assert saved[0]["reasoning_details"][0]["text"] == THOUGHT
    assert nanobot_run("agent", "-m", "and now?").returncode == 0
    assert not [m for m in fake_llm.requests[2].messages if "reasoning_details" in m]
    fake_llm.assert_all_valid()


def test_minimax_streamed_reasoning_details_are_joined_and_sent_back(tmp_path, fake_llm):
    from nanobot.app import build_provider
    from nanobot.config import load_config
    from nanobot.messages import tool_result, user

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "minimax/MiniMax-M2"}},
                "providers": {
                    "minimax": {"apiKey": "sk-minimax-0001", "apiBase": fake_llm.openai_base_url}
                },
            }
        )
    )
    provider = build_provider(load_config(path, environ={}))
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})], reasoning=THOUGHT, reasoning_details=True),
        Reply.text("done"),
    )
    shown: list[str] = []

    async def turn() -> None:
        try:
            messages = [user("what is here?")]
            response = await provider.chat(messages, max_tokens=100, on_delta=shown.append)
            call = response.to_message()
            messages += [call, tool_result(response.tool_calls[0].id, "list_dir", "(empty)")]
            await provider.chat(messages, max_tokens=100, on_delta=shown.append)
        finally:
            await provider.aclose()

    asyncio.run(turn())
    assert fake_llm.requests[0].body["stream"] is True
    assert THOUGHT not in "".join(shown)  # thinking is not the answer
    [call] = [m for m in fake_llm.requests[1].messages if m.get("tool_calls")]
    assert call["reasoning_details"] == DETAILS  # the streamed pieces, whole again
    fake_llm.assert_all_valid()


def test_minimax_reasoning_split_can_be_turned_off_in_extra_body(
    nanobot_run, fake_llm, isolated_home
):
    _minimax(isolated_home, fake_llm.openai_base_url, extraBody={"reasoning_split": False})
    fake_llm.script(Reply.text("ok"))
    assert nanobot_run("agent", "-m", "hi").returncode == 0
    assert fake_llm.requests[0].body["reasoning_split"] is False


def test_other_servers_get_no_reasoning_details_back(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})], reasoning=THOUGHT, reasoning_details=True),
        Reply.text("ok"),
    )
    assert nanobot_run("agent", "-m", "what is here?").returncode == 0
    assert "reasoning_split" not in fake_llm.requests[0].body
    assert not [m for m in fake_llm.requests[1].messages if "reasoning_details" in m]


def test_streamed_details_join_whether_pieces_continue_or_repeat_the_text_so_far():
    from nanobot.providers.openai_compat import add_details

    continued: list[dict] = []
    for piece in ("The user", " is asking", " how I am."):
        add_details(continued, [{"type": "reasoning.text", "index": 0, "text": piece}])
    repeated: list[dict] = []
    for piece in ("The user", "The user is asking", "The user is asking how I am."):
        add_details(repeated, [{"type": "reasoning.text", "index": 0, "text": piece}])
    assert (
        continued
        == repeated
        == [{"type": "reasoning.text", "index": 0, "text": "The user is asking how I am."}]
    )
