"""run_loop on its own: the real provider classes and SDKs against the in-process fake server,
real tools in a registry, the real ContextBudget; no CLI, no session, no subprocess."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from nanobot.agent.budget import ContextBudget
from nanobot.agent.events import Notice, StopReason, TextDelta, ToolFinished, ToolStarted
from nanobot.agent.loop import (
    HoldLast,
    LoopHooks,
    LoopSpec,
    ThinkFilter,
    max_iterations_message,
    run_loop,
)
from nanobot.errors import ToolError
from nanobot.fakellm import Reply
from nanobot.tools.base import Tool, ToolContext
from nanobot.tools.registry import ToolRegistry

from budget_helpers import make_strict, over_window

SYSTEM = {"role": "system", "content": "You are a test assistant."}


class Recorder(LoopHooks):
    """Everything a run hands its hooks, in order: ("message", [...]) and ("event", event)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def on_message(self, messages):
        self.log.append(("message", list(messages)))

    def on_event(self, event):
        self.log.append(("event", event))

    @property
    def messages(self) -> list[list[dict]]:
        return [m for kind, m in self.log if kind == "message"]

    def events(self, cls) -> list:
        return [e for kind, e in self.log if kind == "event" and isinstance(e, cls)]


class Note(Tool):
    name = "note"
    description = "Remember a word."
    parameters = {
        "type": "object",
        "properties": {"word": {"type": "string"}},
        "required": ["word"],
    }

    def __init__(self, ctx: ToolContext) -> None:
        super().__init__(ctx)
        self.words: list[str] = []

    async def run(self, word: str = "", **_: Any) -> str:
        self.words.append(word)
        return f"noted {word}"


class Broken(Tool):
    name = "broken"
    description = "Always fails."
    parameters = {"type": "object", "properties": {}}

    async def run(self, **_: Any) -> str:
        raise ToolError("the disk is on fire")


def make_provider(protocol: str, server):
    if protocol == "anthropic":
        from nanobot.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            "claude-test", api_key="sk-ant-test-key-123456", api_base=server.anthropic_base_url
        )
    from nanobot.providers.openai_compat import OpenAICompatProvider

    return OpenAICompatProvider(
        "test-model", name="custom", api_key="sk-test-key-123456", api_base=server.openai_base_url
    )


@pytest.fixture
def tools(tmp_path):
    ctx = ToolContext(workspace=tmp_path)
    return ToolRegistry([Note(ctx), Broken(ctx)])


def run(
    protocol,
    server,
    tools,
    messages=None,
    *,
    hooks=None,
    window=32_000,
    max_tokens=1024,
    **settings,
):
    """One run of the loop; returns (result, hooks, budget)."""
    hooks = hooks or Recorder()
    budget = settings.pop("budget", None) or ContextBudget(
        window=window, max_tokens=max_tokens, max_tool_calls=settings.pop("max_tool_calls", 32)
    )

    async def go():
        provider = make_provider(protocol, server)
        try:
            spec = LoopSpec(provider, tools, budget, **settings)
            return await run_loop(
                spec, messages or [SYSTEM, {"role": "user", "content": "hi"}], hooks
            )
        finally:
            await provider.aclose()

    return asyncio.run(go()), hooks, budget


PROTOCOLS = pytest.mark.parametrize("protocol", ["openai", "anthropic"])


@PROTOCOLS
def test_a_final_answer_ends_done_and_is_handed_on_once_before_its_last_text(
    protocol, fake_llm, tools
):
    fake_llm.script(
        Reply.text(
            "Hello there, friend.", chunks=4, usage={"prompt_tokens": 42, "completion_tokens": 5}
        )
    )
    result, hooks, _ = run(protocol, fake_llm, tools)
    outcome = result.outcome
    assert outcome.stop_reason is StopReason.DONE and outcome.stop_reason == "done"
    assert outcome.content == "Hello there, friend." and outcome.error is None
    assert hooks.messages == [[{"role": "assistant", "content": "Hello there, friend."}]]
    assert result.new_messages == hooks.messages[0] and result.requests == 1
    assert outcome.usage.prompt_tokens == 42 and result.total_usage.completion_tokens == 5
    assert "".join(e.text for e in hooks.events(TextDelta)) == "Hello there, friend."
    # an answer fully on screen is on disk: its last piece is shown only after the message was handed on
    kinds = [kind if kind == "message" else type(e).__name__ for kind, e in hooks.log]
    assert kinds.index("message") < len(kinds) - 1 - kinds[::-1].index("TextDelta")
    assert kinds.count("TextDelta") >= 2 and kinds.index("TextDelta") < kinds.index("message")
    fake_llm.assert_all_valid()


