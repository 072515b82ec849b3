"""Compaction never holds the user hostage (issue 30 items 5, 8; issue 33 item 4), in process:
an outage is not a refusal, a consolidation's failing calls are bounded, the summarising request
always fits or says why it cannot, and consolidation starts below huge windows."""

from __future__ import annotations

import dataclasses
import re

import pytest
from nanobot.agent.budget import ContextBudget
from nanobot.agent.consolidation import Consolidator
from nanobot.config import AgentDefaults
from nanobot.fakellm import Reply
from nanobot.messages import tool_call
from test_consolidation import MEMORY, Env, _echo_responder, _save

from scripted_llm import ScriptedLLM

OUTAGES = {
    "http_500": lambda: Reply.error(500, message="upstream exploded"),
    "http_503": lambda: Reply.error(503, message="service unavailable"),
    "overloaded_529": lambda: Reply.error(529, message="overloaded"),
    "rate_limited": lambda: Reply.error(429, message="slow down", retry_after=0),
    "connection_lost": lambda: Reply.cut_stream(),
    "bad_key": lambda: Reply.error(401, message="invalid x-api-key"),
}


def _markers(history: str) -> list[str]:
    return re.findall(r"<!-- nanobot chunk (\w+) \+\d+ -->", history)


@pytest.mark.parametrize("kind", sorted(OUTAGES))
def test_an_outage_archives_nothing_raw_and_the_next_consolidation_does_the_work(
    tmp_path, scripted_llm, kind
):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: OUTAGES[kind]()
    report = env.run()
    assert not report.raw_archived and report.postponed and report.messages == 0
    assert env.history() == "" and env.session.last_consolidated == 0  # pointer not advanced
    assert env.memory.read_memory() == MEMORY
    said = [n for n in env.notices if "postponed" in n.text]
    assert len(said) == 1 and said[0].level == "warning" and "Nothing was archived" in said[0].text
    asked = len(scripted_llm.requests)
    assert asked <= 3  # one call: the provider's own retries, then the consolidation stops
    # the provider is back: the same work is done, summarised
    scripted_llm.responder = lambda req: _save()
    env.store.close(env.session)
    later = Env(tmp_path, scripted_llm, memory="")  # the next run, from disk
    again = later.run()
    assert again.ran and not again.raw_archived and later.session.last_consolidated > 0
    assert "Ana talked about fact0" in later.history() and "RAW" not in later.history()
    scripted_llm.assert_all_valid()


