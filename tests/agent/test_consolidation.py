"""Consolidation against the fake server: what reaches MEMORY.md, HISTORY.md and the pointer."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re

import pytest
from nanobot.agent.budget import ContextBudget
from nanobot.agent.consolidation import (
    ConsolidationFailure,
    Consolidator,
    parse_save_memory,
    render_transcript,
)
from nanobot.agent.events import Notice
from nanobot.fakellm import FakeLLMServer, Reply
from nanobot.memory.store import MemoryStore
from nanobot.messages import tool_call
from nanobot.providers.retry import RetryingProvider, RetryPolicy
from nanobot.session.store import SessionStore
from nanobot.tokens import TokenCounter, default_counter

from scripted_llm import ScriptedLLM

SYSTEM = "You are nanobot, a helpful assistant."
MEMORY = "# Memory\n\n- The user is Ana, a geologist.\n- Ana lives in Porto.\n"


def _filler(i: int, words: int = 60) -> str:
    return " ".join(f"word{(i * 7 + k) % 97}" for k in range(words))


def _turn(i: int, *, tool: bool = False, minute: int | None = None) -> list[dict]:
    stamp = f"2026-01-05T10:{(minute if minute is not None else i) % 60:02d}:00"
    msgs = [
        {"role": "user", "content": f"turn {i}: fact{i} is blue. {_filler(i)}", "timestamp": stamp}
    ]
    if tool:
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "timestamp": stamp,
                "tool_calls": [tool_call(f"c{i}", "read_file", {"path": f"notes{i}.md"})],
            },
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "name": "read_file",
                "content": _filler(i + 1),
                "timestamp": stamp,
            },
        ]
    msgs.append(
        {"role": "assistant", "content": f"answer {i}. {_filler(i + 2)}", "timestamp": stamp}
    )
    return msgs


class Env:
    def __init__(
        self,
        tmp_path,
        server: FakeLLMServer,
        *,
        window: int = 3000,
        reply: int = 500,
        counter: TokenCounter | None = None,
        memory: str = MEMORY,
    ) -> None:
        self.server = server
        self.store = SessionStore(tmp_path / "sessions")
        self.session = self.store.open("cli:test")
        self.memory = MemoryStore(tmp_path / "ws")
        if memory:
            self.memory.write_memory(memory, reason="test setup")
        inner = server.provider("openai")  # the real adapter and SDK, answered in process
        self.provider = RetryingProvider(
            inner, RetryPolicy(attempts=3, base_delay=0.0, max_delay=0.0)
        )
        self.notices: list[Notice] = []
        self.budget = ContextBudget(
            window=window, max_tokens=reply, counter=counter or default_counter()
        )
        self.cons = Consolidator(self.provider, self.memory, self.store, self.budget)

    def add_turns(self, n: int, *, start: int = 0, tool: bool = False) -> None:
        for i in range(start, start + n):
            self.store.append(self.session, _turn(i, tool=tool))

    def run(self, coro_fn=None):
        async def go():
            try:
                return await (coro_fn or self.maybe)()
            finally:
                await self.provider.aclose()

        return asyncio.run(go())

    def maybe(self):
        return self.cons.maybe_consolidate_by_tokens(
            self.session, system_prompt=SYSTEM, tool_schemas=None, emit=self.notices.append
        )

    def history(self) -> str:
        return self.memory.history_file.read_text() if self.memory.history_file.exists() else ""

    def assert_nothing_lost(self) -> None:
        """Every user/assistant text is still unconsolidated or findable in HISTORY.md."""
        history = self.history()
        for i, msg in enumerate(self.session.messages):
            if (
                i >= self.session.last_consolidated
                or msg["role"] == "tool"
                or not msg.get("content")
            ):
                continue
            fact = re.match(r"(turn|answer) (\d+)", msg.get("content") or "")
            assert fact and f"{fact.group(1)} {fact.group(2)}" in history, (
                f"message {i} lost: {msg}"
            )


def _save(
    history: str = "[2026-01-05 10:00] Ana talked about fact0 and fact1; decided on blue.",
    memory: str = MEMORY + "- fact0 is blue.\n",
    **reply,
) -> Reply:
    return Reply.tool_calls(
        [("save_memory", {"history_entry": history, "memory_update": memory})], **reply
    )


def _echo_responder(req):
    """Summarise whatever transcript arrives: quote its turn/answer markers so nothing is lost."""
    body = req.messages[-1]["content"]
    markers = " ".join(
        sorted(set(re.findall(r"(?:turn|answer) \d+", body)), key=lambda s: int(s.split()[1]))
    )
    current = body.split("## Current MEMORY.md\n\n")[1].split("\n\n## Conversation excerpt")[0]
    current = re.sub(
        r"\n- seen: .*", "", current
    )  # one "seen" line: MEMORY.md stays inside the reply room
    return _save(f"Summary: {markers}.", current + "\n- seen: " + markers[:60] + "\n")


# -- boundaries and estimates --------------------------------------------------------------------


def test_boundary_is_always_just_before_a_user_message(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(6, tool=True)
    msgs = env.session.messages
    for need in (0, 1, 50, 200, 400, 800, 10_000):
        end = env.cons.pick_consolidation_boundary(env.session, need)
        assert end is not None and msgs[end]["role"] == "user" and end > 0
        removed = sum(env.budget.counter.count_message(m) for m in msgs[:end])
        assert removed >= need or end == max(i for i, m in enumerate(msgs) if m["role"] == "user")
    env.store.set_pointer(env.session, 8)  # start of turn 2
    end = env.cons.pick_consolidation_boundary(env.session, 1)
    assert end == 12


def test_no_boundary_inside_a_single_turn(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(1, tool=True)
    assert env.cons.pick_consolidation_boundary(env.session, 1) is None


def test_history_estimate_matches_get_history_and_counts_only_new_messages(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm, counter=TokenCounter(default_counter()._encode))
    env.add_turns(5, tool=True)
    counter = env.budget.counter
    assert env.budget.history_tokens(env.session) == counter.count_messages(
        env.session.get_history()
    )
    env.store.set_pointer(env.session, 8)
    assert env.budget.history_tokens(env.session) == counter.count_messages(
        env.session.get_history()
    )
    misses = counter.misses
    env.store.append(env.session, _turn(99))
    env.budget.history_tokens(env.session)
    assert counter.misses - misses == 2  # just the new user and assistant message
    assert env.budget.history_tokens(env.session) == counter.count_messages(
        env.session.get_history()
    )


def test_under_budget_sends_nothing(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm, window=50_000)
    env.add_turns(3)
    report = env.run()
    assert not report.ran and scripted_llm.requests == [] and env.session.last_consolidated == 0


# -- the happy path ------------------------------------------------------------------------------


def test_consolidation_writes_both_files_then_moves_the_pointer(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: _save()
    before = env.cons.estimate(env.session, system_prompt=SYSTEM, tool_schemas=None)
    assert before >= env.budget.budget
    report = env.run()
    scripted_llm.assert_all_valid()
    assert report.ran and report.rounds >= 1 and not report.failures
    assert env.session.messages[env.session.last_consolidated]["role"] == "user"
    assert report.after <= env.budget.budget // 2 < report.before
    assert report.messages == env.session.last_consolidated
    reopened = SessionStore(tmp_path / "sessions").load("cli:test")
    assert reopened.last_consolidated == env.session.last_consolidated  # persisted
    assert "- fact0 is blue." in env.memory.read_memory()
    assert env.history().startswith("[2026-01-05 10:00] Ana talked about fact0")
    assert report.history_entries[0].startswith("[2026-01-05 10:00]")
    assert "[2026-01-05 10:00]" in report.receipt()
    req = scripted_llm.requests[0]
    assert req.tool_choice == {"type": "function", "function": {"name": "save_memory"}}
    assert [t["function"]["name"] for t in req.tools] == ["save_memory"]
    body = req.messages[-1]["content"]
    assert (
        "Ana lives in Porto" in body and "[2026-01-05 10:00] USER: turn 0: fact0 is blue." in body
    )
    assert "[2026-01-05 10:00]" in req.messages[0]["content"]  # the stamp the entry must start with
    assert any("compacting" in n.text and n.level == "info" for n in env.notices)


def test_pointer_moves_only_after_memory_and_history_are_on_disk(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: _save()
    seen = []
    real = env.store.set_pointer

    def checking_set_pointer(session, value):
        seen.append((env.history(), env.memory.read_memory()))
        real(session, value)

    env.store.set_pointer = checking_set_pointer
    env.run()
    assert seen and all("Ana talked about fact0" in h and "fact0 is blue" in m for h, m in seen)


def test_arguments_as_a_one_element_list_are_accepted(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    args = [
        {
            "history_entry": "[2026-01-05 10:00] listed entry",
            "memory_update": MEMORY + "- listed.\n",
        }
    ]
    scripted_llm.responder = lambda req: Reply.tool_calls([("save_memory", json.dumps(args))])
    report = env.run()
    assert report.ran and not report.failures and "listed entry" in env.history()


def test_parse_save_memory_shapes():
    good = {"history_entry": "h", "memory_update": "m"}
    assert parse_save_memory(good) == good
    assert parse_save_memory(json.dumps(good)) == good
    assert parse_save_memory(json.dumps(json.dumps(good))) == good
    assert parse_save_memory([good]) == good
    for bad in (
        "{nope",
        [good, good],
        {"history_entry": "h"},
        {"history_entry": None, "memory_update": "m"},
        7,
    ):
        with pytest.raises(ConsolidationFailure):
            parse_save_memory(bad)


def test_forced_tool_choice_rejected_then_auto_works(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.script(
        Reply.error(400, message="tool_choice of type 'function' is not supported by this model")
    )
    scripted_llm.responder = lambda req: _save()
    report = env.run()
    assert report.ran and not report.failures and not report.raw_archived
    choices = [r.tool_choice for r in scripted_llm.requests]
    assert choices[0] == {"type": "function", "function": {"name": "save_memory"}}
    assert all(c == "auto" for c in choices[1:])  # remembered for later rounds
    assert "Ana talked about fact0" in env.history()


def test_held_back_memory_update_still_records_the_chunk(tmp_path, scripted_llm):
    facts = "# Memory\n\n" + "".join(
        f"- long standing fact number {i} about Ana.\n" for i in range(8)
    )
    env = Env(tmp_path, scripted_llm, memory=facts)
    env.add_turns(12)
    scripted_llm.responder = lambda req: _save(memory="# Memory\n\n- only one new fact.\n")
    report = env.run()
    assert report.ran and not report.raw_archived
    assert any("held back" in notice for notice in report.notices)
    memory = env.memory.read_memory()
    assert all(f"fact number {i}" in memory for i in range(8)) and "only one new fact" in memory
    assert "Ana talked about fact0" in env.history()


# -- adversarial replies -------------------------------------------------------------------------

ADVERSARIAL = {
    "no_tool_call": lambda: Reply.text("I summarised it for you: all good."),
    "invalid_json": lambda: Reply.tool_calls(
        [("save_memory", '{"history_entry": "[2026-01-05 10:00] x", ')]
    ),
    "null_fields": lambda: Reply.tool_calls(
        [("save_memory", {"history_entry": None, "memory_update": None})]
    ),
    "missing_field": lambda: Reply.tool_calls(
        [("save_memory", {"history_entry": "[2026-01-05 10:00] x"})]
    ),
    "empty_memory_update": lambda: _save(memory=""),
    "finish_reason_length": lambda: dataclasses.replace(
        _save(memory="# Memory\n\n- The user is"), finish_reason="length"
    ),
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_adversarial_reply_loses_nothing_and_never_wipes_memory(tmp_path, scripted_llm, kind):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: ADVERSARIAL[kind]()
    report = env.run()
    assert env.memory.read_memory() == MEMORY
    env.assert_nothing_lost()
    assert report.raw_archived and len(report.failures) >= 3
    assert "RAW archive" in env.history() and re.match(
        r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]", env.history()
    )
    assert env.session.messages[env.session.last_consolidated]["role"] == "user"
    assert any(n.level == "warning" and "archived" in n.text for n in env.notices)
    assert (
        len(scripted_llm.requests) == 3
    )  # three failing calls, then the consolidation stops paying
    scripted_llm.assert_all_valid()


def test_one_bad_reply_then_good_is_a_normal_consolidation(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.script(ADVERSARIAL["no_tool_call"]())
    scripted_llm.responder = lambda req: _save()
    report = env.run()
    assert len(report.failures) == 1 and not report.raw_archived
    assert "Ana talked about fact0" in env.history() and "RAW" not in env.history()


# -- fitting the consolidation request itself ----------------------------------------------------


def test_chunk_too_big_for_one_request_is_split_at_user_boundaries(tmp_path):
    # the request's fixed part (instructions, the previous checkpoint, MEMORY.md growing by one line a
    # piece) takes ~700 of this window's 1,300 prompt tokens by the last piece: each piece is a few turns
    with ScriptedLLM(context_window=1600) as server:
        env = Env(tmp_path, server, window=1600, reply=300)
        env.add_turns(30)
        server.responder = _echo_responder
        report = env.run(lambda: env.cons.archive_all(env.session, emit=env.notices.append))
        server.assert_all_valid()  # includes "context window exceeded"
        assert env.session.last_consolidated == len(env.session.messages)
        assert len(server.requests) > 3 and not report.raw_archived
        assert report.messages == len(env.session.messages)
        assert len(report.history_entries) == len(server.requests)
        for req in server.requests:
            first = req.messages[-1]["content"].split("## Conversation excerpt")[1].split("\n")[2]
            assert "USER: turn" in first  # every piece starts at a user message
        env.assert_nothing_lost()


def test_single_huge_turn_is_summarised_with_cut_tool_results(tmp_path):
    with ScriptedLLM(context_window=2500) as server:
        env = Env(tmp_path, server, window=2500, reply=400)
        huge = [
            {"role": "user", "content": "turn 0: read the log", "timestamp": "2026-01-05T10:00:00"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("h", "read_file", {"path": "log"})],
                "timestamp": "2026-01-05T10:00:00",
            },
            {
                "role": "tool",
                "tool_call_id": "h",
                "name": "read_file",
                "content": _filler(1, 3000),
                "timestamp": "2026-01-05T10:00:00",
            },
            {
                "role": "assistant",
                "content": "answer 0: the log is fine",
                "timestamp": "2026-01-05T10:01:00",
            },
        ]
        env.store.append(env.session, huge)
        env.add_turns(1, start=1)
        server.responder = _echo_responder
        report = env.run(lambda: env.cons.compact(env.session))
        server.assert_all_valid()
        assert not report.raw_archived and env.session.last_consolidated == 4
        assert "characters cut" in server.requests[0].messages[-1]["content"]
        env.assert_nothing_lost()


def test_render_transcript_is_readable():
    text = render_transcript(_turn(3, tool=True), tool_chars=30)
    lines = text.splitlines()
    assert lines[0].startswith("[2026-01-05 10:03] USER: turn 3: fact3 is blue.")
    assert lines[1] == '[2026-01-05 10:03] ASSISTANT called read_file({"path": "notes3.md"})'
    assert (
        lines[2].startswith("[2026-01-05 10:03] TOOL RESULT (read_file): ")
        and "characters cut" in lines[2]
    )
    assert lines[3].startswith("[2026-01-05 10:03] ASSISTANT: answer 3.")


# -- /new, /compact, tokenizer fallback, crash, concurrency --------------------------------------


def test_compact_keeps_the_last_exchange_and_archive_all_takes_everything(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm, window=50_000)
    env.add_turns(4, tool=True)
    scripted_llm.responder = lambda req: _save()
    pointers = []

    async def both():
        compacted = await env.cons.compact(env.session)
        pointers.append(env.session.last_consolidated)
        return compacted, await env.cons.archive_all(env.session)

    compacted, archived = env.run(both)
    assert pointers == [12] and compacted.messages == 12  # the last exchange (turn 3) stayed
    assert env.session.last_consolidated == 16 and archived.messages == 4
    assert env.history().count("Ana talked about fact0") == 2


def test_consolidation_still_triggers_with_the_fallback_estimator(
    tmp_path, scripted_llm, monkeypatch
):
    monkeypatch.setenv("NANOBOT_TOKENIZER", "fallback")
    counter = default_counter()
    assert not counter.exact
    env = Env(tmp_path, scripted_llm, counter=counter)
    env.add_turns(12)
    assert (
        env.cons.estimate(env.session, system_prompt=SYSTEM, tool_schemas=None) > env.budget.budget
    )
    scripted_llm.responder = lambda req: _save()
    report = env.run()
    assert report.ran and env.session.last_consolidated > 0


def test_crash_between_history_append_and_pointer_write_loses_nothing(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: _save()

    def crash(session, value):
        raise RuntimeError("power cut")

    env.store.set_pointer = crash
    with pytest.raises(RuntimeError, match="power cut"):
        env.run()
    assert "Ana talked about fact0" in env.history()
    env.store.close(env.session)

    again = Env(tmp_path, scripted_llm, memory="")  # a fresh process: the session is read from disk
    assert again.session.last_consolidated == 0 and len(again.session.messages) == 24
    asked = len(scripted_llm.requests)
    report = again.run()
    assert report.ran and again.session.last_consolidated > 0
    # the entry written before the crash is found by its marker: the pointer moves, no second entry
    markers = re.findall(r"<!-- nanobot chunk (\w+) \+\d+ -->", again.history())
    assert len(markers) == len(set(markers)) == 1 + len(report.history_entries)
    assert all("turn 0:" not in r.messages[-1]["content"] for r in scripted_llm.requests[asked:])


def test_one_consolidation_at_a_time_per_session(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: dataclasses.replace(_save(), delay=0.2)

    async def twice():
        try:
            return await asyncio.gather(env.maybe(), env.maybe())
        finally:
            await env.provider.aclose()

    first, second = asyncio.run(twice())
    assert first.ran and not second.ran  # the second waited, then found the prompt under budget
    assert env.history().count("Ana talked about fact0") == len(first.history_entries)


def test_a_refused_forced_tool_choice_is_remembered_by_the_provider_not_the_consolidator(
    tmp_path, scripted_llm
):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.script(
        Reply.error(400, message="tool_choice of type 'function' is not supported by this model")
    )
    scripted_llm.responder = lambda req: _save()
    seen: list[int] = []

    async def twice():
        await env.maybe()
        seen.append(len(scripted_llm.requests))
        # a new consolidator on the same provider asks nicely at once
        env.cons = Consolidator(env.provider, env.memory, env.store, env.budget)
        env.add_turns(12, start=12)
        return await env.maybe()

    assert env.run(twice).ran
    assert env.provider.capabilities.forced_tool_choice is False
    later = [r.tool_choice for r in scripted_llm.requests[seen[0] :]]
    assert later and all(c == "auto" for c in later)


def test_a_400_that_is_not_about_tool_choice_is_not_retried_with_auto(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: Reply.error(400, message="messages: roles must alternate")
    report = env.run()
    assert report.raw_archived and "RAW archive" in env.history()
    assert {str(r.tool_choice) for r in scripted_llm.requests} == {
        str({"type": "function", "function": {"name": "save_memory"}})
    }
    assert env.provider.capabilities.forced_tool_choice is True