@PROTOCOLS
def test_a_tool_step_hands_on_the_call_then_its_result_and_the_next_request_carries_both(
    protocol, fake_llm, tools
):
    fake_llm.script(Reply.tool_calls([("note", {"word": "apple"})]), Reply.text("I noted it."))
    result, hooks, _ = run(protocol, fake_llm, tools)
    assert result.outcome.stop_reason is StopReason.DONE and result.outcome.content == "I noted it."
    assert tools.get("note").words == ["apple"]
    call, answer_to_call, answer = hooks.messages
    assert call[0]["role"] == "assistant" and call[0]["tool_calls"][0]["function"]["name"] == "note"
    assert answer_to_call[0]["role"] == "tool" and answer_to_call[0]["content"] == "noted apple"
    assert answer[0]["content"] == "I noted it."
    assert result.new_messages == [*call, *answer_to_call, *answer]
    assert result.outcome.tool_calls == [
        {"name": "note", "arguments": {"word": "apple"}, "is_error": False}
    ]
    # the call is handed on before the tool runs (a crash mid-step keeps it), the result as it lands
    order = [
        kind if kind == "message" else type(e).__name__
        for kind, e in hooks.log
        if kind == "message" or isinstance(e, (ToolStarted, ToolFinished))
    ]
    assert order == ["message", "ToolStarted", "message", "ToolFinished", "message"]
    assert hooks.events(ToolStarted)[0].hint.startswith("note")
    second = json.dumps(fake_llm.requests[1].messages)
    assert "noted apple" in second and result.requests == 2
    fake_llm.assert_all_valid()


def test_the_iteration_limit_stops_the_run_with_its_own_reason_and_message(fake_llm, tools):
    fake_llm.responder = lambda request: Reply.tool_calls(
        [("note", {"word": f"w{len(fake_llm.requests)}"})]
    )
    result, hooks, _ = run("openai", fake_llm, tools, max_iterations=3)
    assert result.outcome.stop_reason is StopReason.MAX_ITERATIONS
    assert result.outcome.content == max_iterations_message(3)
    assert len(fake_llm.requests) == 3 and result.requests == 3
    assert tools.get("note").words == ["w1", "w2", "w3"]  # every step ran its tool, then the limit
    assert [m[0]["role"] for m in hooks.messages] == ["assistant", "tool"] * 3


@PROTOCOLS
def test_tool_failures_are_results_the_model_reads_and_the_run_goes_on(protocol, fake_llm, tools):
    fake_llm.script(
        Reply.tool_calls([("broken", {}), ("no_such_tool", {"x": 1}), ("note", "{not json")]),
        Reply.text("Two failed, one was malformed."),
    )
    result, hooks, _ = run(protocol, fake_llm, tools)
    assert result.outcome.stop_reason is StopReason.DONE
    assert [c["is_error"] for c in result.outcome.tool_calls] == [True, True, True]
    assert tools.get("note").words == []  # a malformed call is answered, never guessed and run
    results = [m[0] for m in hooks.messages if m[0]["role"] == "tool"]
    assert "the disk is on fire" in results[0]["content"]
    assert (
        "unknown tool 'no_such_tool'" in results[1]["content"] and "note" in results[1]["content"]
    )
    assert [e.is_error for e in hooks.events(ToolFinished)] == [True, True, True]
    sent = json.dumps(fake_llm.requests[1].messages)
    assert "the disk is on fire" in sent and "no_such_tool" in sent  # the model reads every failure
    fake_llm.assert_all_valid()


@PROTOCOLS
def test_a_provider_error_stops_the_run_with_the_error_and_nothing_handed_on(
    protocol, fake_llm, tools
):
    fake_llm.script(Reply.error(401, message="invalid api key"))
    result, hooks, _ = run(protocol, fake_llm, tools)
    assert result.outcome.stop_reason is StopReason.ERROR
    assert result.outcome.content is None
    assert (
        "invalid api key" in (result.outcome.error or "")
        and "API key was rejected" in result.outcome.error
    )
    assert hooks.messages == [] and result.requests == 0
    assert len(fake_llm.requests) == 1  # 401 is not retried


