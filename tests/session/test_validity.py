"""make_valid: each rule on a small history, and valid histories pass through unchanged."""

from __future__ import annotations

import copy

import pytest
from nanobot.fakellm.rules import check_openai_messages
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.validity import INTERRUPTED_RESULT, is_valid, make_valid, repair_messages


def call(call_id: str, name: str = "read_file") -> dict:
    return tool_call(call_id, name, {"path": "a.txt"})


def roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


def test_valid_history_comes_back_equal():
    history = [
        {"role": "system", "content": "You are nanobot."},
        user("read a.txt"),
        assistant(None, [call("A"), call("B", "exec")]),
        tool_result("A", "read_file", "hello"),
        tool_result("B", "exec", "ok"),
        assistant("done"),
        user(
            [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ]
        ),
        assistant("nice", reasoning_content="thinking"),
    ]
    original = copy.deepcopy(history)
    assert make_valid(history) == history
    assert history == original
    assert is_valid(history)


def test_make_valid_never_mutates_input_and_returns_new_list():
    history = [assistant("early"), user("q"), assistant("a"), assistant("b", [call("A")])]
    original = copy.deepcopy(history)
    result = make_valid(history)
    assert history == original
    assert result is not history
    result[0]["content"] = "changed"
    assert history == original


def test_leading_non_user_messages_are_dropped():
    history = [assistant("left over"), tool_result("X", "f", "r"), user("hi"), assistant("hello")]
    assert make_valid(history) == [user("hi"), assistant("hello")]


def test_leading_system_message_is_kept_before_first_user():
    history = [{"role": "system", "content": "sys"}, assistant("stale"), user("hi")]
    assert make_valid(history) == [{"role": "system", "content": "sys"}, user("hi")]


def test_system_message_after_the_start_is_dropped():
    history = [user("hi"), {"role": "system", "content": "late"}, assistant("hello")]
    assert make_valid(history) == [user("hi"), assistant("hello")]


def test_history_without_user_message_becomes_empty():
    assert make_valid([assistant("a"), assistant("b")]) == []


def test_orphan_result_drops_only_the_orphan():
    history = [
        user("q"),
        assistant("thinking"),
        tool_result("nobody", "f", "r"),
        user("next"),
        assistant("ok"),
    ]
    assert make_valid(history) == [user("q"), assistant("thinking"), user("next"), assistant("ok")]


def test_result_answered_twice_keeps_only_the_first():
    history = [
        user("q"),
        assistant(None, [call("A")]),
        tool_result("A", "read_file", "1"),
        tool_result("A", "read_file", "2"),
        assistant("done"),
    ]
    result = make_valid(history)
    assert [m["content"] for m in result if m["role"] == "tool"] == ["1"]


def test_result_without_tool_call_id_is_dropped():
    history = [
        user("q"),
        assistant(None, [call("A")]),
        {"role": "tool", "content": "x"},
        tool_result("A", "read_file", "r"),
    ]
    assert make_valid(history) == [
        user("q"),
        assistant(None, [call("A")]),
        tool_result("A", "read_file", "r"),
    ]


def test_make_valid_backfills_missing_tool_result():
    history = [
        user("q"),
        assistant(None, [call("A"), call("B", "exec")]),
        tool_result("A", "read_file", "r"),
        assistant("done"),
    ]
    result = make_valid(history)
    assert result[3] == {
        "role": "tool",
        "tool_call_id": "B",
        "name": "exec",
        "content": INTERRUPTED_RESULT,
    }
    assert roles(result) == ["user", "assistant", "tool", "tool", "assistant"]


def test_backfill_when_history_ends_with_tool_calls():
    history = [user("q"), assistant(None, [call("A")])]
    assert make_valid(history)[-1] == tool_result("A", "read_file", INTERRUPTED_RESULT)


