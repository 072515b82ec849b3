"""ContextBudget.fit: no request leaves over the window; the fixed prompt is checked at start-up."""

from __future__ import annotations

import copy
import random
import string

import pytest
from nanobot.agent.budget import (
    MIN_TOOL_RESULT_CHARS,
    ContextBudget,
    CutKind,
    memory_share,
    reply_room,
    shrink_text,
)
from nanobot.config import AgentDefaults
from nanobot.errors import ContextTooSmallError, RequestTooLarge
from nanobot.messages import tool_call
from nanobot.tokens import Calibration, TokenCounter, default_counter


def _budget(prompt_tokens: int, calibration: Calibration | None = None) -> ContextBudget:
    """A budget whose prompt allowance is exactly `prompt_tokens` (reply room 1)."""
    return ContextBudget(
        window=prompt_tokens + 1, max_tokens=1, counter=default_counter(), calibration=calibration
    )


def fit_request(
    msgs, budget_tokens, counter=None, *, turn_start=None, tools=None, calibration=None
):
    return _budget(budget_tokens, calibration).fit(msgs, tools, turn_start=turn_start).messages


def request_tokens(msgs, counter, *, tools=None, calibration=None):
    raw = counter.count_messages(msgs) + counter.count_tools(tools)
    return calibration.adjust(raw) if calibration else raw


def _file_text(kb: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    words = [
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
        for _ in range(500)
    ]
    lines, size = [], 0
    while size < kb * 1024:
        line = " ".join(rng.choice(words) for _ in range(12))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _turn(big: str, *, history: list | None = None) -> list[dict]:
    return [
        {"role": "system", "content": "You are nanobot."},
        *(history or []),
        {"role": "user", "content": "read big.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("c1", "read_file", {"path": "big.txt"})],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": big},
    ]


def _counter() -> TokenCounter:
    return default_counter()


def test_request_under_budget_comes_back_unchanged():
    msgs = _turn("short file")
    assert fit_request(msgs, 8000, _counter(), turn_start=1) is msgs


def test_330kb_tool_result_is_cut_to_fit_an_8k_window_without_touching_the_input():
    counter = _counter()
    big = _file_text(330)
    msgs = _turn(big)
    original = copy.deepcopy(msgs)
    assert request_tokens(msgs, counter) > 30_000  # what nanobot 0.1.4 would have sent
    out = fit_request(msgs, 6144, counter, turn_start=1)
    assert msgs == original  # input list and its dicts untouched
    assert request_tokens(out, counter) <= 6144
    shrunk = out[-1]["content"]
    assert shrunk.startswith(big[:200]) and shrunk.endswith(big[-50:])
    assert "characters cut" in shrunk and "read_file with offset/limit" in shrunk
    head, _, rest = shrunk.partition("\n\n[... ")
    cut, _, tail = rest.partition(" ...]\n\n")
    assert int(cut.split(" characters")[0].replace(",", "")) + len(head) + len(tail) == len(big)
    assert out[-1]["tool_call_id"] == "c1" and out[-1]["name"] == "read_file"
    # it does not cut more than needed: the request still uses most of the budget
    assert request_tokens(out, counter) > 6144 * 0.7


def test_largest_result_of_this_turn_is_cut_first():
    counter = _counter()
    small, big = _file_text(6, seed=2), _file_text(60, seed=3)
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "read both"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                tool_call("a", "read_file", {"path": "s"}),
                tool_call("b", "read_file", {"path": "b"}),
            ],
        },
        {"role": "tool", "tool_call_id": "a", "name": "read_file", "content": small},
        {"role": "tool", "tool_call_id": "b", "name": "read_file", "content": big},
    ]
    out = fit_request(msgs, 6000, counter, turn_start=1)
    assert out[3]["content"] == small  # enough was gained from the big one
    assert len(out[4]["content"]) < len(big)
    assert request_tokens(out, counter) <= 6000