def test_calls_past_the_per_step_cap_are_answered_with_one_append_and_a_warning(fake_llm, tools):
    fake_llm.script(
        Reply.tool_calls([("note", {"word": w}) for w in ("a", "b", "c", "d")]), Reply.text("ok")
    )
    result, hooks, _ = run("openai", fake_llm, tools, max_tool_calls=2)
    assert tools.get("note").words == ["a", "b"]
    refused = hooks.messages[3]  # after the call and the two results: one append for both refusals
    assert len(refused) == 2 and all(
        "not run" in m["content"] and "at most 2" in m["content"] for m in refused
    )
    assert [c["is_error"] for c in result.outcome.tool_calls] == [False, False, True, True]
    assert any("ran the first 2" in n.text and n.level == "warning" for n in hooks.events(Notice))
    assert [m["role"] for m in fake_llm.requests[1].messages[-5:]] == [
        "assistant",
        "tool",
        "tool",
        "tool",
        "tool",
    ]
    fake_llm.assert_all_valid()


def test_each_request_is_fitted_to_the_budget_and_the_user_told(fake_llm, tools):
    huge = "line of old output\n" * 4000  # ~76,000 characters, far past a 4k window
    older = [
        m
        for i in range(40)
        for m in (
            {"role": "user", "content": f"old question {i} " + "word " * 50},
            {"role": "assistant", "content": f"old answer {i} " + "word " * 50},
        )
    ]
    history = [
        SYSTEM,
        *older,
        {"role": "user", "content": "read the log"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "note", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "note", "content": huge},
        {"role": "assistant", "content": "It is long."},
        {"role": "user", "content": "and now?"},
    ]
    snapshot = json.dumps(history)
    make_strict(
        fake_llm, window=4096
    )  # sized with cl100k, prompt + max_tokens, as a provider would
    fake_llm.script(Reply.tool_calls([("note", {"word": "x"})]), Reply.text("fine"))
    result, hooks, budget = run("openai", fake_llm, tools, history, window=4096, max_tokens=512)
    assert result.outcome.stop_reason is StopReason.DONE
    assert len(fake_llm.requests) == 2
    for request in fake_llm.requests:
        assert request.body["max_tokens"] == 512
        sent = json.dumps(request.messages)
        assert (
            "and now?" in sent and "old question 0 " not in sent
        )  # the oldest turns left out, the newest kept
    assert over_window(fake_llm, 4096) == []
    assert json.dumps(history) == snapshot  # the caller's messages are never changed
    told = [n.text for n in hooks.events(Notice) if "to fit the context window" in n.text]
    assert told and all("this request only; the session keeps everything" in t for t in told)
    assert any("older messages out of this request" in t for t in told)
    assert not any(
        "tool results" in t for t in told
    )  # the huge result was cut; its marker tells the model


def test_a_request_that_cannot_fit_is_not_sent(fake_llm, tools):
    fake_llm.script(Reply.text("never"))
    messages = [{"role": "system", "content": "rules " * 3000}, {"role": "user", "content": "hi"}]
    result, hooks, _ = run("openai", fake_llm, tools, messages, window=2048, max_tokens=256)
    assert result.outcome.stop_reason is StopReason.ERROR
    assert "cannot fit the context window" in (result.outcome.error or "")
    assert fake_llm.requests == [] and hooks.messages == []


@PROTOCOLS
def test_a_provider_window_smaller_than_configured_is_learned_once_and_the_request_refitted(
    protocol, fake_llm, tools
):
    make_strict(
        fake_llm, window=3000
    )  # the model's real window (counted with cl100k); the config claims 32k
    history = [
        SYSTEM,
        *[
            m
            for i in range(30)
            for m in (
                {"role": "user", "content": f"question {i}: " + "words " * 60},
                {"role": "assistant", "content": f"answer {i}: " + "more words " * 40},
            )
        ],
        {"role": "user", "content": "the latest question"},
    ]
    fake_llm.responder = lambda request: Reply.text("answered within the real window")
    result, hooks, budget = run(protocol, fake_llm, tools, history)
    assert result.outcome.stop_reason is StopReason.DONE, result.outcome.error
    assert result.outcome.content == "answered within the real window"
    assert budget.window < 32_000
    assert len(fake_llm.requests) == 2  # refused once, refitted, accepted
    assert fake_llm.requests[1].estimated_tokens <= 3000
    warnings = [n.text for n in hooks.events(Notice) if n.level == "warning"]
    assert any("too long for its context window" in w for w in warnings)


