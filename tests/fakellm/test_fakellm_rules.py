"""The message rules: each one catches its violation, and valid conversations pass."""

from __future__ import annotations

import pytest
from nanobot.fakellm.rules import (
    PREFILL_REJECTED,
    check_anthropic_request,
    check_openai_messages,
    estimate_tokens,
)


def oa_call(call_id: str, name: str = "read_file") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def oa_assistant_calls(*ids: str, content=None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [oa_call(i) for i in ids]}


def oa_tool(call_id: str, content: str = "result") -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


SYS = {"role": "system", "content": "You are nanobot."}
USER = {"role": "user", "content": "hi"}
ANSWER = {"role": "assistant", "content": "hello"}


# --------------------------------------------------------------------------- OpenAI: valid


def test_openai_valid_tool_round_trip_passes():
    messages = [
        SYS,
        USER,
        oa_assistant_calls("call_1", "call_2", content="let me look"),
        oa_tool("call_1"),
        oa_tool("call_2"),
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
        oa_assistant_calls("call_3"),
        oa_tool("call_3"),
        ANSWER,
        {"role": "user", "content": "thanks"},
    ]
    assert check_openai_messages(messages) == []


def test_openai_valid_without_system_and_ending_on_user():
    assert check_openai_messages([USER, ANSWER, {"role": "user", "content": "more"}]) == []


def test_openai_empty_tool_calls_list_is_rejected_as_the_api_does():
    # OpenAI: "Invalid 'messages[1].tool_calls': empty array. Expected an array with minimum length 1"
    problems = check_openai_messages(
        [USER, {"role": "assistant", "content": "x", "tool_calls": []}]
    )
    assert any("tool_calls must be a non-empty list" in p for p in problems)


def test_openai_image_only_user_content_is_not_empty():
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    assert check_openai_messages([{"role": "user", "content": content}]) == []


# --------------------------------------------------------------------------- OpenAI: violations


@pytest.mark.parametrize(
    "messages, expected",
    [
        ([SYS, ANSWER], "first non-system message must be from the user"),
        ([oa_tool("call_1")], "first non-system message must be from the user"),
        ([USER, oa_tool("call_9")], "'call_9' was not declared"),
        (
            [USER, oa_assistant_calls("call_1"), oa_tool("call_1"), oa_tool("call_1")],
            "'call_1' was already answered",
        ),
        (
            [USER, oa_assistant_calls("call_1", "call_2"), oa_tool("call_1"), ANSWER],
            "tool_call 'call_2' has no tool result",
        ),
        ([USER, oa_assistant_calls("call_1")], "tool_call 'call_1' has no tool result"),
        ([USER, ANSWER, {"role": "assistant", "content": "again"}], "two consecutive assistant"),
        (
            [
                USER,
                {"role": "assistant", "content": "x"},
                oa_assistant_calls("call_1"),
                oa_tool("call_1"),
            ],
            "two consecutive assistant",
        ),
        ([{"role": "user", "content": ""}], "empty user content"),
        ([{"role": "user", "content": "   \n"}], "empty user content"),
        ([{"role": "user", "content": None}], "empty user content"),
        ([{"role": "user", "content": []}], "empty user content"),
        ([{"role": "user", "content": [{"type": "text", "text": " "}]}], "empty user content"),
        (
            [USER, {"role": "assistant", "content": None}],
            "empty assistant content without tool_calls",
        ),
        (
            [USER, {"role": "assistant", "content": ""}],
            "empty assistant content without tool_calls",
        ),
        (
            [USER, {"role": "assistant", "content": "  "}],
            "empty assistant content without tool_calls",
        ),
        (
            [USER, {"role": "assistant", "content": []}],
            "empty assistant content without tool_calls",
        ),
        (
            [
                USER,
                oa_assistant_calls("call_1"),
                oa_tool("call_1"),
                {"role": "user", "content": "u"},
                oa_assistant_calls("call_1"),
                oa_tool("call_1"),
            ],
            "duplicate tool_call id 'call_1'",
        ),
        (
            [USER, oa_assistant_calls("call_1"), {"role": "tool", "content": "r"}],
            "tool message missing tool_call_id",
        ),
        ([USER, ANSWER, SYS, {"role": "user", "content": "u"}], "system message must be first"),
    ],
)
def test_openai_rule_detects_violation(messages, expected):
    found = check_openai_messages(messages)
    assert any(expected in v for v in found), found


def test_openai_tool_result_after_intervening_user_is_orphan():
    # The result came too late: the call is unanswered AND the late result is an orphan.
    found = check_openai_messages(
        [USER, oa_assistant_calls("call_1"), {"role": "user", "content": "wait"}, oa_tool("call_1")]
    )
    assert any("has no tool result" in v for v in found)
    assert any("was not declared" in v for v in found)


def test_openai_violation_names_the_message_index():
    found = check_openai_messages([USER, ANSWER, ANSWER, USER])
    assert found == ["message 2 (assistant): two consecutive assistant messages"]


# --------------------------------------------------------------------------- final assistant ("prefill")

# The seed's injected report: [system, ...history, assistant(report)]. Current Claude models and
# Mistral reject it; the others are asked to continue the report instead of answering it.
SEED_REPORT_REQUEST = [
    SYS,
    USER,
    ANSWER,
    {"role": "assistant", "content": "[Subagent 'x' finished] report"},
]