def test_older_tool_results_are_cut_only_when_this_turn_cannot_give_more():
    counter = _counter()
    old = _file_text(40, seed=4)
    history = [
        {"role": "user", "content": "earlier"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("o", "read_file", {"path": "o"})],
        },
        {"role": "tool", "tool_call_id": "o", "name": "read_file", "content": old},
        {"role": "assistant", "content": "done"},
    ]
    msgs = _turn(_file_text(40, seed=5), history=history)
    turn_start = len(history) + 1
    roomy = fit_request(msgs, 25_000, counter, turn_start=turn_start)
    assert roomy[3]["content"] == old  # this turn's result alone was enough
    tight = fit_request(msgs, 3000, counter, turn_start=turn_start)
    assert (
        len(tight[-1]["content"]) < MIN_TOOL_RESULT_CHARS + 400
    )  # this turn's result at its minimum
    assert len(tight[3]["content"]) < len(old)
    assert request_tokens(tight, counter) <= 3000


def test_turn_start_defaults_to_the_last_user_message():
    counter = _counter()
    msgs = _turn(_file_text(50, seed=6))
    assert fit_request(msgs, 5000, counter) == fit_request(msgs, 5000, counter, turn_start=1)


def test_calibration_and_tools_are_part_of_the_budget():
    counter = _counter()
    calibration = Calibration()
    calibration.observe(1000, 1500)  # the provider counts 1.5x what we estimate
    tools = [
        {
            "type": "function",
            "function": {
                "name": "x" * 50,
                "description": "d " * 400,
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    msgs = _turn(_file_text(80, seed=7))
    out = fit_request(msgs, 6000, counter, turn_start=1, tools=tools, calibration=calibration)
    assert request_tokens(out, counter, tools=tools, calibration=calibration) <= 6000
    assert request_tokens(out, counter) <= 6000 / 1.5


def test_a_huge_single_message_is_cut_with_a_marker_for_the_request_only():
    counter = _counter()
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "word " * 5000}]
    original = copy.deepcopy(msgs)
    out = fit_request(msgs, 1000, counter, turn_start=1)
    assert msgs == original
    assert request_tokens(out, counter) <= 1000
    assert (
        out[1]["content"].startswith("word word")
        and "characters cut for this request only" in out[1]["content"]
    )


def test_a_request_whose_system_prompt_alone_is_too_big_is_refused_with_the_reason():
    msgs = [{"role": "system", "content": "fact " * 3000}, {"role": "user", "content": "hi"}]
    with pytest.raises(RequestTooLarge) as info:
        _budget(1000).fit(msgs)
    assert "system prompt (with MEMORY.md) takes ~3,0" in info.value.message
    assert "not sent" in info.value.message and "MEMORY.md" in info.value.hint


def test_small_results_that_would_grow_with_the_marker_are_left_alone():
    counter = _counter()
    msgs = _turn("y " * 300)
    for i in range(10):  # many small results, none worth cutting
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call(f"k{i}", "exec", {"c": i})],
            },
            {"role": "tool", "tool_call_id": f"k{i}", "name": "exec", "content": "z " * 180},
        ]
    from nanobot.agent.budget import _Fitter

    fitter = _Fitter(_budget(100), list(msgs), None, 1)
    fitter.cut_tool_results()  # the tool-result step alone: nothing it touches may grow
    for before, after in zip(msgs, fitter.out):
        assert len(str(after.get("content"))) <= len(str(before.get("content")))
    fitted = _budget(250).fit(msgs)  # as a whole: the earlier steps of the turn are left out
    assert request_tokens(fitted.messages, counter) <= 250
    assert "tool step(s) of this turn" in fitted.messages[1]["content"]


def test_shrink_text_keeps_head_and_tail():
    text = "".join(str(i % 10) for i in range(10_000))
    out = shrink_text(text, 900)
    assert out.startswith(text[:600]) and out.endswith(text[-300:])
    assert "9,100 characters cut" in out
    assert shrink_text("short", 900) == "short"


