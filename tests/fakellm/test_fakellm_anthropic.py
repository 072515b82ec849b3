"""The real anthropic SDK against the fake server: text, tool use, streaming events, usage, errors."""

from __future__ import annotations

import asyncio

import anthropic
import httpx2
import pytest
from anthropic import AsyncAnthropic
from nanobot.fakellm import Reply
from nanobot.fakellm.rules import estimate_tokens

HI = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def client(server) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=server.anthropic_base_url, api_key="x", max_retries=0)


def run(coro):
    return asyncio.run(coro)


def test_text_reply_non_streaming_reports_usage(fake_llm):
    fake_llm.script(Reply.text("Hello from Claude."))
    msg = run(
        client(fake_llm).messages.create(
            model="claude-test", max_tokens=100, system="be kind", messages=HI
        )
    )

    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text == "Hello from Claude."
    assert msg.stop_reason == "end_turn" and msg.model == "claude-test"
    assert msg.usage.input_tokens == estimate_tokens({"system": "be kind", "messages": HI})
    assert msg.usage.output_tokens == estimate_tokens("Hello from Claude.")
    (req,) = fake_llm.requests
    assert req.protocol == "anthropic" and req.path == "/v1/messages"
    assert req.system == "be kind" and req.messages == HI and not req.stream
    assert "x" in (req.headers.get("x-api-key"), req.headers.get("authorization", "")[7:])
    assert "anthropic-version" in req.headers
    fake_llm.assert_all_valid()


def test_length_maps_to_max_tokens_and_usage_override(fake_llm):
    fake_llm.script(
        Reply.text(
            "trunc",
            finish_reason="length",
            usage={"prompt_tokens": 5000, "completion_tokens": 12, "cache_read_input_tokens": 4000},
        )
    )
    msg = run(client(fake_llm).messages.create(model="m", max_tokens=12, messages=HI))
    assert msg.stop_reason == "max_tokens"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (5000, 12)
    assert msg.usage.cache_read_input_tokens == 4000


def test_stream_sends_the_real_event_sequence(fake_llm):
    fake_llm.script(Reply.tool_calls([("read_file", {"path": "notes/today.md"})], text="Looking."))

    async def go():
        stream = await client(fake_llm).messages.create(
            model="m", max_tokens=100, messages=HI, tools=TOOLS, stream=True
        )
        return [event async for event in stream]

    events = run(go())
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert events[0].message.usage.input_tokens > 0
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["text", "tool_use"]
    assert kinds.count("content_block_stop") == 2
    partial = "".join(
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert partial == '{"path": "notes/today.md"}'
    delta = events[-2]
    assert delta.delta.stop_reason == "tool_use" and delta.usage.output_tokens > 0
    assert fake_llm.requests[0].stream and fake_llm.requests[0].tools == TOOLS


def test_stream_helper_accumulates_text_thinking_and_usage(fake_llm):
    fake_llm.script(
        Reply.text(
            "A streamed answer in a few words.",
            reasoning="hmm",
            usage={"prompt_tokens": 321, "completion_tokens": 8},
        )
    )

    async def go():
        async with client(fake_llm).messages.stream(model="m", max_tokens=100, messages=HI) as s:
            pieces = [t async for t in s.text_stream]
            return pieces, await s.get_final_message()

    pieces, final = run(go())
    assert len(pieces) > 1 and "".join(pieces) == "A streamed answer in a few words."
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "hmm"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (321, 8)


def test_tool_use_round_trip_streaming_and_not_is_valid(fake_llm):
    fake_llm.script(
        Reply.tool_calls([("read_file", {"path": "a"}), ("read_file", {"path": "b"})]),
        Reply.tool_calls([("read_file", {"path": "c"})]),
        Reply.text("Both read."),
    )
    messages = [{"role": "user", "content": "read a and b"}]

    async def go():
        c = client(fake_llm)
        first = await c.messages.create(model="m", max_tokens=100, messages=messages, tools=TOOLS)
        uses = [b for b in first.content if b.type == "tool_use"]
        messages.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in first.content],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": u.id, "content": "text"} for u in uses
                ],
            }
        )
        async with c.messages.stream(
            model="m", max_tokens=100, messages=messages, tools=TOOLS
        ) as s:
            second = await s.get_final_message()
        (use,) = [b for b in second.content if b.type == "tool_use"]
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": use.id, "name": use.name, "input": use.input}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "more"}],
            }
        )
        third = await c.messages.create(model="m", max_tokens=100, messages=messages, tools=TOOLS)
        return uses, use, third

    uses, use, third = run(go())
    assert [u.input for u in uses] == [{"path": "a"}, {"path": "b"}]
    assert use.input == {"path": "c"}
    assert all(u.id.startswith("toolu_") for u in [*uses, use])
    assert len({u.id for u in [*uses, use]}) == 3
    assert third.content[0].text == "Both read."
    fake_llm.assert_all_valid()


def test_error_replies_are_status_errors_in_anthropic_shape(fake_llm):
    fake_llm.script(
        Reply.error(429, retry_after=3),
        Reply.error(529, message="Overloaded"),
        Reply.error(400, message="bad", error_type="invalid_request_error"),
    )

    async def go():
        c = client(fake_llm)
        errors = []
        for kwargs in ({}, {"stream": True}, {}):
            try:
                await c.messages.create(model="m", max_tokens=10, messages=HI, **kwargs)
            except anthropic.APIStatusError as e:
                errors.append(e)
        return errors

    rate, overloaded, bad = run(go())
    assert isinstance(rate, anthropic.RateLimitError) and rate.status_code == 429
    assert rate.response.headers["retry-after"] == "3"
    assert rate.body["error"]["type"] == "rate_limit_error"
    assert overloaded.status_code == 529 and overloaded.body["error"]["type"] == "overloaded_error"
    assert isinstance(bad, anthropic.BadRequestError) and "bad" in bad.message


def test_cut_stream_surfaces_as_error(fake_llm):
    fake_llm.script(Reply.cut_stream("half an ans"), Reply.cut_stream(""))
    seen = []

    async def go():
        async with client(fake_llm).messages.stream(model="m", max_tokens=10, messages=HI) as s:
            async for text in s.text_stream:
                seen.append(text)

    with pytest.raises((httpx2.HTTPError, anthropic.APIError)):
        run(go())
    assert "".join(seen) == "half an ans"
    with pytest.raises(anthropic.APIConnectionError):
        run(client(fake_llm).messages.create(model="m", max_tokens=10, messages=HI))


def test_malformed_tool_arguments_reach_the_client_unparsed(fake_llm):
    fake_llm.script(
        Reply.tool_calls([("read_file", '{"path": "a"')]),
        Reply.tool_calls([("read_file", '{"path": "a"')]),
    )

    async def go():
        c = client(fake_llm)
        msg = await c.messages.create(model="m", max_tokens=10, messages=HI, tools=TOOLS)
        stream = await c.messages.create(
            model="m", max_tokens=10, messages=HI, tools=TOOLS, stream=True
        )
        partial = "".join(
            [e.delta.partial_json async for e in stream if e.type == "content_block_delta"]
        )
        return msg, partial

    msg, partial = run(go())
    assert msg.content[0].input == '{"path": "a"'  # not a dict: the adapter must cope
    assert partial == '{"path": "a"'
