"""The save policy: what of a turn reaches the session file, in what form, and how it is sent again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.runtime_context import (
    RUNTIME_CONTEXT_CLOSE,
    RUNTIME_CONTEXT_KEY,
    RUNTIME_CONTEXT_OPEN,
    strip_runtime_context,
    user_with_context,
    with_runtime_context,
)
from nanobot.session.save_policy import MAX_TOOL_RESULT_CHARS, TurnCheckpoint, as_sent, save_turn
from nanobot.session.store import SessionStore


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "sessions")


def records(path: Path) -> list[dict]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def turn(i: int) -> list[dict]:
    return [user(f"question {i}"), assistant(f"answer {i}")]


def saved(store: SessionStore, key: str = "k") -> list[dict]:
    return [r for r in records(store.path_for(key)) if r.get("_type") != "metadata"]


def test_strip_runtime_context():
    text = with_runtime_context("Current Time: 2026-03-01 10:00\nChannel: cli", "hello\n\nworld")
    assert text.startswith(RUNTIME_CONTEXT_OPEN + "\n") and f"\n{RUNTIME_CONTEXT_CLOSE}\n\n" in text
    assert strip_runtime_context(text) == "hello\n\nworld"
    assert strip_runtime_context("plain") == "plain"
    assert (
        strip_runtime_context(f"{RUNTIME_CONTEXT_OPEN}\nno close\nhello")
        == f"{RUNTIME_CONTEXT_OPEN}\nno close\nhello"
    )
    assert strip_runtime_context(
        f"say {RUNTIME_CONTEXT_OPEN}\nx\n{RUNTIME_CONTEXT_CLOSE}\n\nhi"
    ).startswith("say")


def test_save_turn_strips_runtime_context_from_user_message(store):
    session = store.open("k")
    save_turn(
        store,
        session,
        [user(with_runtime_context("Time: now", "what's up?")), assistant("not much")],
    )
    assert [m["content"] for m in saved(store)] == ["what's up?", "not much"]
    store.close(session)


def test_save_turn_drops_user_message_that_was_only_context(store):
    session = store.open("k")
    save_turn(store, session, [user(with_runtime_context("Time: now", "")), assistant("hi")])
    assert [m["role"] for m in saved(store)] == ["assistant"]
    store.close(session)


def test_save_turn_truncates_long_tool_results_with_marker(store):
    session = store.open("k")
    big = "x" * (MAX_TOOL_RESULT_CHARS + 1234)
    save_turn(
        store,
        session,
        [
            user("q"),
            assistant(None, [tool_call("A", "f", {})]),
            tool_result("A", "f", big),
            tool_result("B", "f", "y" * MAX_TOOL_RESULT_CHARS),
        ],
    )
    stored = saved(store)
    assert (
        stored[2]["content"]
        == "x" * MAX_TOOL_RESULT_CHARS + "\n... [truncated: 1234 more characters]"
    )
    assert stored[3]["content"] == "y" * MAX_TOOL_RESULT_CHARS
    store.close(session)


def test_save_turn_skips_empty_assistant_messages(store):
    session = store.open("k")
    save_turn(
        store,
        session,
        [
            user("q"),
            assistant(""),
            assistant("  "),
            assistant(None),
            assistant(None, [tool_call("A", "f", {})]),
            assistant("real"),
        ],
    )
    assert [(m["role"], m.get("content")) for m in saved(store)] == [
        ("user", "q"),
        ("assistant", None),
        ("assistant", "real"),
    ]
    store.close(session)


def test_save_turn_skip_counts_messages_at_the_start(store):
    session = store.open("k")
    injected = assistant("[Subagent 'scan' finished] 3 files found")
    save_turn(store, session, [injected, assistant("Here is what the helper found")], skip=1)
    assert [m["content"] for m in saved(store)] == ["Here is what the helper found"]
    store.close(session)


def test_save_turn_replaces_inline_images_with_placeholder(store):
    session = store.open("k")
    png = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    content = [
        {**png, "path": "/tmp/cat.png"},
        png,
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        {"type": "text", "text": "what are these?"},
    ]
    save_turn(store, session, [user(content)])
    stored = saved(store)[0]["content"]
    assert "base64" not in json.dumps(stored)
    assert stored[0] == {"type": "text", "text": "[image: /tmp/cat.png]"}
    assert stored[1] == {"type": "text", "text": "[image: inline image]"}
    assert stored[2]["type"] == "image_url"
    store.close(session)


def test_save_turn_collapses_text_only_parts_and_strips_context(store):
    session = store.open("k")
    content = [
        {"type": "text", "text": with_runtime_context("Time: now", "describe")},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"},
            "_path": "shot.jpg",
        },
    ]
    save_turn(store, session, [user(content)])
    assert saved(store)[0]["content"] == "describe\n[image: shot.jpg]"
    store.close(session)


def test_save_turn_adds_timestamp_and_keeps_existing(store):
    session = store.open("k")
    save_turn(
        store,
        session,
        [{"role": "user", "content": "q", "timestamp": "2020-01-01T00:00:00"}, assistant("a")],
    )
    stored = saved(store)
    assert stored[0]["timestamp"] == "2020-01-01T00:00:00" and stored[1]["timestamp"]
    store.close(session)


def test_save_turn_does_not_mutate_callers_messages(store):
    session = store.open("k")
    messages = [user(with_runtime_context("ctx", "q")), tool_result("A", "f", "z" * 20_000)]
    snapshot = json.dumps(messages)
    save_turn(store, session, messages)
    assert json.dumps(messages) == snapshot
    store.close(session)


def test_checkpoint_saves_each_step_once(store):
    session = store.open("k")
    store.append(session, turn(1))
    history = session.get_history()
    request = [
        {"role": "system", "content": "sys"},
        *history,
        user(with_runtime_context("ctx", "run ls")),
    ]
    checkpoint = TurnCheckpoint(store, session, skip=1 + len(history))
    checkpoint.save(request)  # the user message is on disk before the LLM is called
    assert saved(store)[-1]["content"] == "run ls"
    request += [
        assistant(None, [tool_call("A", "exec", {"cmd": "ls"})]),
        tool_result("A", "exec", "a.txt"),
    ]
    checkpoint.save(request)
    request.append(assistant("There is a.txt"))
    checkpoint.save(request)
    checkpoint.save(request)  # nothing new: nothing written
    assert [m["role"] for m in saved(store)] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert len(session.messages) == 6
    store.close(session)
    assert os.path.getsize(store.path_for("k")) > 0


def test_non_json_values_are_stored_as_text_rather_than_losing_the_turn(store):
    session = store.open("k")
    save_turn(store, session, [user("q"), tool_result("A", "f", Path("/tmp/x"))])
    store.close(session)
    assert saved(store)[1]["content"] == "/tmp/x"


def test_a_user_message_keeps_its_context_apart_on_disk_and_is_sent_with_one_block(store):
    session = store.open("k")
    save_turn(
        store,
        session,
        [user_with_context("what's up?", "Current time: 2026-03-01 10:00"), assistant("not much")],
    )
    stored = saved(store)[0]
    assert (
        stored["content"] == "what's up?"
        and stored[RUNTIME_CONTEXT_KEY] == "Current time: 2026-03-01 10:00"
    )
    sent = session.get_history()[0]
    assert sent == {
        "role": "user",
        "content": with_runtime_context("Current time: 2026-03-01 10:00", "what's up?"),
    }
    assert sent["content"].count(RUNTIME_CONTEXT_OPEN) == 1
    store.close(session)


def test_a_message_that_is_only_its_context_is_not_saved(store):
    session = store.open("k")
    save_turn(store, session, [user_with_context("  ", "Current time: now"), assistant("hi")])
    assert [m["role"] for m in saved(store)] == ["assistant"]
    store.close(session)


def test_as_sent_caps_an_oversized_stored_tool_result_and_leaves_others_alone():
    big = tool_result("A", "f", "x" * (MAX_TOOL_RESULT_CHARS + 5))
    assert as_sent(big)["content"].endswith("[truncated: 5 more characters]")
    plain = user("hello")
    assert as_sent(plain) is plain
