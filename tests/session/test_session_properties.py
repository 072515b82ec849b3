"""Fuzzing: whatever a session file contains, every request built from it is valid for OpenAI and Anthropic."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nanobot.fakellm import rules
from nanobot.messages import assistant, for_wire, tool_call, tool_result, user
from nanobot.providers import anthropic_format
from nanobot.session.store import SessionStore
from nanobot.session.validity import make_valid, repair_messages

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])

SYSTEM = {"role": "system", "content": "You are nanobot."}
texts = st.sampled_from(["hi", "ok", "list the files", "多谢", "line\nbreak", "a  b"])
blank = st.sampled_from(["", " ", "\n\t", None])
# Ids that collide once Anthropic's adapter maps unsafe characters to "_".
ids = st.sampled_from(["call_1", "call_2", "call.1", "toolu-9", "x", "a/b", "a_b"])
tools = st.sampled_from(["read_file", "exec", "web_fetch"])


def violations(history: list[dict]) -> list[str]:
    """Everything the providers would reject in a request carrying `history`."""
    problems = []
    for request in ([*history, user("next question")], [SYSTEM, *history, user("next question")]):
        problems += ["openai: " + v for v in rules.check_openai_messages(request)]
        system, messages = anthropic_format.to_anthropic(request)
        problems += ["anthropic: " + v for v in rules.check_anthropic_request(system, messages)]
    return problems


@st.composite
def clean_turns(draw) -> list[list[dict]]:
    """Well-formed turns: user, tool steps with their results, a final answer; ids unique."""
    turns, counter = [], 0
    for _ in range(draw(st.integers(1, 5))):
        messages = [user(draw(texts))]
        for _ in range(draw(st.integers(0, 2))):
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                calls.append(tool_call(f"call_{counter}", draw(tools), {"n": counter}))
            messages.append(assistant(draw(st.one_of(st.none(), texts)), calls))
            messages += [tool_result(c["id"], c["function"]["name"], draw(texts)) for c in calls]
        messages.append(assistant(draw(texts)))
        turns.append(messages)
    return turns


@st.composite
def damaged_messages(draw) -> list[dict]:
    messages = [m for t in draw(clean_turns()) for m in t]
    for _ in range(draw(st.integers(0, 6))):
        op = draw(
            st.sampled_from(
                [
                    "drop_result",
                    "orphan",
                    "dup_id",
                    "injected",
                    "empty",
                    "leading",
                    "late_result",
                    "junk",
                    "dup_result",
                    "bad_call",
                    "odd_calls",
                ]
            )
        )
        at = draw(st.integers(0, len(messages)))
        if op == "drop_result":
            results = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
            if results:
                messages.pop(draw(st.sampled_from(results)))
        elif op == "orphan":
            messages.insert(at, tool_result(draw(ids), draw(tools), draw(texts)))
        elif op == "dup_id":
            # Give a later call the id of another call, results included: duplicates across history.
            callers = [
                m
                for m in messages
                if isinstance(m.get("tool_calls"), list)
                and m["tool_calls"]
                and all(isinstance(c, dict) and "id" in c for c in m["tool_calls"])
            ]
            if callers:
                target = draw(st.sampled_from(callers))
                old = target["tool_calls"][0]["id"]
                new = draw(
                    st.one_of(
                        ids, st.sampled_from([c["id"] for m in callers for c in m["tool_calls"]])
                    )
                )
                target["tool_calls"][0] = {**target["tool_calls"][0], "id": new}
                for m in messages:
                    if m.get("tool_call_id") == old:
                        m["tool_call_id"] = new
        elif op == "injected":
            messages.insert(at, assistant(f"[subagent result] {draw(texts)}"))
        elif op == "empty":
            candidates = [
                i for i, m in enumerate(messages) if m.get("role") in ("user", "assistant")
            ]
            if candidates:
                i = draw(st.sampled_from(candidates))
                messages[i] = {**messages[i], "content": draw(blank)}
        elif op == "leading":
            messages.insert(
                0, draw(st.sampled_from([assistant("stale"), tool_result("call_1", "exec", "r")]))
            )
        elif op == "late_result":
            messages.insert(at, tool_result(f"call_{draw(st.integers(1, 9))}", "exec", "late"))
        elif op == "junk":
            messages.insert(
                at,
                draw(
                    st.sampled_from(
                        [
                            {"role": "wizard", "content": "x"},
                            {"role": "system", "content": "mid"},
                            {"content": "no role"},
                            {"role": "assistant", "content": 42},
                            {"role": "tool", "content": "no id"},
                            {"role": "user", "content": [{"type": "text", "text": " "}]},
                        ]
                    )
                ),
            )
        elif op == "dup_result":
            results = [m for m in messages if m.get("role") == "tool"]
            if results:
                messages.insert(at, dict(draw(st.sampled_from(results))))
        elif op == "bad_call":
            messages.insert(
                at, assistant(draw(texts), [{"id": draw(ids)}, {"function": {"name": "f"}}])
            )
        elif op == "odd_calls":  # tool_calls that are not a list of calls at all
            odd = draw(
                st.sampled_from(
                    [[], {"id": "call_1", "function": {"name": "f"}}, "call_1", [1, None]]
                )
            )
            messages.insert(at, {"role": "assistant", "content": draw(texts), "tool_calls": odd})
    return messages


def write_file(
    path: Path,
    messages: list[dict],
    pointer,
    *,
    corrupt: list[int],
    torn: float | None,
    newline: bool,
) -> None:
    meta = {
        "_type": "metadata",
        "key": "k",
        "created_at": "2026-03-01T10:00:00",
        "updated_at": "2026-03-01T10:00:00",
        "metadata": {},
        "last_consolidated": pointer,
    }
    lines = [json.dumps(meta, ensure_ascii=False).encode()]
    lines += [
        json.dumps(
            {**m, "timestamp": "2026-03-01T10:00:00"} if isinstance(m, dict) else m,
            ensure_ascii=False,
        ).encode()
        for m in messages
    ]
    for i in corrupt:
        if 1 <= i < len(lines):
            lines[i] = lines[i][: len(lines[i]) // 2] + b"\xff\xfe garbage"
    data = b"\n".join(lines) + (b"\n" if newline else b"")
    if torn is not None:
        last_start = data.rstrip(b"\n").rfind(b"\n") + 1
        data = data[: last_start + int((len(data) - last_start) * torn)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


file_damage = st.fixed_dictionaries(
    {
        "pointer": st.one_of(st.integers(-5, 60), st.none(), st.just("3")),
        "corrupt": st.lists(st.integers(1, 40), max_size=3),
        "torn": st.one_of(st.none(), st.floats(0, 1)),
        "newline": st.booleans(),
        "window": st.one_of(st.none(), st.integers(0, 30)),
        "locked": st.booleans(),
    }
)


@FUZZ
@given(messages=damaged_messages(), damage=file_damage)
def test_history_from_any_damaged_file_is_valid_for_both_providers(messages, damage):
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp))
        write_file(
            store.path_for("k"),
            messages,
            damage["pointer"],
            corrupt=damage["corrupt"],
            torn=damage["torn"],
            newline=damage["newline"],
        )
        session = store.open("k") if damage["locked"] else store.load("k")
        assert 0 <= session.last_consolidated <= len(session.messages)
        history = session.get_history(max_messages=damage["window"])
        assert violations(history) == [], history
        if damage["locked"]:
            store.append(session, [user("after damage"), assistant("fine")])
            store.close(session)
            reloaded = store.load("k")
            assert reloaded.warnings == []
            assert [m.get("content") for m in reloaded.messages[-2:]] == ["after damage", "fine"]


@FUZZ
@given(messages=damaged_messages())
def test_make_valid_output_is_valid_and_stable(messages):
    once = make_valid(messages)
    assert violations([for_wire(m) for m in once if m.get("role") != "system"]) == []
    assert make_valid(once) == once


@FUZZ
@given(messages=damaged_messages(), pointer=st.integers(0, 60))
def test_repair_keeps_every_real_message_and_history_stays_valid(messages, pointer):
    pointer = min(pointer, len(messages))
    fixed, new_pointer, _ = repair_messages(messages, pointer)
    assert 0 <= new_pointer <= len(fixed)
    kept_users = [m["content"] for m in fixed if m.get("role") == "user"]
    assert kept_users == [
        m["content"] for m in messages if isinstance(m, dict) and m.get("role") == "user"
    ]
    # as get_history does: stored system messages are never sent (the prompt is built fresh)
    unsent = [m for m in fixed[new_pointer:] if m.get("role") != "system"]
    assert violations([for_wire(m) for m in make_valid(unsent)]) == []
    assert repair_messages(fixed, new_pointer)[0] == fixed


@FUZZ
@given(turns=clean_turns(), data=st.data())
def test_undamaged_session_history_is_unchanged(turns, data):
    messages = [m for t in turns for m in t]
    boundaries = [0]
    for t in turns[:-1]:
        boundaries.append(boundaries[-1] + len(t))
    pointer = data.draw(st.sampled_from(boundaries))
    with tempfile.TemporaryDirectory() as tmp:
        store = SessionStore(Path(tmp))
        write_file(store.path_for("k"), messages, pointer, corrupt=[], torn=None, newline=True)
        session = store.open("k")
        assert session.warnings == []
        history = session.get_history()
        assert history == [for_wire(m) for m in messages[pointer:]]
        assert violations(history) == []
        store.close(session)


def test_the_checks_reject_the_damage_the_fuzzer_makes():
    # Without this, a silently permissive checker would make every property above pass.
    raw = [
        assistant("stale"),
        user("q"),
        assistant("a"),
        assistant(None, [tool_call("A", "exec", {})]),
        tool_result("Z", "exec", "orphan"),
    ]
    assert any(v.startswith("openai") for v in violations(raw))
    assert any(v.startswith("anthropic") for v in violations(raw))
    assert violations(make_valid(raw)) == []
