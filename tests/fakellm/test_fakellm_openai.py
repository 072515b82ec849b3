"""The real openai SDK against the fake server: text, tool calls, streaming, usage, errors."""

from __future__ import annotations

import asyncio
import json

import httpx2
import openai
import pytest
from nanobot.fakellm import Reply
from nanobot.fakellm.rules import estimate_tokens
from openai import AsyncOpenAI

HI = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def client(server) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=server.openai_base_url, api_key="x", max_retries=0)


def run(coro):
    return asyncio.run(coro)


async def collect(stream) -> tuple[str, dict, str | None, list]:
    """Reassemble a chat stream the way a provider adapter does: text, tool calls, finish, usage."""
    text, calls, finish, usages = "", {}, None, []
    async for chunk in stream:
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for choice in chunk.choices:
            delta = choice.delta
            text += delta.content or ""
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = tc.id or slot["id"]
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["arguments"] += tc.function.arguments
            finish = choice.finish_reason or finish
    return text, calls, finish, usages


def test_text_reply_non_streaming_reports_estimated_usage(fake_llm):
    fake_llm.script(Reply.text("Hello there, friend."))
    resp = run(client(fake_llm).chat.completions.create(model="gpt-test", messages=HI))

    assert resp.choices[0].message.content == "Hello there, friend."
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "gpt-test"
    assert resp.usage.prompt_tokens == estimate_tokens({"messages": HI})
    assert resp.usage.completion_tokens == estimate_tokens("Hello there, friend.")
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    (req,) = fake_llm.requests
    assert req.protocol == "openai" and req.path == "/v1/chat/completions" and not req.stream
    assert req.messages == HI and req.headers["authorization"] == "Bearer x"
    assert not req.unscripted
    fake_llm.assert_all_valid()


def test_usage_override_and_length_finish(fake_llm):
    fake_llm.script(
        Reply.text(
            "cut sh", usage={"prompt_tokens": 9000, "completion_tokens": 77}, finish_reason="length"
        )
    )
    resp = run(client(fake_llm).chat.completions.create(model="m", messages=HI))
    assert resp.choices[0].finish_reason == "length"
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (9000, 77)


def test_streaming_text_with_include_usage_ends_with_usage_chunk(fake_llm):
    fake_llm.script(
        Reply.text(
            "one two three four",
            chunks=["one ", "two ", "three four"],
            usage={"prompt_tokens": 100, "completion_tokens": 4},
        )
    )

    async def go():
        chunks = []
        stream = await client(fake_llm).chat.completions.create(
            model="m", messages=HI, stream=True, stream_options={"include_usage": True}
        )
        async for chunk in stream:
            chunks.append(chunk)
        return chunks

    chunks = run(go())
    contents = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert contents == ["one ", "two ", "three four"]
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 100
    assert chunks[-1].usage.completion_tokens == 4
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert fake_llm.requests[0].stream


def test_streaming_without_include_usage_has_no_usage(fake_llm):
    fake_llm.script(Reply.text("a longer answer with several words in it"))

    async def go():
        return await collect(
            await client(fake_llm).chat.completions.create(model="m", messages=HI, stream=True)
        )

    text, calls, finish, usages = run(go())
    assert text == "a longer answer with several words in it"
    assert (calls, finish, usages) == ({}, "stop", [])


def test_tool_calls_non_streaming_get_unique_ids_and_raw_malformed_args(fake_llm):
    fake_llm.script(
        Reply.tool_calls(
            [("read_file", {"path": "a.txt"}), ("exec", '{"cmd": "ls"')], text="Checking."
        ),
        Reply.tool_calls([("read_file", {"path": "b.txt"})]),
    )

    async def go():
        c = client(fake_llm)
        return (
            await c.chat.completions.create(model="m", messages=HI, tools=TOOLS),
            await c.chat.completions.create(model="m", messages=HI, tools=TOOLS),
        )

    first, second = run(go())
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and msg.content == "Checking."
    assert [t.function.name for t in msg.tool_calls] == ["read_file", "exec"]
    assert json.loads(msg.tool_calls[0].function.arguments) == {"path": "a.txt"}
    assert msg.tool_calls[1].function.arguments == '{"cmd": "ls"'
    ids = [t.id for t in msg.tool_calls] + [t.id for t in second.choices[0].message.tool_calls]
    assert all(i.startswith("call_") for i in ids) and len(set(ids)) == 3
    assert fake_llm.requests[0].tools == TOOLS


