"""Spend through the real `nanobot` command against the fake server: the ledger, `nanobot usage`,
the helper limits, the background daily limits, the heartbeat and background sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from nanobot.fakellm import Reply
from nanobot.usage.ledger import UsageRecord, read_records

REPORT_MARK = "A background helper you started has ended"


def _is_subagent(request) -> bool:
    return "You are a subagent" in json.dumps(request.body)


def _is_consolidation(request) -> bool:
    return "save_memory" in json.dumps(request.tools or [])


def _ends_with_report(request) -> bool:
    return REPORT_MARK in json.dumps(request.messages[-1])


def _ledger(home: Path) -> list[UsageRecord]:
    return list(read_records(home / "usage"))


def _set_config(home: Path, **sections) -> None:
    path = home / "config.json"
    data = json.loads(path.read_text())
    for key, value in sections.items():
        data[key] = value
    path.write_text(json.dumps(data))


def runaway_responder(calls: dict):
    """A model that answers every helper's report by starting another helper (issue 33's runaway)."""

    def respond(request):
        calls["all"] = calls.get("all", 0) + 1
        if _is_subagent(request):
            calls["helpers"] = calls.get("helpers", 0) + 1
            return Reply.text("found 3 files")
        if request.messages[-1].get("role") == "tool":
            return Reply.text(
                "Started another helper."
                if "not started" not in json.dumps(request.messages[-1])
                else "I could not start another helper; here is what they found."
            )
        return Reply.tool_calls([("spawn", {"task": "look again", "label": "helper"})])

    return respond


def test_the_spawn_chain_stops_at_the_limit_in_one_shot_mode(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    calls: dict = {}
    fake_llm.responder = runaway_responder(calls)
    result = nanobot_run("agent", "-m", "count the files")
    assert result.returncode == 0, result.stderr
    assert calls["helpers"] == 3  # usage.limits.helperChain's default: then the chain ends
    assert calls["all"] < 15  # was 3,082 requests in 25 s before the limit
    assert result.stderr.count("usage.limits.helperChain") == 1, result.stderr  # one clear notice
    # the refused spawn reached the model as an error result, and what was said is on disk
    session = "".join(p.read_text() for p in (isolated_home / "sessions").glob("*.jsonl"))
    assert session.count("nanobot note, not from the user") == 3
    assert "I could not start another helper" in session
    fake_llm.assert_all_valid()


def test_a_raised_chain_limit_allows_a_longer_chain(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    _set_config(isolated_home, usage={"limits": {"helperChain": 5}})
    calls: dict = {}
    fake_llm.responder = runaway_responder(calls)
    result = nanobot_run("agent", "-m", "count the files")
    assert result.returncode == 0, result.stderr
    assert calls["helpers"] == 5
    assert "usage.limits.helperChain = 5" in result.stderr


def test_helpers_per_turn_are_capped(nanobot_run, fake_llm, configure, isolated_home):
    configure()
    _set_config(isolated_home, usage={"limits": {"helpersPerTurn": 2}})
    state = {"helpers": 0}

    def respond(request):
        if _is_subagent(request):
            state["helpers"] += 1
            return Reply.text("done")
        if _ends_with_report(request) or request.messages[-1].get("role") == "tool":
            return Reply.text("ok")
        return Reply.tool_calls(
            [("spawn", {"task": f"part {i}", "label": f"p{i}"}) for i in range(4)]
        )

    fake_llm.responder = respond
    result = nanobot_run("agent", "-m", "split the work in four")
    assert result.returncode == 0, result.stderr
    assert state["helpers"] == 2
    assert result.stderr.count("usage.limits.helpersPerTurn = 2") == 1, result.stderr
    # the main agent's request after its spawn step (helpers' own requests may arrive before it)
    after_spawns = next(
        r
        for r in fake_llm.requests
        if not _is_subagent(r) and any(m.get("role") == "tool" for m in r.messages)
    )
    tool_results = [m for m in after_spawns.messages if m.get("role") == "tool"]
    assert sum("not started: a limit on helpers" in m["content"] for m in tool_results) == 2


def test_the_ledger_totals_equal_what_the_server_reported_by_source(
    nanobot_run, fake_llm, configure, isolated_home
):
    # a window small enough that the second turn's history is consolidated: one-shot, subagent and
    # consolidation calls in one run (the first run writes the workspace's prompt-file templates)
    configure(contextWindowTokens=7800, maxTokens=1000)
    long = "word " * 700

    def respond(request):
        if _is_consolidation(request):
            return Reply.tool_calls(
                [
                    (
                        "save_memory",
                        {
                            "history_entry": "[2026-01-01] talked",
                            "memory_update": "# Memory\n- likes words\n",
                        },
                    )
                ]
            )
        if _is_subagent(request):
            return Reply.text("helper report")
        if _ends_with_report(request):
            return Reply.text("the helper reported")
        if request.messages[-1].get("role") == "tool":
            return Reply.text("started")
        if "spawn please" in json.dumps(request.messages[-1]):
            return Reply.tool_calls([("spawn", {"task": "look", "label": "helper"})])
        return Reply.text("noted " + long)

    fake_llm.responder = respond
    for text in ("first " + long, "second " + long, "spawn please"):
        result = nanobot_run("agent", "-m", text)
        assert result.returncode == 0, result.stderr
    expected: dict[str, list[int]] = {}
    for request in fake_llm.requests:
        source = (
            "consolidation"
            if _is_consolidation(request)
            else "subagent"
            if _is_subagent(request)
            else "one-shot"
        )
        totals = expected.setdefault(source, [0, 0, 0])
        totals[0] += 1
        totals[1] += request.usage.prompt
        totals[2] += request.usage.completion
    got: dict[str, list[int]] = {}
    for record in _ledger(isolated_home):
        totals = got.setdefault(record.source, [0, 0, 0])
        totals[0] += 1
        totals[1] += record.prompt
        totals[2] += record.completion
        assert (
            record.outcome == "ok" and not record.estimated and record.model == "custom/test-model"
        )
    assert set(expected) == {"one-shot", "subagent", "consolidation"}
    assert got == expected
    # no text in the ledger: nothing the user or the model said
    raw = "".join(p.read_text() for p in (isolated_home / "usage").glob("*.jsonl"))
    assert "word" not in raw and "helper report" not in raw and "sk-test" not in raw
    # and `nanobot usage --json` reports the same
    report = json.loads(nanobot_run("usage", "--json").stdout)
    assert report["today"]["calls"] == len(fake_llm.requests)
    assert {k: v["calls"] for k, v in report["today"]["bySource"].items()} == {
        k: v[0] for k, v in expected.items()
    }
    assert report["today"]["promptTokens"] == sum(v[1] for v in expected.values())


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_usage_shows_costs_from_the_users_prices_and_the_cache_share(
    nanobot_run, fake_llm, configure, isolated_home, protocol
):
    configure(protocol)
    model = "custom/test-model" if protocol == "openai" else "anthropic/claude-test"
    _set_config(
        isolated_home, usage={"prices": {model: {"input": 2.0, "output": 8.0, "cacheRead": 0.5}}}
    )
    if protocol == "openai":  # OpenAI counts cached tokens inside prompt_tokens
        usage = {"prompt_tokens": 1_000_000, "completion_tokens": 100_000, "cached_tokens": 400_000}
    else:  # Anthropic counts them beside input_tokens
        usage = {
            "input_tokens": 600_000,
            "output_tokens": 100_000,
            "cache_read_input_tokens": 400_000,
        }
    fake_llm.script(Reply.text("hi", usage=usage))
    assert nanobot_run("agent", "-m", "hello").returncode == 0
    [record] = _ledger(isolated_home)
    assert (record.prompt, record.completion, record.cache_read, record.model) == (
        1_000_000,
        100_000,
        400_000,
        model,
    )
    report = json.loads(nanobot_run("usage", "--json").stdout)["today"]
    # 600k plain input at 2.0 + 400k cache reads at 0.5 + 100k output at 8.0 (per million)
    assert report["cost"] == 1.2 + 0.2 + 0.8
    assert report["cacheReadShare"] == 0.4
    text = nanobot_run("usage").stdout
    assert "today: 1 call, 1,100,000 tokens" in text and "40%" in text and "2.2000" in text
    status = nanobot_run("status").stdout
    assert "today 1 call, 1,100,000 tokens" in status


def test_chat_status_shows_this_sessions_spend(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(Reply.text("hi", usage={"prompt_tokens": 1234, "completion_tokens": 56}))
    assert nanobot_run("agent", "-m", "hello").returncode == 0
    out = nanobot_run("agent", "-m", "/status")
    shown = " ".join(out.stdout.split())  # long lines wrap at the terminal's width
    assert (
        "spend this session: 1 call today, 1,290 tokens (1,234 prompt, 56 completion)" in shown
    ), out


def test_kill_9_during_a_call_leaves_a_readable_ledger(
    nanobot_cmd, nanobot_forkserver, nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(Reply.text("first answer"), Reply.text("never seen", delay=30))
    assert nanobot_run("agent", "-m", "one").returncode == 0
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "two"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )
    try:
        assert fake_llm.wait_for_requests(2, timeout=30)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    # a torn line as a full disk would leave one, for good measure
    with open(isolated_home / "usage" / "usage.jsonl", "ab") as f:
        f.write(b'{"t":17')
    records = _ledger(isolated_home)
    assert [r.outcome for r in records] == ["ok"]
    fake_llm.script(Reply.text("third"))
    assert nanobot_run("agent", "-m", "three").returncode == 0
    report = json.loads(nanobot_run("usage", "--json").stdout)
    assert (
        report["today"]["calls"] == 2
    )  # the torn line skipped, the next record on a line of its own


def _due_job(home: Path, **extra) -> str:
    from nanobot.cron.schedule import parse_schedule
    from nanobot.cron.store import JobStore

    now = int(time.time() * 1000)
    store = JobStore(home / "workspace")
    job = store.add(
        parse_schedule(every_seconds=3600, now_ms=now - 3_700_000),
        "Check the weather",
        now_ms=now - 3_700_000,
    )
    if extra:

        def change(jobs):
            for j in jobs:
                if j.id == job.id:
                    j.raw.update(extra)

        store.update(change)
    return job.id


def _seed_background_spend(home: Path, tokens: int, job: str = "earlier-job") -> None:
    from nanobot.usage.ledger import Ledger

    ledger = Ledger(home / "usage")
    ledger.append(
        UsageRecord(
            t=time.time(),
            session=f"cron:{job}",
            source="cron",
            model="custom/test-model",
            prompt=tokens,
            job=job,
        )
    )
    ledger.close()


def test_a_background_daily_limit_pauses_jobs_and_serve_says_so_once(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    _set_config(isolated_home, usage={"limits": {"backgroundDailyTokens": 1000}})
    job_id = _due_job(isolated_home)
    _seed_background_spend(isolated_home, 1500)
    result = nanobot_run("serve", "--once")
    assert fake_llm.requests == []  # no tokens spent
    assert (
        "background work is paused" in result.stdout
        and "usage.limits.backgroundDailyTokens" in result.stdout
    )
    assert "background tokens today 1,500 of 1,000" in result.stdout  # serve's first line
    from nanobot.cron.store import JobStore

    assert JobStore(isolated_home / "workspace").get(job_id).history[-1].status == "skipped"
    status = nanobot_run("status").stdout
    assert "paused" in status and "backgroundDailyTokens" in status
    # due again: skipped again, but the user was told once
    _due_job(isolated_home)
    again = nanobot_run("serve", "--once")
    assert fake_llm.requests == [] and "paused" not in again.stdout
    # raised: the job runs
    _set_config(isolated_home, usage={"limits": {"backgroundDailyTokens": 0}})
    _due_job(isolated_home)
    fake_llm.script(Reply.text("Sunny."), Reply.text("Sunny."), Reply.text("Sunny."))
    ran = nanobot_run("serve", "--once")
    assert "Sunny." in ran.stdout
    assert {r.source for r in _ledger(isolated_home)} == {"cron"}


def test_a_job_past_its_own_daily_limit_waits_while_others_run(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    _set_config(isolated_home, usage={"limits": {"jobDailyTokens": 1000}})
    busy = _due_job(isolated_home)
    _seed_background_spend(isolated_home, 1200, job=busy)
    other = _due_job(isolated_home)
    fake_llm.script(Reply.text("Other ran."))
    result = nanobot_run("serve", "--once")
    assert (
        f"cron job {busy} is paused" in result.stdout
        and "usage.limits.jobDailyTokens" in result.stdout
    )
    assert "Other ran." in result.stdout
    assert [r.job for r in _ledger(isolated_home) if r.source == "cron"][-1] == other


def test_the_daily_limit_for_everything_stops_a_chat_turn_with_one_line(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    _set_config(isolated_home, usage={"limits": {"dailyTokens": 100}})
    fake_llm.script(Reply.text("hi", usage={"prompt_tokens": 90, "completion_tokens": 20}))
    assert nanobot_run("agent", "-m", "hello").returncode == 0
    result = nanobot_run("agent", "-m", "and again")
    assert result.returncode == 1
    assert (
        "daily token limit is reached" in result.stderr
        and "usage.limits.dailyTokens" in result.stderr
    )
    assert len(fake_llm.requests) == 1  # not sent
    session = "".join(p.read_text() for p in (isolated_home / "sessions").glob("*.jsonl"))
    assert "and again" in session  # what the user said is on disk


def test_the_heartbeat_makes_no_call_when_nothing_is_open(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    (isolated_home / "workspace").mkdir(parents=True, exist_ok=True)
    (isolated_home / "workspace" / "HEARTBEAT.md").write_text(
        "# Heartbeat\n\n<!-- - [ ] a commented task -->\n- [x] water the plants\n\n## Completed\n- call mum\n"
    )
    result = nanobot_run("serve", "--once")
    assert result.returncode == 0, result.stderr
    assert fake_llm.requests == [] and _ledger(isolated_home) == []
    (isolated_home / "workspace" / "HEARTBEAT.md").write_text("- [ ] water the plants\n")
    (isolated_home / "usage").mkdir(exist_ok=True)
    os.utime(isolated_home / "workspace" / "HEARTBEAT.md")
    from nanobot.cron.runner import RunnerLock
    from nanobot.cron.store import JobStore

    RunnerLock(JobStore(isolated_home / "workspace"), "test").write_state(
        heartbeatMs=0
    )  # due again
    fake_llm.script(Reply.text("HEARTBEAT_OK"))
    nanobot_run("serve", "--once")
    assert [r.source for r in _ledger(isolated_home)] == ["heartbeat"]


def test_cron_add_memory_lets_a_jobs_turns_reach_memory(nanobot_run, configure, isolated_home):
    configure()
    assert (
        nanobot_run("cron", "add", "-m", "Write my diary", "--every", "3600", "--memory").returncode
        == 0
    )
    assert nanobot_run("cron", "add", "-m", "Check the weather", "--every", "3600").returncode == 0
    jobs = json.loads((isolated_home / "workspace" / "cron" / "jobs.json").read_text())["jobs"]
    assert [job.get("memory") for job in jobs] == [True, None]


def test_a_job_crossing_its_limit_mid_turn_stops_with_one_line_and_keeps_what_it_did(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    _set_config(isolated_home, usage={"limits": {"jobDailyTokens": 1000}})
    job_id = _due_job(isolated_home)
    fake_llm.script(
        Reply.tool_calls(
            [("write_file", {"path": "weather.md", "content": "sunny\n"})],
            usage={"prompt_tokens": 1500, "completion_tokens": 20},
        ),
        Reply.text("never sent"),
    )
    result = nanobot_run("serve", "--once")
    assert len(fake_llm.requests) == 1  # the second call was not sent
    assert (
        isolated_home / "workspace" / "weather.md"
    ).read_text() == "sunny\n"  # what it did stays
    assert (
        f"cron job {job_id} is paused" in result.stdout
        and "usage.limits.jobDailyTokens" in result.stdout
    )
    session = "".join(p.read_text() for p in (isolated_home / "sessions").glob("cron_*.jsonl"))
    assert "write_file" in session and "Check the weather" in session


def test_compact_past_the_daily_limit_names_the_limit_not_a_provider_outage(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(Reply.text("noted"), Reply.text("noted again"))
    assert nanobot_run("agent", "-m", "the replica stays until Friday").returncode == 0
    assert nanobot_run("agent", "-m", "the schema diff runs next").returncode == 0
    _set_config(isolated_home, usage={"limits": {"dailyTokens": 100}})  # already spent today
    result = nanobot_run("agent", "-m", "/compact")
    said = " ".join(result.stderr.split())
    assert "memory consolidation postponed: the daily token limit is reached" in said, said
    assert "usage.limits.dailyTokens = 100" in said
    assert "provider is unavailable" not in said  # the provider was never asked
    assert (
        len(fake_llm.requests) == 2
        and not (isolated_home / "workspace" / "memory" / "HISTORY.md").exists()
    )


def test_usage_counts_a_cancelled_call_apart_from_the_failed_ones(
    nanobot_run, configure, isolated_home
):
    # Ctrl-C mid-answer is the user's choice, not a failure: `usage` said "(1 failed)" for it
    from nanobot.usage.ledger import Ledger

    configure()
    ledger = Ledger(isolated_home / "usage")
    for outcome in ("ok", "error", "cancelled"):
        ledger.append(
            UsageRecord(
                t=time.time(), session="cli:direct", source="chat", model="m", outcome=outcome
            )
        )
    ledger.close()
    shown = nanobot_run("usage").stdout
    assert "3 (1 failed, 1 cancelled)" in shown, shown
    today = json.loads(nanobot_run("usage", "--json").stdout)["today"]
    assert (today["failedCalls"], today["cancelledCalls"]) == (1, 1)


def test_a_stream_cut_and_retried_is_two_calls_in_the_ledger_usage_and_the_daily_limit(
    nanobot_run, fake_llm, configure, isolated_home
):
    # the provider bills both attempts: the one the network cut (prompt + what it streamed) and the retry
    configure()
    fake_llm.script(
        Reply.cut_stream("The replica stays until Friday and the schema " * 20),
        Reply.text("full answer", usage={"prompt_tokens": 3000, "completion_tokens": 10}),
    )
    env = {"NANOBOT_RETRY_BASE_DELAY": "0"}
    first = nanobot_run("agent", "-m", "what about the replica?", env=env)
    assert first.returncode == 0 and "full answer" in first.stdout
    assert len(fake_llm.requests) == 2
    cut, answered = _ledger(isolated_home)
    assert (cut.outcome, cut.estimated, answered.outcome) == ("cut", True, "ok")
    assert cut.prompt > 1000  # the prompt it was sent (the fixed prompt alone is over 3,000)
    assert cut.completion == 0  # piped, the answer is not streamed: nothing came before the cut
    assert (answered.prompt, answered.completion) == (3000, 10)
    both = cut.prompt + cut.completion + 3010
    today = json.loads(nanobot_run("usage", "--json").stdout)["today"]
    assert (today["calls"], today["cutCalls"], today["failedCalls"]) == (2, 1, 0)
    assert today["promptTokens"] + today["completionTokens"] == both
    assert (
        "2 (1 estimated, 1 cut and retried)" in nanobot_run("usage", env={"COLUMNS": "200"}).stdout
    )
    # a daily limit the answered call alone stays under is reached once the cut one counts too
    _set_config(isolated_home, usage={"limits": {"dailyTokens": 3010 + cut.prompt // 2}})
    fake_llm.script(Reply.text("not sent"))
    refused = nanobot_run("agent", "-m", "and the schema?", env=env)
    assert refused.returncode == 1 and "daily token limit is reached" in refused.stderr
    assert len(fake_llm.requests) == 2


def test_report_turns_held_by_the_daily_limit_are_told_once_and_kept_for_the_next_message(
    nanobot_run, fake_llm, configure, isolated_home
):
    # three helpers end after the day's limit is spent: their report turns used to print the same
    # limit error three times, and the reports were lost (only a one-line note was saved)
    configure()
    _set_config(isolated_home, usage={"limits": {"dailyTokens": 1000}})
    small = {"prompt_tokens": 10, "completion_tokens": 1}

    def respond(request):
        if _is_subagent(request):  # each helper alone spends the rest of the day's tokens
            task = json.dumps(request.messages)
            part = next(p for p in ("alpha", "beta", "gamma") if f"part {p}" in task)
            found = f"helper {part} found the {part} file"
            return Reply.text(found, usage={"prompt_tokens": 1200, "completion_tokens": 5})
        if request.messages[-1].get("role") == "tool":
            return Reply.text("three helpers started", usage=small)
        if _ends_with_report(request):
            return Reply.text("report handled", usage=small)
        if "what did they find" in json.dumps(request.messages[-1]):
            return Reply.text("they found three files")
        return Reply.tool_calls(
            [("spawn", {"task": f"part {p}", "label": p}) for p in ("alpha", "beta", "gamma")],
            usage=small,
        )

    fake_llm.responder = respond
    result = nanobot_run("agent", "-m", "split the work in three", "--json")
    assert result.returncode == 0, result.stderr
    answered = json.loads(result.stdout)
    assert answered["answer"] == "three helpers started" and answered["background"] == []
    # a script reading the JSON learns what was held, and why
    held = answered["held_reports"]
    assert sorted(h["label"] for h in held) == ["alpha", "beta", "gamma"]
    assert all("daily token limit is reached" in h["why"] for h in held)
    assert {h["report"] for h in held} == {
        f"helper {p} found the {p} file" for p in ("alpha", "beta", "gamma")
    }
    assert result.stderr.count("daily token limit is reached") == 1, result.stderr
    assert result.stderr.count("not handled") == 1
    assert "nanobot session show cli:direct" in result.stderr
    assert "error:" not in result.stderr
    assert not any(_ends_with_report(r) for r in fake_llm.requests)  # nothing sent past the limit
    assert len(fake_llm.requests) == 5
    # the reports are on disk, and `session show` lets the user read them now
    shown = nanobot_run("session", "show", "cli:direct").stdout
    for part in ("alpha", "beta", "gamma"):
        assert f"helper {part} found the {part} file" in shown
    # once the limit allows, the next message carries every report to the model
    _set_config(isolated_home, usage={"limits": {"dailyTokens": 0}})
    later = nanobot_run("agent", "-m", "what did they find?")
    assert later.returncode == 0 and "they found three files" in later.stdout
    sent = json.dumps(fake_llm.requests[-1].messages)
    for part in ("alpha", "beta", "gamma"):
        assert f"helper {part} found the {part} file" in sent
    fake_llm.assert_all_valid()
