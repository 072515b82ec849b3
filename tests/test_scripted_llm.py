"""The in-process fake LLM (tests/scripted_llm.py) answers and judges like the HTTP server."""

from __future__ import annotations

import pytest
from nanobot.errors import ProviderError
from nanobot.fakellm import Reply
from nanobot.messages import assistant, user

from provider_calls import chat_once


def system(text: str) -> dict:
    return {"role": "system", "content": text}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_scripted_tool_call_and_answer_reach_the_real_adapter(scripted_llm, protocol, stream):
    scripted_llm.script(
        Reply.tool_calls([("read_file", {"path": "notes.md"})]),
        Reply.text("The notes say hi.", usage={"prompt_tokens": 40, "completion_tokens": 5}),
    )
    deltas: list[str] = []
    on_delta = deltas.append if stream else None
    first = chat_once(
        scripted_llm.provider(protocol),
        [system("be brief"), user("read notes.md")],
        tools=TOOLS,
        on_delta=on_delta,
    )
    assert [(c.name, c.arguments) for c in first.tool_calls] == [
        ("read_file", {"path": "notes.md"})
    ]
    history = [
        system("be brief"),
        user("read notes.md"),
        first.to_message(),
        {
            "role": "tool",
            "tool_call_id": first.tool_calls[0].id,
            "name": "read_file",
            "content": "hi",
        },
    ]
    second = chat_once(scripted_llm.provider(protocol), history, tools=TOOLS, on_delta=on_delta)
    assert second.content == "The notes say hi." and second.usage.completion_tokens == 5
    assert ("".join(deltas) == "The notes say hi.") if stream else deltas == []
    sent = scripted_llm.requests
    assert [r.protocol for r in sent] == [protocol, protocol] and all(
        r.stream == stream for r in sent
    )
    assert "read notes.md" in str(sent[0].messages) and "hi" in str(sent[1].messages)
    scripted_llm.assert_all_valid()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_an_invalid_request_is_a_violation_and_a_strict_endpoint_refuses_it(scripted_llm, protocol):
    ending_with_assistant = [system("s"), user("hi"), assistant("I was saying")]
    scripted_llm.script(Reply.text("continued"))
    assert chat_once(scripted_llm.provider(protocol), ending_with_assistant).content == "continued"
    with pytest.raises(AssertionError, match="assistant"):
        scripted_llm.assert_all_valid()

    scripted_llm.reset()
    scripted_llm.strict = True
    scripted_llm.script(Reply.text("never served"))
    with pytest.raises(ProviderError) as refused:
        chat_once(scripted_llm.provider(protocol), ending_with_assistant)
    assert refused.value.status == 400 and not refused.value.retryable
    assert scripted_llm.queued == 1  # the scripted reply waits for a valid request


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_errors_a_cut_stream_and_a_full_window_come_back_as_provider_errors(scripted_llm, protocol):
    scripted_llm.script(Reply.error(429, message="slow down", retry_after=1))
    with pytest.raises(ProviderError) as limited:
        chat_once(scripted_llm.provider(protocol), [user("hi")])
    assert limited.value.status == 429 and limited.value.retryable

    scripted_llm.script(Reply.cut_stream("half an ans"))
    pieces: list[str] = []
    with pytest.raises(ProviderError):
        chat_once(scripted_llm.provider(protocol), [user("hi")], on_delta=pieces.append)
    assert "".join(pieces).startswith("half")

    scripted_llm.context_window = 50
    with pytest.raises(ProviderError) as overflow:
        chat_once(scripted_llm.provider(protocol), [user("word " * 400)])
    assert overflow.value.context_overflow
    assert scripted_llm.requests[-1].estimated_tokens > 50