def test_late_result_after_another_message_is_backfilled_then_dropped():
    history = [
        user("q"),
        assistant(None, [call("A")]),
        user("hello?"),
        tool_result("A", "read_file", "late"),
    ]
    result = make_valid(history)
    assert result == [
        user("q"),
        assistant(None, [call("A")]),
        tool_result("A", "read_file", INTERRUPTED_RESULT),
        user("hello?"),
    ]


def test_duplicate_tool_call_ids_across_history_are_renamed_with_their_results():
    history = [
        user("1"),
        assistant(None, [call("A")]),
        tool_result("A", "read_file", "first"),
        assistant("ok"),
        user("2"),
        assistant(None, [call("A")]),
        tool_result("A", "read_file", "second"),
        assistant("ok"),
    ]
    result = make_valid(history)
    ids = [tc["id"] for m in result for tc in m.get("tool_calls") or []]
    assert len(ids) == len(set(ids)) == 2
    assert result[6]["tool_call_id"] == result[5]["tool_calls"][0]["id"] == ids[1] != "A"
    assert result[6]["content"] == "second"


def test_duplicate_ids_within_one_message_are_paired_in_order():
    history = [
        user("q"),
        assistant(None, [call("A"), call("A", "exec")]),
        tool_result("A", "read_file", "r1"),
        tool_result("A", "exec", "r2"),
    ]
    result = make_valid(history)
    first, second = result[1]["tool_calls"]
    assert first["id"] == "A" and second["id"] != "A"
    assert [(m["tool_call_id"], m["content"]) for m in result[2:]] == [
        ("A", "r1"),
        (second["id"], "r2"),
    ]


def test_consecutive_assistants_are_merged_with_blank_line():
    history = [user("q"), assistant("one"), assistant("two")]
    assert make_valid(history) == [user("q"), assistant("one\n\ntwo")]


def test_assistant_text_then_tool_call_message_merge_keeps_tool_calls():
    # The subagent bug: injected assistant text followed by the model's tool-call message.
    history = [
        user("q"),
        assistant("answer"),
        assistant("[subagent result]"),
        assistant("let me check", [call("A")]),
        tool_result("A", "read_file", "r"),
    ]
    result = make_valid(history)
    assert roles(result) == ["user", "assistant", "tool"]
    assert result[1]["content"] == "answer\n\n[subagent result]\n\nlet me check"
    assert result[1]["tool_calls"] == [call("A")]


def test_merge_into_tool_call_message_with_no_text():
    history = [
        user("q"),
        assistant("injected"),
        assistant(None, [call("A")]),
        tool_result("A", "read_file", "r"),
    ]
    assert make_valid(history)[1] == assistant("injected", [call("A")])


def test_assistant_with_tool_calls_is_not_merged_into_next():
    history = [user("q"), assistant("x", [call("A")]), assistant("y")]
    result = make_valid(history)
    assert roles(result) == ["user", "assistant", "tool", "assistant"]


def test_orphan_between_assistants_leads_to_merge():
    history = [user("q"), assistant("a"), tool_result("zz", "f", "r"), assistant("b")]
    assert make_valid(history) == [user("q"), assistant("a\n\nb")]


def test_empty_user_message_is_dropped():
    history = [user("q"), assistant("a"), user("   "), user(""), user("again"), assistant("b")]
    assert make_valid(history) == [user("q"), assistant("a"), user("again"), assistant("b")]


def test_empty_assistant_without_tool_calls_is_dropped():
    history = [user("q"), assistant(""), assistant(None), {"role": "assistant"}]
    assert make_valid(history) == [user("q")]


def test_assistant_with_tool_calls_and_no_content_is_kept():
    history = [user("q"), assistant(None, [call("A")]), tool_result("A", "read_file", "r")]
    assert make_valid(history) == history


def test_whitespace_text_beside_tool_calls_becomes_none():
    history = [user("q"), assistant("  \n", [call("A")]), tool_result("A", "read_file", "r")]
    assert make_valid(history)[1]["content"] is None