def test_reply_room_leaves_room_at_small_windows():
    assert reply_room(8192, 8192) == 2048
    assert reply_room(65_536, 8192) == 8192
    assert reply_room(200_000, 4096) == 4096


def _window(window: int = 8192, max_tokens: int = 8192, **kw) -> ContextBudget:
    return ContextBudget(window=window, max_tokens=max_tokens, counter=default_counter(), **kw)


def test_fixed_prompt_that_fits_returns_its_size():
    assert _window().check_fixed("short system prompt", None) > 0


def test_fixed_prompt_too_big_says_by_how_much_and_what_to_change():
    counter = _counter()
    system = "fact " * 7000
    with pytest.raises(ContextTooSmallError) as info:
        _window().check_fixed(system, None, memory_tokens=6500)
    err = info.value
    fixed = counter.count_message({"role": "system", "content": system})
    short_by = fixed + 2048 + 1024 - 8192
    assert f"{short_by:,} more than the window of 8,192" in err.message
    assert "MEMORY.md 6,500" in err.message
    for advice in ("contextWindowTokens", "maxTokens", "AGENTS.md", "MEMORY.md", "tools"):
        assert advice in err.hint


def test_default_workspace_fits_an_8k_window(tmp_path):
    from nanobot.app import build_context, build_tools
    from nanobot.cli.setup import copy_templates
    from nanobot.config import load_config

    copy_templates(tmp_path / "ws")
    cfg = load_config(None, overrides={"agents.defaults.workspace": str(tmp_path / "ws")})
    context, tools = build_context(cfg, tmp_path / "ws"), build_tools(cfg, tmp_path / "ws")
    budget = _window()
    fixed = budget.check_fixed(context.system_prompt(), tools.schemas())
    assert fixed < 8192 - 2048 - 1024


def test_oldest_turns_are_left_out_with_a_note_when_history_alone_is_too_big():
    counter = _counter()
    msgs = [{"role": "system", "content": "You are nanobot."}]
    for i in range(40):
        msgs += [
            {"role": "user", "content": f"turn {i}: " + "hello there " * 40},
            {"role": "assistant", "content": f"answer {i}: " + "fine thanks " * 40},
        ]
    msgs.append({"role": "user", "content": "and now?"})
    fitted = _budget(2000).fit(msgs)
    out = fitted.messages
    assert request_tokens(out, counter) <= 2000
    assert out[-1] == msgs[-1] and out[0] == msgs[0]
    first_kept = out[1]
    assert (
        first_kept["role"] == "user"
        and "earlier messages of this conversation are left out" in first_kept["content"]
    )
    kept_turns = [m["content"] for m in out if m["role"] == "assistant"]
    answers = [m["content"] for m in msgs if m["role"] == "assistant"]
    assert (
        0 < len(kept_turns) < 40 and kept_turns == answers[-len(kept_turns) :]
    )  # the newest, whole and in order
    assert any(
        c.kind is CutKind.OLD_TURNS and "older messages out of this request" in c.words
        for c in fitted.cuts
    )


def test_calls_over_the_cap_in_a_stored_message_are_left_out_with_their_results():
    counter = _counter()
    calls = [tool_call(f"c{i}", "exec", {"command": f"echo {i}"}) for i in range(2000)]
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *[
            {"role": "tool", "tool_call_id": f"c{i}", "name": "exec", "content": f"{i}"}
            for i in range(2000)
        ],
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "next"},
    ]
    out = _budget(4000).fit(msgs).messages
    assert request_tokens(out, counter) <= 4000
    sent_calls = out[2]["tool_calls"]
    assert len(sent_calls) == 32 and "1,968 more tool calls" in out[2]["content"]
    assert [m["tool_call_id"] for m in out if m["role"] == "tool"] == [f"c{i}" for i in range(32)]