def test_think_blocks_are_kept_off_the_screen_and_out_of_the_answer(fake_llm, tools):
    fake_llm.script(
        Reply.text(
            "<think>secret plan</think>The answer is 4.",
            chunks=["<thi", "nk>secret ", "plan</th", "ink>The answer", " is 4."],
        )
    )
    result, hooks, _ = run("openai", fake_llm, tools)
    assert result.outcome.content == "The answer is 4."
    assert "".join(e.text for e in hooks.events(TextDelta)) == "The answer is 4."
    assert hooks.messages == [[{"role": "assistant", "content": "The answer is 4."}]]


def test_a_cut_off_or_empty_answer_is_flagged_to_the_user(fake_llm, tools):
    fake_llm.script(Reply.text("It was the best of", finish_reason="length"))
    result, hooks, _ = run("openai", fake_llm, tools, max_tokens=700, stream=False)
    assert (
        result.outcome.stop_reason is StopReason.DONE
        and result.outcome.content == "It was the best of"
    )
    assert any("reply limit (700 tokens)" in n.text for n in hooks.events(Notice))

    fake_llm.script(Reply.text(""))
    result, hooks, _ = run("openai", fake_llm, tools)
    assert result.outcome.stop_reason is StopReason.DONE and result.outcome.content is None
    assert hooks.messages == []  # an empty answer is not a message to keep
    assert any("empty answer" in n.text for n in hooks.events(Notice))


def test_without_streaming_no_text_deltas_are_sent(fake_llm, tools):
    fake_llm.script(Reply.text("quiet answer"))
    result, hooks, _ = run("anthropic", fake_llm, tools, stream=False)
    assert result.outcome.content == "quiet answer" and hooks.events(TextDelta) == []
    assert fake_llm.requests[0].body.get("stream") in (None, False)


def test_think_filter_passes_only_text_outside_think_blocks_across_chunk_borders():
    out: list[str] = []
    think = ThinkFilter(out.append)
    for chunk in ["Hi <", "think", ">hidden</thi", "nk> there <th", "ink>also hidden"]:
        think.feed(chunk)
    assert "".join(out) == "Hi  there "


def test_hold_last_passes_text_one_piece_late_until_flushed():
    out: list[str] = []
    held = HoldLast(out.append)
    held("a")
    held("b")
    assert out == ["a"]
    held.flush()
    held.flush()
    assert out == ["a", "b"]


@pytest.mark.parametrize("cut", ["answer", "tool call"])
def test_a_reply_cut_at_a_limit_the_last_check_lowered_names_that_limit_and_how_to_free_room(
    fake_llm, tools, cut
):
    # The window's last check (WindowGuard) sent less than maxTokens because the context was nearly
    # full: the notice names the limit the reply really had, and raising maxTokens would not help
    from nanobot.agent.budget import WindowGuard

    if cut == "answer":
        fake_llm.script(Reply.text("It was the best of", finish_reason="length"))
    else:
        fake_llm.script(
            Reply.tool_calls([("note", {"text": "half"})], finish_reason="length"),
            Reply.text("done"),
        )
    hooks = Recorder()
    loop_budget = ContextBudget(window=32_000, max_tokens=1024)

    async def go():
        provider = WindowGuard(
            make_provider("openai", fake_llm), ContextBudget(window=700, max_tokens=1024)
        )
        try:
            spec = LoopSpec(provider, tools, loop_budget, stream=False)
            return await run_loop(spec, [SYSTEM, {"role": "user", "content": "hi"}], hooks)
        finally:
            await provider.aclose()

    asyncio.run(go())
    sent = fake_llm.requests[0].body["max_tokens"]
    assert sent < 1024  # the last check lowered it
    notices = [n.text for n in hooks.events(Notice) if "reply limit" in n.text]
    assert len(notices) == 1 and f"reply limit ({sent:,} tokens)" in notices[0]
    assert "/compact" in notices[0] and "maxTokens" not in notices[0]
    if cut == "tool call":  # what the model reads names the same limit
        results = [m for batch in hooks.messages for m in batch if m.get("role") == "tool"]
        assert f"({sent:,} tokens)" in results[0]["content"]
