"""Both adapters through the real SDKs against the local fake server."""

from __future__ import annotations

import time

import pytest
from nanobot.errors import ProviderError
from nanobot.fakellm import Reply
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.providers.anthropic import AnthropicProvider
from nanobot.providers.openai_compat import OpenAICompatProvider
from nanobot.providers.retry import RetryingProvider, RetryPolicy

from provider_calls import chat_once

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05, max_total=5)


def make(kind: str, server):
    if kind == "openai":
        return OpenAICompatProvider(
            "gpt-test", name="custom", api_key="k", api_base=server.openai_base_url
        )
    return AnthropicProvider("claude-test", api_key="k", api_base=server.anthropic_base_url)


CONVERSATION = [
    {"role": "system", "content": "You are a test."},
    user("read notes"),
    assistant(None, [tool_call("call_a", "read_file", {"path": "notes.md"})]),
    tool_result("call_a", "read_file", "the notes"),
    assistant("They say: the notes."),
    user("thanks, and now?"),
]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("streaming", [False, True])
def test_text_reply_with_usage(fake_llm, kind, streaming):
    fake_llm.script(
        Reply.text("Hello there, friend.", usage={"prompt_tokens": 42, "completion_tokens": 5})
    )
    deltas: list[str] = []
    resp = chat_once(
        make(kind, fake_llm),
        CONVERSATION,
        tools=TOOLS,
        on_delta=deltas.append if streaming else None,
    )
    assert resp.content == "Hello there, friend."
    assert resp.finish_reason == "stop"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (42, 5)
    if streaming:
        assert "".join(deltas) == "Hello there, friend."
        assert len(deltas) > 1
    fake_llm.assert_all_valid()
    req = fake_llm.requests[0]
    assert req.protocol == kind
    assert req.stream is streaming


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("streaming", [False, True])
def test_tool_calls_are_parsed(fake_llm, kind, streaming):
    fake_llm.script(
        Reply.tool_calls([("read_file", {"path": "a.md"}), ("read_file", {"path": "b.md"})])
    )
    resp = chat_once(
        make(kind, fake_llm),
        [user("read both")],
        tools=TOOLS,
        on_delta=(lambda _t: None) if streaming else None,
    )
    assert [c.arguments for c in resp.tool_calls] == [{"path": "a.md"}, {"path": "b.md"}]
    assert all(c.name == "read_file" and c.id for c in resp.tool_calls)
    assert len({c.id for c in resp.tool_calls}) == 2
    assert resp.finish_reason == "tool_calls"


def test_anthropic_request_shape_tool_blocks_and_cache(fake_llm):
    fake_llm.script(Reply.text("ok"))
    chat_once(make("anthropic", fake_llm), CONVERSATION, tools=TOOLS)
    body = fake_llm.requests[0].body
    assert body["system"][0]["text"] == "You are a test."
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert body["messages"][1]["content"][0] == {
        "type": "tool_use",
        "id": "call_a",
        "name": "read_file",
        "input": {"path": "notes.md"},
    }
    assert body["messages"][2]["content"][0]["type"] == "tool_result"
    assert body["tools"][0]["input_schema"]["required"] == ["path"]
    fake_llm.assert_all_valid()


def test_anthropic_merges_consecutive_same_role_turns(fake_llm):
    fake_llm.script(Reply.text("ok"))
    chat_once(
        make("anthropic", fake_llm),
        [user("one"), user("two"), assistant("a"), assistant("b"), user("three")],
    )
    roles = [m["role"] for m in fake_llm.requests[0].body["messages"]]
    assert roles == ["user", "assistant", "user"]
    fake_llm.assert_all_valid()


def test_malformed_tool_arguments_are_flagged_not_guessed(fake_llm):
    fake_llm.script(Reply.tool_calls([("read_file", '{"path": "a.md"')]))
    resp = chat_once(make("openai", fake_llm), [user("x")], tools=TOOLS)
    call = resp.tool_calls[0]
    assert call.parse_error and "not valid JSON" in call.parse_error
    assert call.arguments == {}