def test_leading_empty_user_does_not_count_as_start():
    history = [user(""), assistant("stale"), user("real")]
    assert make_valid(history) == [user("real")]


def test_malformed_entries_and_tool_calls_are_dropped():
    history = [
        "junk",
        {"role": "wizard", "content": "x"},
        user("q"),
        assistant("a", [{"id": "", "function": {"name": "f"}}, {"id": "B"}]),
        tool_result("B", "f", "r"),
    ]
    assert make_valid(history) == [user("q"), assistant("a")]


def test_non_string_arguments_are_serialised():
    bad = {"id": "A", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    result = make_valid([user("q"), assistant(None, [bad]), tool_result("A", "f", "r")])
    assert result[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'


def test_extra_keys_such_as_timestamp_are_kept():
    history = [
        {"role": "user", "content": "q", "timestamp": "t1"},
        {"role": "assistant", "content": "a", "timestamp": "t2"},
    ]
    assert make_valid(history) == history


def test_make_valid_is_idempotent_on_damaged_history():
    history = [
        assistant("x"),
        user("q"),
        assistant("a"),
        assistant(None, [call("A"), call("B")]),
        tool_result("C", "f", "r"),
        tool_result("A", "read_file", "r"),
        user(""),
        assistant(""),
    ]
    once = make_valid(history)
    assert make_valid(once) == once


def test_repair_messages_keeps_leading_messages_and_maps_pointer():
    history = [
        assistant("old"),
        user("q1"),
        assistant("a1"),
        assistant("a1b"),
        user("q2"),
        assistant(None, [call("A")]),
        user("q3"),
    ]
    fixed, pointer, fixes = repair_messages(history, pointer=4)
    assert fixed[0] == assistant("old")
    assert pointer == 3  # the merge happened before the pointer
    assert fixed[pointer] == user("q2")
    assert fixed[pointer + 2]["content"] == INTERRUPTED_RESULT
    assert fixes.merged_assistants == 1 and fixes.backfilled == 1


@pytest.mark.parametrize("odd", [[], {"id": "a", "function": {"name": "f"}}, "call_1", [1, None]])
def test_tool_calls_that_are_not_a_list_of_calls_are_dropped_not_crashed_on(odd):
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x", "tool_calls": odd},
        {"role": "user", "content": "next"},
    ]
    out = make_valid(history)
    assert out[1] == {"role": "assistant", "content": "x"}
    assert check_openai_messages(out) == []
    assert repair_messages(history, 0)[0][1] == {"role": "assistant", "content": "x"}


def test_consecutive_user_messages_are_merged_in_requests_but_kept_by_repair():
    note = user("[nanobot note, not from the user] subagent 'x' (sa-1) was stopped by the user.")
    history = [user("q"), assistant("a"), note, user("what now?")]
    assert make_valid(history) == [
        user("q"),
        assistant("a"),
        user(note["content"] + "\n\nwhat now?"),
    ]
    image = {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
    merged = make_valid([user("look"), user([image])])
    assert merged == [user([{"type": "text", "text": "look"}, image])]
    repaired, _, fixes = repair_messages(history)
    assert repaired == history and fixes.merged_users == 0


def test_repair_moves_a_result_after_assistant_text_up_to_its_call():
    messages = [
        user("go"),
        assistant(None, [tool_call("c1", "exec", {"command": "x"})]),
        assistant("working on it"),
        tool_result("c1", "exec", "real"),
        assistant("done"),
    ]
    repaired, _, fixes = repair_messages(messages)
    assert [m["role"] for m in repaired] == ["user", "assistant", "tool", "assistant"]
    assert repaired[2]["content"] == "real" and fixes.moved_results == 1 and fixes.backfilled == 0
    assert "1 tool results moved up next to their call" in fixes.describe()
    assert make_valid(make_valid(messages)) == make_valid(messages)
