"""The adapters' raw hot path: the same wire bytes as the SDKs' typed calls, and a reader that
copes with what real servers send (id-less calls, index-less deltas, web pages, plain JSON)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from nanobot.errors import ProviderError
from nanobot.fakellm import Reply
from nanobot.providers.anthropic import AnthropicProvider
from nanobot.providers.base import DEFAULT_TIMEOUT, http_timeout
from nanobot.providers.openai_compat import OpenAICompatProvider

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
CONVERSATION = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "read notes ünïcode ✓"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.md"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "the notes"},
    {"role": "assistant", "content": "They say hello."},
    {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
]


class CannedServer:
    """Answers every POST with one fixed status, content type and body, and keeps what it got."""

    def __init__(self, body: bytes, content_type: str, status: int = 200) -> None:
        self.received: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("content-length") or 0)
                outer.received.append(json.loads(self.rfile.read(length)))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        ).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def canned():
    servers: list[CannedServer] = []

    def start(
        body: bytes | str, content_type: str = "application/json", status: int = 200
    ) -> CannedServer:
        server = CannedServer(
            body.encode() if isinstance(body, str) else body, content_type, status
        )
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def run(coro):
    return asyncio.run(coro)


async def _call(provider, **kwargs):
    try:
        return await provider.chat(CONVERSATION, tools=TOOLS, max_tokens=321, **kwargs)
    finally:
        await provider.aclose()


# the raw-response switch itself, and what differs per connection or per body
_EXPECTED_TO_DIFFER = {
    "x-stainless-raw-response",
    "content-length",
    "host",
    "x-stainless-helper-method",
    "x-stainless-stream-helper",
}


def _same_headers(ours, sdk) -> dict[str, str]:
    mine = {k: v for k, v in ours.headers.items() if k not in _EXPECTED_TO_DIFFER}
    theirs = {k: v for k, v in sdk.headers.items() if k not in _EXPECTED_TO_DIFFER}
    assert mine == theirs
    return mine


@pytest.mark.parametrize("stream", [False, True])
def test_openai_raw_body_is_what_the_typed_sdk_call_sends(fake_llm, stream):
    import openai

    provider = OpenAICompatProvider(
        "gpt-test", name="custom", api_key="k", api_base=fake_llm.openai_base_url
    )
    fake_llm.script(Reply.text("one"), Reply.text("two"))
    run(_call(provider, on_delta=(lambda _d: None) if stream else None))
    ours = fake_llm.requests[0]

    async def typed():
        client = openai.AsyncOpenAI(
            api_key="k",
            base_url=fake_llm.openai_base_url,
            max_retries=0,
            timeout=http_timeout(DEFAULT_TIMEOUT),
        )
        params = {
            "model": "gpt-test",
            "messages": provider._wire_messages(CONVERSATION),
            "temperature": 0.1,
            "max_tokens": 321,
            "tools": TOOLS,
        }
        if stream:
            async for _ in await client.chat.completions.create(
                **params, stream=True, stream_options={"include_usage": True}
            ):
                pass
        else:
            await client.chat.completions.create(**params)
        await client.close()

    run(typed())
    sdk = fake_llm.requests[1]
    assert ours.body == sdk.body
    assert _same_headers(ours, sdk)["authorization"] == "Bearer k"
    fake_llm.assert_all_valid()


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_raw_body_is_what_the_typed_sdk_call_sends(fake_llm, stream):
    import anthropic
    from nanobot.providers import anthropic_format as fmt

    provider = AnthropicProvider("claude-test", api_key="k", api_base=fake_llm.anthropic_base_url)
    fake_llm.script(Reply.text("one"), Reply.text("two"))
    run(_call(provider, on_delta=(lambda _d: None) if stream else None))
    ours = fake_llm.requests[0]

    async def typed():
        client = anthropic.AsyncAnthropic(
            api_key="k",
            base_url=fake_llm.anthropic_base_url,
            max_retries=0,
            timeout=http_timeout(DEFAULT_TIMEOUT),
        )
        system, wire = fmt.to_anthropic(CONVERSATION)
        params = {
            "model": "claude-test",
            "messages": fmt.with_history_cache_marker(wire),
            "max_tokens": 321,
            "system": system,
            "tools": fmt.to_anthropic_tools(TOOLS),
            "tool_choice": {"type": "auto"},
        }
        if fmt.to_anthropic_tool_choice(None) is None:
            params.pop("tool_choice")
        if stream:
            async with client.messages.stream(**params) as events:
                async for _ in events:
                    pass
        else:
            await client.messages.create(**params)
        await client.close()

    run(typed())
    sdk = fake_llm.requests[1]
    assert ours.body == sdk.body
    assert _same_headers(ours, sdk)["anthropic-version"]
    fake_llm.assert_all_valid()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_streamed_text_tool_calls_and_usage_arrive_whole(fake_llm, protocol):
    if protocol == "openai":
        provider = OpenAICompatProvider(
            "gpt-test", name="custom", api_key="k", api_base=fake_llm.openai_base_url
        )
    else:
        provider = AnthropicProvider(
            "claude-test", api_key="k", api_base=fake_llm.anthropic_base_url
        )
    fake_llm.script(
        Reply.tool_calls(
            [("read_file", {"path": "a.md"}), ("read_file", {"path": "b ✓.md"})],
            text="Reading both.",
            usage={"prompt_tokens": 77, "completion_tokens": 9},
        )
    )
    deltas: list[str] = []
    resp = run(_call(provider, on_delta=deltas.append))
    assert "".join(deltas) == resp.content == "Reading both."
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [
        ("read_file", {"path": "a.md"}),
        ("read_file", {"path": "b ✓.md"}),
    ]
    assert len({c.id for c in resp.tool_calls}) == 2
    assert resp.finish_reason == "tool_calls"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (77, 9)


def _sse(*events: dict) -> str:
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def test_streamed_parallel_tool_calls_without_index_stay_separate(canned):
    def chunk(tool_calls=None, finish=None):
        return {
            "id": "x",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish,
                    "delta": {"tool_calls": tool_calls} if tool_calls else {},
                }
            ],
        }

    def tc(**fields):
        return {"index": None, "type": "function", **fields}

    server = canned(
        _sse(
            chunk([tc(id="c1", function={"name": "read_file", "arguments": '{"path"'})]),
            chunk([tc(function={"arguments": ': "a"}'})]),
            chunk([tc(id="c2", function={"name": "list_dir", "arguments": "{}"})]),
            chunk(finish="tool_calls"),
        ),
        "text/event-stream",
    )
    provider = OpenAICompatProvider("m", name="custom", api_key="k", api_base=server.url + "/v1")
    resp = run(_call(provider, on_delta=lambda _d: None))
    assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [
        ("c1", "read_file", {"path": "a"}),
        ("c2", "list_dir", {}),
    ]


@pytest.mark.parametrize("bad_id", ["", None])
def test_tool_calls_without_ids_get_unique_ids(canned, bad_id):
    fn = {"name": "read_file", "arguments": '{"path": "a"}'}
    body = {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": bad_id, "type": "function", "function": fn}] * 2,
                },
            }
        ],
    }
    server = canned(json.dumps(body))
    resp = run(
        _call(OpenAICompatProvider("m", name="custom", api_key="k", api_base=server.url + "/v1"))
    )
    ids = [c.id for c in resp.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    assert [c.arguments for c in resp.tool_calls] == [{"path": "a"}, {"path": "a"}]


def test_a_server_that_ignores_stream_and_answers_json_still_works(canned):
    body = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "plain"},
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
    server = canned(json.dumps(body))
    deltas: list[str] = []
    resp = run(
        _call(
            OpenAICompatProvider("m", name="custom", api_key="k", api_base=server.url + "/v1"),
            on_delta=deltas.append,
        )
    )
    assert resp.content == "plain" and deltas == ["plain"]
    assert resp.usage.prompt_tokens == 5
    assert server.received[0]["stream"] is True


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_web_page_instead_of_the_api_is_named_with_its_url(canned, protocol, stream):
    server = canned("<!doctype html><html><body>Welcome to my router</body></html>", "text/html")
    if protocol == "openai":
        provider = OpenAICompatProvider("m", name="custom", api_key="k", api_base=server.url)
    else:
        provider = AnthropicProvider("claude-test", api_key="k", api_base=server.url)
    with pytest.raises(ProviderError) as info:
        run(_call(provider, on_delta=(lambda _d: None) if stream else None))
    assert "web page" in str(info.value) and server.url in str(info.value)
    assert "apiBase" in (info.value.hint or "")
    assert not info.value.retryable
    assert len(server.received) == 1  # the request really went out, once


def test_an_error_event_inside_a_stream_is_a_provider_error(canned):
    body = (
        'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 3}}}\n\n'
        'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    )
    server = canned(body, "text/event-stream")
    with pytest.raises(ProviderError) as info:
        run(
            _call(
                AnthropicProvider("claude-test", api_key="k", api_base=server.url),
                on_delta=lambda _d: None,
            )
        )
    assert info.value.status == 529 and info.value.retryable
    assert "Overloaded" in str(info.value)