@pytest.mark.parametrize(
    "kind,status", [("openai", 429), ("openai", 503), ("anthropic", 529), ("anthropic", 500)]
)
def test_retryable_errors_are_retried_honouring_retry_after(fake_llm, kind, status):
    fake_llm.script(Reply.error(status, retry_after=0.2), Reply.text("recovered"))
    retries = []
    provider = RetryingProvider(
        make(kind, fake_llm), FAST, on_retry=lambda a, d, e: retries.append((a, d, e.status))
    )
    started = time.monotonic()
    resp = chat_once(provider, [user("hi")])
    assert resp.content == "recovered"
    assert len(fake_llm.requests) == 2
    assert retries == [(1, 0.05, status)]  # Retry-After honoured, capped by the policy's max_delay
    assert time.monotonic() - started >= 0.05


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize(
    "status,word", [(400, "malformed"), (401, "key"), (403, "permission"), (404, "not found")]
)
def test_client_errors_are_not_retried_and_explain_the_fix(fake_llm, kind, status, word):
    fake_llm.script(Reply.error(status, message="nope"), Reply.text("should not be reached"))
    provider = RetryingProvider(make(kind, fake_llm), FAST)
    with pytest.raises(ProviderError) as info:
        chat_once(provider, [user("hi")])
    assert len(fake_llm.requests) == 1
    assert info.value.status == status and not info.value.retryable
    assert word in str(info.value).lower()
    assert "nope" in str(info.value)


def test_retries_are_bounded(fake_llm):
    fake_llm.script(*[Reply.error(500) for _ in range(10)])
    with pytest.raises(ProviderError) as info:
        chat_once(RetryingProvider(make("openai", fake_llm), FAST), [user("hi")])
    assert len(fake_llm.requests) == FAST.attempts
    assert info.value.status == 500


def test_connection_refused_is_a_clear_retryable_error():
    provider = OpenAICompatProvider("m", name="custom", api_base="http://127.0.0.1:9/v1")
    with pytest.raises(ProviderError) as info:
        chat_once(provider, [user("hi")])
    assert info.value.retryable
    assert "could not connect" in str(info.value)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_cut_stream_is_retried_as_a_connection_error(fake_llm, kind):
    fake_llm.script(Reply.cut_stream("partial"), Reply.text("full answer"))
    deltas: list[str] = []
    resp = chat_once(
        RetryingProvider(make(kind, fake_llm), FAST), [user("hi")], on_delta=deltas.append
    )
    assert resp.content == "full answer"
    assert len(fake_llm.requests) == 2


def test_opening_the_assistant_defers_the_sdk_import_until_prewarm_or_first_request(configure):
    import subprocess
    import sys

    configure("anthropic")
    code = (
        "import sys, threading\nfrom nanobot.app import open_assistant\nfrom nanobot.config import load_config\n"
        "a = open_assistant(load_config(None), 'cli:direct')\n"
        "print('AFTER_OPEN', 'anthropic' in sys.modules)\n"
        "a.prewarm()\n"
        "[t.join() for t in threading.enumerate() if t.name == 'sdk-prewarm']\n"
        "print('AFTER_PREWARM', 'anthropic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "AFTER_OPEN False" in out.stdout and "AFTER_PREWARM True" in out.stdout, out.stderr[
        -2000:
    ]


@pytest.mark.parametrize(
    "message,window,tokens",
    [
        ("prompt is too long: 210000 tokens > 200000 maximum", 200000, 210000),
        (
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens. "
            "Please reduce the length of the messages.",
            8192,
            9100,
        ),
        ("the request exceeds the available context size, try increasing it", None, None),
    ],
)
def test_prompt_too_long_errors_are_recognised_with_their_numbers(message, window, tokens):
    from nanobot.providers.errors_map import status_error

    error = status_error("x", 400, message)
    assert error.context_overflow and not error.retryable
    assert (error.reported_window, error.reported_tokens) == (window, tokens)
    assert "contextWindowTokens" in str(error)


def test_an_ordinary_bad_request_is_not_mistaken_for_an_overflow():
    from nanobot.providers.errors_map import status_error

    error = status_error("x", 400, "messages.1.content: field required")
    assert not error.context_overflow and error.reported_window is None


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "image_url", "image_url": "https://example.com/cat.png"}],
        [{"type": "image_url", "image_url": {"url": "file:///home/me/cat.png"}}],
        [{"type": "input_audio", "input_audio": {"data": "..."}}],
    ],
)
def test_user_turns_of_odd_parts_never_become_empty_for_anthropic(content):
    from nanobot.fakellm.rules import check_anthropic_request
    from nanobot.providers.anthropic_format import to_anthropic
    from nanobot.session.validity import make_valid

    history = make_valid(
        [
            {"role": "user", "content": content},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "and?"},
        ]
    )
    system, messages = to_anthropic(history)
    assert check_anthropic_request(system, messages) == []
    assert messages[0]["role"] == "user" and messages[0]["content"]