def test_a_step_of_many_dense_results_keeps_as_many_calls_as_fit_and_says_so():
    from nanobot.session.validity import make_valid

    cjk = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(3000))  # ~1 token per character
    calls = [tool_call(f"c{i}", "echo", {"text": cjk}) for i in range(32)]
    msgs = [
        {"role": "system", "content": "You are nanobot."},
        {"role": "user", "content": "echo it all"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": f"c{i}", "name": "echo", "content": cjk}
            for i in range(32)
        ),
    ]
    original = copy.deepcopy(msgs)
    counter = _counter()
    out = fit_request(
        msgs, 1500, counter
    )  # each call and result at its marker is still ~80 tokens: 32 cannot fit
    assert request_tokens(out, counter) <= 1500
    kept = out[2]["tool_calls"]
    assert 1 <= len(kept) < 32 and [m["tool_call_id"] for m in out[3:]] == [c["id"] for c in kept]
    assert f"results of {32 - len(kept)} more tool calls" in out[2]["content"]
    assert make_valid(copy.deepcopy(out)) == out  # calls and results still pair up
    assert msgs == original  # the session's messages are untouched


def test_memory_share_has_one_rule_for_every_window():
    budget = ContextBudget(window=1000, max_tokens=100)
    assert not budget.memory_share(250).too_large and budget.memory_share(251).too_large
    assert (
        budget.memory_share(100).share == 0.1 and budget.memory_share(100).window == 1000
    )  # the configured window
    assert (
        memory_share(100).window == AgentDefaults.context_window_tokens
    )  # no window: the config's default


def test_a_calibrated_refusal_says_why_its_parts_add_up_to_more():
    # the provider counted 1.25x: the parts shown plus reply and conversation must explain the total
    calibration = Calibration()
    calibration.observe(2000, 2500)
    system = "fact " * 5500  # too large by nanobot's own count too
    with pytest.raises(ContextTooSmallError) as info:
        _window(calibration=calibration).check_fixed(system, None)
    err = info.value
    fixed = _counter().count_message({"role": "system", "content": system})
    assert f"({calibration.adjust(fixed):,} together at x1.25, how this model's" in err.message
    assert f"{calibration.adjust(fixed) + 1024 + 2048:,} tokens" in err.message
    assert "nanobot doctor --forget-correction" in err.hint


def test_a_prompt_refused_only_for_the_correction_says_so_and_how_to_forget_it():
    calibration = Calibration()
    calibration.observe(2000, 2500)
    system = "fact " * 4200  # fits the 6,144-token budget with 1,024 to spare by cl100k alone
    with pytest.raises(ContextTooSmallError) as info:
        _window(calibration=calibration).check_fixed(system, None)
    fixed = _counter().count_message({"role": "system", "content": system})
    err = info.value
    assert "fits the context window by nanobot's own count, but not at the x1.25" in err.message
    assert f"take {fixed + 1024:,} of the 6,144-token prompt budget" in err.message
    assert f"and {calibration.adjust(fixed) + 1024:,} at x1.25" in err.message
    assert err.hint.startswith("if that count was a one-off")
    assert "`nanobot doctor --forget-correction`" in err.hint
    # without the correction the same prompt is accepted
    assert _window().check_fixed(system, None) > 0


def test_a_turn_refused_only_for_the_correction_names_the_way_back():
    # mid-chat, the correction grew: the request fits by cl100k but not at x1.25, so it is not sent
    calibration = Calibration()
    calibration.observe(2000, 2500)
    request = [
        {"role": "system", "content": "fact " * 5000},
        {"role": "user", "content": "hello"},
    ]
    with pytest.raises(RequestTooLarge) as info:
        _window(calibration=calibration).fit(request)
    assert "by nanobot's own count it would fit" in info.value.hint
    assert "leave the chat and run `nanobot doctor --forget-correction`" in info.value.hint
    assert _window().fit(request).messages == request  # uncorrected, it is sent as it is