def test_openai_request_ending_with_an_assistant_message_is_a_violation():
    found = check_openai_messages([USER, ANSWER])
    assert found == ["message 1 (assistant): " + PREFILL_REJECTED]
    assert any(PREFILL_REJECTED in v for v in check_openai_messages(SEED_REPORT_REQUEST))


def test_anthropic_request_ending_with_an_assistant_message_is_a_violation():
    found = check_anthropic_request(None, [an_user("hi"), an_assistant("hello")])
    assert found == ["message 1 (assistant): " + PREFILL_REJECTED]
    found = check_anthropic_request(
        None, [an_user("hi"), an_assistant([{"type": "text", "text": "so"}])]
    )
    assert any(PREFILL_REJECTED in v for v in found)


def test_requests_ending_with_a_user_or_tool_message_pass_the_final_message_rule():
    assert check_openai_messages([USER, oa_assistant_calls("call_1"), oa_tool("call_1")]) == []
    assert (
        check_anthropic_request(
            None,
            [an_user("hi"), an_assistant([tool_use("toolu_1")]), an_user([tool_result("toolu_1")])],
        )
        == []
    )


# --------------------------------------------------------------------------- Anthropic


def an_user(content) -> dict:
    return {"role": "user", "content": content}


def an_assistant(content) -> dict:
    return {"role": "assistant", "content": content}


def tool_use(tool_id: str, name: str = "read_file") -> dict:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"path": "a"}}


def tool_result(tool_id: str, content: str = "data") -> dict:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def test_anthropic_valid_tool_round_trip_passes():
    system = [{"type": "text", "text": "You are nanobot.", "cache_control": {"type": "ephemeral"}}]
    messages = [
        an_user("hi"),
        an_assistant(
            [{"type": "text", "text": "looking"}, tool_use("toolu_1"), tool_use("toolu_2")]
        ),
        an_user(
            [tool_result("toolu_1"), tool_result("toolu_2"), {"type": "text", "text": "thanks"}]
        ),
        an_assistant([tool_use("toolu_3")]),
        an_user([tool_result("toolu_3")]),
        an_assistant("all done"),
        an_user("thanks"),
    ]
    assert check_anthropic_request(system, messages) == []
    assert check_anthropic_request("plain system", [an_user("hi")]) == []
    assert check_anthropic_request(None, [an_user("hi")]) == []


@pytest.mark.parametrize(
    "messages, expected",
    [
        ([an_assistant("hello")], "first message must be from the user"),
        ([an_user("a"), an_user("b")], "two consecutive user messages"),
        (
            [an_user("a"), an_assistant("b"), an_assistant("c")],
            "two consecutive assistant messages",
        ),
        (
            [an_user("a"), an_assistant([tool_use("toolu_1")]), an_user("no result")],
            "tool_use 'toolu_1' has no tool_result in the next user message",
        ),
        (
            [an_user("a"), an_assistant([tool_use("toolu_1")])],
            "tool_use 'toolu_1' has no tool_result",
        ),
        (
            [
                an_user("a"),
                an_assistant([tool_use("toolu_1"), tool_use("toolu_2")]),
                an_user([tool_result("toolu_1")]),
            ],
            "tool_use 'toolu_2' has no tool_result",
        ),
        (
            [
                an_user("a"),
                an_assistant([tool_use("toolu_1")]),
                an_user([{"type": "text", "text": "first"}, tool_result("toolu_1")]),
            ],
            "tool_result blocks must come first",
        ),
        ([an_user([tool_result("toolu_9")])], "does not answer a tool_use"),
        (
            [an_user("a"), an_assistant("text only"), an_user([tool_result("toolu_1")])],
            "does not answer a tool_use",
        ),
        (
            [
                an_user("a"),
                an_assistant([tool_use("toolu_1")]),
                an_user([tool_result("toolu_1")]),
                an_assistant([tool_use("toolu_1")]),
                an_user([tool_result("toolu_1")]),
            ],
            "duplicate tool_use id 'toolu_1'",
        ),
        ([an_user("")], "empty content"),
        ([an_user("  ")], "empty content"),
        ([an_user([])], "empty content list"),
        ([an_user([{"type": "text", "text": ""}])], "empty text block"),
        ([an_user("a"), an_assistant([{"type": "text", "text": " \n"}])], "empty text block"),
        ([an_user("a"), {"role": "system", "content": "x"}], "role must be user or assistant"),
        ([an_user("a"), {"role": "tool", "content": "x"}], "role must be user or assistant"),
    ],
)
def test_anthropic_rule_detects_violation(messages, expected):
    found = check_anthropic_request(None, messages)
    assert any(expected in v for v in found), found


def test_anthropic_empty_system_text_block_is_a_violation():
    found = check_anthropic_request([{"type": "text", "text": ""}], [an_user("hi")])
    assert found == ["system block 0: empty text block"]


def test_openai_shape_sent_to_anthropic_is_caught():
    # A provider adapter that forgot to convert would send these; both shapes must be rejected.
    found = check_anthropic_request(None, [SYS, USER])
    assert any("role must be user or assistant" in v for v in found)


# --------------------------------------------------------------------------- estimate


def test_estimate_tokens_is_rough_json_length_over_four():
    assert estimate_tokens("") == 1  # never zero
    assert estimate_tokens("a" * 400) == (400 + 2) // 4 + 1
    assert estimate_tokens({"k": "é" * 8}) == len('{"k": "éééééééé"}') // 4 + 1