def test_a_hung_call_is_an_outage_not_a_refusal(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.cons.timeout = 0.2
    env.add_turns(12)
    scripted_llm.responder = lambda req: dataclasses.replace(_save(), delay=2)
    report = env.run()
    assert "took longer than 0.2 s" in report.postponed and not report.raw_archived
    assert env.history() == "" and env.session.last_consolidated == 0
    assert len(scripted_llm.requests) == 1


def test_a_model_that_never_saves_costs_three_calls_per_consolidation_not_fifteen(tmp_path):
    # enough backlog for several rounds: today's loop paid 3 tries in each of up to 5 rounds
    with ScriptedLLM(context_window=1500) as server:
        env = Env(tmp_path, server, window=1500, reply=300)
        env.add_turns(40)
        server.responder = lambda req: Reply.text("Sure, here is a summary: all good.")
        report = env.run()
        assert len(server.requests) == 3 and report.failed_calls == 3
        assert report.raw_archived and report.rounds == 1
        assert env.history().count("RAW archive") == 1
        env.assert_nothing_lost()
        server.assert_all_valid()


def test_new_after_a_failed_chunk_archives_the_rest_raw_without_more_calls(tmp_path):
    with ScriptedLLM(context_window=1500) as server:
        env = Env(tmp_path, server, window=1500, reply=300)
        env.add_turns(30)
        server.responder = lambda req: Reply.text("no tool for you")
        report = env.run(lambda: env.cons.archive_all(env.session, emit=env.notices.append))
        assert len(server.requests) == 3
        assert env.session.last_consolidated == len(env.session.messages)  # /new may clear now
        assert (
            env.history().count("RAW archive") == 2
        )  # the chunk that failed, then the rest in one entry
        env.assert_nothing_lost()
        assert report.messages == len(env.session.messages)


def test_new_during_an_outage_records_everything_raw_with_one_call(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    scripted_llm.responder = lambda req: Reply.error(401, message="invalid api key")
    env.run(lambda: env.cons.archive_all(env.session, emit=env.notices.append))
    assert len(scripted_llm.requests) == 1
    assert env.session.last_consolidated == len(env.session.messages)
    env.assert_nothing_lost()


def test_every_entry_names_its_chunk_once(tmp_path):
    with ScriptedLLM(context_window=1500) as server:
        env = Env(tmp_path, server, window=1500, reply=300)
        env.add_turns(30)
        server.responder = _echo_responder
        report = env.run(lambda: env.cons.archive_all(env.session, emit=env.notices.append))
        markers = _markers(env.history())
        assert len(markers) == len(set(markers)) == len(report.history_entries) > 3


def test_a_turn_too_big_for_any_rendering_is_summarised_from_a_cut_excerpt(tmp_path):
    # one turn of 120 tool calls: even at the tightest rendering its transcript is bigger than the window
    with ScriptedLLM(context_window=2500) as server:
        env = Env(tmp_path, server, window=2500, reply=400)
        turn = [
            {
                "role": "user",
                "content": "turn 0: check every host",
                "timestamp": "2026-01-05T10:00:00",
            }
        ]
        for i in range(120):
            turn += [
                {
                    "role": "assistant",
                    "content": None,
                    "timestamp": "2026-01-05T10:00:00",
                    "tool_calls": [
                        tool_call(
                            f"h{i}", "exec", {"command": f"ping -c1 host{i}.example " + "x" * 150}
                        )
                    ],
                },
                {
                    "role": "tool",
                    "tool_call_id": f"h{i}",
                    "name": "exec",
                    "content": f"host{i} up",
                    "timestamp": "2026-01-05T10:00:00",
                },
            ]
        turn.append(
            {
                "role": "assistant",
                "content": "answer 0: all hosts up",
                "timestamp": "2026-01-05T10:01:00",
            }
        )
        env.store.append(env.session, turn)
        env.add_turns(1, start=1)
        server.responder = _echo_responder
        report = env.run(lambda: env.cons.compact(env.session))
        server.assert_all_valid()  # includes "context window exceeded"
        assert len(server.requests) == 1 and not report.raw_archived and not report.postponed
        assert "characters of this excerpt cut" in server.requests[0].messages[-1]["content"]
        assert env.session.last_consolidated == len(turn)


def test_memory_too_big_for_the_reply_postpones_with_one_clear_message_and_no_call(
    tmp_path, scripted_llm
):
    big = "# Memory\n\n" + "".join(
        f"- fact {i}: the user likes blue tea number {i} a lot.\n" for i in range(60)
    )
    env = Env(tmp_path, scripted_llm, window=6000, reply=500, memory=big)
    env.add_turns(24)
    scripted_llm.responder = lambda req: _save()
    first, second = env.run(), env.run()
    assert scripted_llm.requests == []  # a call that cannot succeed is not paid for
    assert first.postponed and second.postponed and not first.raw_archived
    said = [n.text for n in env.notices if "postponed" in n.text]
    assert len(said) == 1 and "nanobot memory edit" in said[0] and "maxTokens" in said[0]
    assert env.history() == "" and env.session.last_consolidated == 0


def test_consolidation_starts_at_the_setting_below_a_huge_window(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.budget = ContextBudget(window=1_000_000, max_tokens=8192, consolidate_above=2000)
    env.cons = Consolidator(env.provider, env.memory, env.store, env.budget)
    env.add_turns(12)  # ~3,000 tokens: nothing at a 1M window without the setting
    scripted_llm.responder = lambda req: _save()
    report = env.run()
    assert report.ran and report.before >= 2000 and report.after <= 1000
    assert "Ana talked about fact0" in env.history()


def test_the_default_start_is_well_below_a_1m_window_and_changes_nothing_at_64k():
    default = AgentDefaults.consolidate_above_tokens
    huge = ContextBudget(window=1_000_000, max_tokens=8192, consolidate_above=default)
    usual = ContextBudget(
        window=AgentDefaults.context_window_tokens, max_tokens=8192, consolidate_above=default
    )
    assert huge.consolidate_at == default == 100_000 and huge.budget > 900_000
    assert usual.consolidate_at == usual.budget  # the default window's budget is below it
    assert ContextBudget(window=1_000_000, max_tokens=8192).consolidate_at == huge.budget  # 0: off


def test_compact_during_an_outage_says_nothing_was_archived(tmp_path, scripted_llm):
    env = Env(tmp_path, scripted_llm)
    env.add_turns(6)
    scripted_llm.responder = lambda req: Reply.error(503, message="service unavailable")
    report = env.run(lambda: env.cons.compact(env.session, emit=env.notices.append))
    assert report.receipt().startswith("nothing archived: the provider is unavailable")
    assert env.history() == "" and env.session.last_consolidated == 0


def test_a_consolidation_postponed_again_leaves_no_compacting_line_without_an_end(
    tmp_path, scripted_llm
):
    # The provider is down for a while: each turn's consolidation is postponed. The reason is said
    # once; a "compacting N messages…" line every later turn would be left dangling, as if it ran.
    env = Env(tmp_path, scripted_llm)
    env.add_turns(12)
    down = lambda req: Reply.error(503, message="service unavailable")  # noqa: E731
    said: list[list[str]] = []

    async def four_turns():
        for turn, responder in enumerate((down, down, lambda req: _save(), down)):
            if turn == 3:  # back, then down again when the session has grown once more
                env.add_turns(12, start=12)
            scripted_llm.responder = responder
            before = len(env.notices)
            await env.maybe()
            said.append([n.text for n in env.notices[before:]])

    env.run(four_turns)
    first, second, third, fourth = said
    assert any(t.startswith("compacting") for t in first) and any("postponed" in t for t in first)
    assert second == []  # the reason was said; no start line left without an end
    assert any(t.startswith("compaction done") for t in third)
    assert any("postponed" in t for t in fourth)  # a new outage is news: said again
