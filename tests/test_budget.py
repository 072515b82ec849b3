"""Budget fitting: no request leaves over the window, and the fixed prompt is checked at start-up."""

from __future__ import annotations

import copy
import random
import string

import pytest
from nanobot.agent.budget import (
    MIN_TOOL_RESULT_CHARS,
    check_fixed_prompt,
    fit_request,
    reply_room,
    request_tokens,
    shrink_text,
)
from nanobot.errors import ContextTooSmallError
from nanobot.messages import tool_call
from nanobot.tokens import Calibration, TokenCounter, default_counter


def _file_text(kb: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    words = ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(500)]
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
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "read_file", {"path": "big.txt"})]},
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
        {"role": "assistant", "content": None, "tool_calls": [tool_call("a", "read_file", {"path": "s"}),
                                                              tool_call("b", "read_file", {"path": "b"})]},
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
        {"role": "assistant", "content": None, "tool_calls": [tool_call("o", "read_file", {"path": "o"})]},
        {"role": "tool", "tool_call_id": "o", "name": "read_file", "content": old},
        {"role": "assistant", "content": "done"},
    ]
    msgs = _turn(_file_text(40, seed=5), history=history)
    turn_start = len(history) + 1
    roomy = fit_request(msgs, 25_000, counter, turn_start=turn_start)
    assert roomy[3]["content"] == old  # this turn's result alone was enough
    tight = fit_request(msgs, 3000, counter, turn_start=turn_start)
    assert len(tight[-1]["content"]) < MIN_TOOL_RESULT_CHARS + 400  # this turn's result at its minimum
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
    tools = [{"type": "function", "function": {"name": "x" * 50, "description": "d " * 400,
                                                "parameters": {"type": "object", "properties": {}}}}]
    msgs = _turn(_file_text(80, seed=7))
    out = fit_request(msgs, 6000, counter, turn_start=1, tools=tools, calibration=calibration)
    assert request_tokens(out, counter, tools=tools, calibration=calibration) <= 6000
    assert request_tokens(out, counter) <= 6000 / 1.5


def test_nothing_left_to_cut_returns_best_effort_without_looping():
    counter = _counter()
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "word " * 5000}]
    out = fit_request(msgs, 1000, counter, turn_start=1)
    assert out == msgs


def test_small_results_that_would_grow_with_the_marker_are_left_alone():
    counter = _counter()
    msgs = _turn("y " * 300)
    for i in range(10):  # many small results, none worth cutting
        msgs += [{"role": "assistant", "content": None, "tool_calls": [tool_call(f"k{i}", "exec", {"c": i})]},
                 {"role": "tool", "tool_call_id": f"k{i}", "name": "exec", "content": "z " * 180}]
    out = fit_request(msgs, 100, counter, turn_start=1)
    for before, after in zip(msgs, out):
        assert len(str(after.get("content"))) <= len(str(before.get("content")))


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


def test_fixed_prompt_that_fits_returns_its_size():
    counter = _counter()
    assert check_fixed_prompt("short system prompt", None, 2048, 8192, counter) > 0


def test_fixed_prompt_too_big_says_by_how_much_and_what_to_change():
    counter = _counter()
    system = "fact " * 7000
    with pytest.raises(ContextTooSmallError) as info:
        check_fixed_prompt(system, None, 2048, 8192, counter, memory_tokens=6500)
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
    fixed = check_fixed_prompt(context.system_prompt(), tools.schemas(), reply_room(8192, 8192), 8192, _counter())
    assert fixed < 8192 - 2048 - 1024