def test_tool_calls_streamed_as_indexed_deltas(fake_llm):
    args = {"path": "a/very/long/path/that/splits/into/several/pieces.txt"}
    fake_llm.script(
        Reply.tool_calls([("read_file", args), ("read_file", {"path": "b"})], text="Let me look.")
    )

    async def go():
        return await collect(
            await client(fake_llm).chat.completions.create(
                model="m",
                messages=HI,
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
        )

    text, calls, finish, usages = run(go())
    assert text == "Let me look." and finish == "tool_calls"
    assert [calls[i]["name"] for i in (0, 1)] == ["read_file", "read_file"]
    assert json.loads(calls[0]["arguments"]) == args
    assert json.loads(calls[1]["arguments"]) == {"path": "b"}
    assert calls[0]["id"] != calls[1]["id"]
    assert len(usages) == 1 and usages[0].completion_tokens > 0


def test_reasoning_content_is_sent(fake_llm):
    fake_llm.script(Reply.text("42", reasoning="think hard"), Reply.text("43", reasoning="again"))

    async def go():
        c = client(fake_llm)
        resp = await c.chat.completions.create(model="m", messages=HI)
        streamed = ""
        async for chunk in await c.chat.completions.create(model="m", messages=HI, stream=True):
            for ch in chunk.choices:
                streamed += (ch.delta.model_extra or {}).get("reasoning_content") or ""
        return resp, streamed

    resp, streamed = run(go())
    assert resp.choices[0].message.model_extra["reasoning_content"] == "think hard"
    assert streamed == "again"


def test_tool_round_trip_is_valid(fake_llm):
    fake_llm.script(Reply.tool_calls([("read_file", {"path": "a"})]), Reply.text("It says hi."))
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "read a"}]

    async def go():
        c = client(fake_llm)
        first = await c.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages.extend(
            [
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": "hi"},
            ]
        )
        return call, await c.chat.completions.create(model="m", messages=messages, tools=TOOLS)

    call, second = run(go())
    assert second.choices[0].message.content == "It says hi."
    fake_llm.assert_all_valid()
    assert fake_llm.requests[1].messages[-1]["tool_call_id"] == call.id


def test_error_reply_raises_status_error_with_retry_after(fake_llm):
    fake_llm.script(
        Reply.error(429, message="slow down", retry_after=7),
        Reply.error(500),
        Reply.error(401, message="bad key"),
    )

    async def go():
        c = client(fake_llm)
        errors = []
        for kwargs in ({}, {"stream": True}, {}):
            try:
                await c.chat.completions.create(model="m", messages=HI, **kwargs)
            except openai.APIStatusError as e:
                errors.append(e)
        return errors

    rate, server_error, auth = run(go())
    assert isinstance(rate, openai.RateLimitError)
    assert rate.status_code == 429 and rate.response.headers["retry-after"] == "7"
    assert "slow down" in rate.message and rate.body["message"] == "slow down"
    assert isinstance(server_error, openai.InternalServerError)
    assert isinstance(auth, openai.AuthenticationError)
    assert "retry-after" not in auth.response.headers


def test_sdk_retries_honour_retry_after(fake_llm):
    fake_llm.script(Reply.error(429, retry_after=0.01), Reply.text("finally"))
    c = AsyncOpenAI(base_url=fake_llm.openai_base_url, api_key="x", max_retries=2)
    resp = run(c.chat.completions.create(model="m", messages=HI))
    assert resp.choices[0].message.content == "finally"
    assert len(fake_llm.requests) == 2


def test_cut_stream_surfaces_as_error_after_partial_text(fake_llm):
    fake_llm.script(Reply.cut_stream("partial answer here"))
    seen = []

    async def go():
        stream = await client(fake_llm).chat.completions.create(model="m", messages=HI, stream=True)
        async for chunk in stream:
            seen.append(chunk.choices[0].delta.content or "")

    with pytest.raises((httpx2.HTTPError, openai.APIError)):
        run(go())
    assert "".join(seen) == "partial answer here"


def test_cut_without_stream_is_a_connection_error(fake_llm):
    fake_llm.script(Reply.cut_stream("x"), Reply.text("after"))

    async def go():
        c = client(fake_llm)
        with pytest.raises(openai.APIConnectionError):
            await c.chat.completions.create(model="m", messages=HI)
        # The server keeps working for the next request.
        return await c.chat.completions.create(model="m", messages=HI)

    assert run(go()).choices[0].message.content == "after"
