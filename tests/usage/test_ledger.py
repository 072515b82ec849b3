"""The ledger on disk: append-only, bounded by rotation, torn lines skipped, several writers."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import time
from pathlib import Path

from nanobot.config import ModelPrice, UsageLimits
from nanobot.usage.ledger import (
    Ledger,
    TodaySpend,
    UsageRecord,
    day_start,
    read_records,
    rotated_files,
)
from nanobot.usage.report import paused_lines, summarise


def _record(t: float | None = None, **fields) -> UsageRecord:
    base = {
        "session": "cli:direct",
        "source": "chat",
        "model": "openai/gpt-4.1",
        "prompt": 100,
        "completion": 10,
    }
    return UsageRecord(t=time.time() if t is None else t, **{**base, **fields})


def test_records_round_trip_and_hold_no_text(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(
        _record(cache_read=40, cache_write=5, estimated=True, ms=1234, outcome="error", job="abc")
    )
    ledger.close()
    [line] = (tmp_path / "usage.jsonl").read_text().splitlines()
    assert set(json.loads(line)) == {
        "t",
        "session",
        "source",
        "job",
        "model",
        "prompt",
        "completion",
        "cacheRead",
        "cacheWrite",
        "estimated",
        "ms",
        "outcome",
    }
    [back] = read_records(tmp_path)
    assert (back.cache_read, back.cache_write, back.estimated, back.ms, back.outcome, back.job) == (
        40,
        5,
        True,
        1234,
        "error",
        "abc",
    )
    assert oct((tmp_path / "usage.jsonl").stat().st_mode & 0o777) == "0o600"


def test_a_torn_last_line_is_skipped_and_the_next_record_starts_a_line_of_its_own(tmp_path):
    Ledger(tmp_path).append(_record(prompt=1))
    with open(tmp_path / "usage.jsonl", "ab") as f:
        f.write(b'{"t":1764,"session":"cli')  # a crash or a full disk mid-write
    ledger = Ledger(tmp_path)
    ledger.append(_record(prompt=3))
    ledger.close()
    assert [r.prompt for r in read_records(tmp_path)] == [1, 3]


def test_rotation_bounds_the_files_and_keeps_every_recent_record_readable(tmp_path):
    ledger = Ledger(tmp_path, rotate_bytes=2000, keep_files=3)
    for i in range(100):
        ledger.append(_record(prompt=i))
    ledger.close()
    rotated = rotated_files(tmp_path)
    assert len(rotated) == 3  # older files were deleted
    assert all(p.stat().st_size < 2400 for p in [*rotated, tmp_path / "usage.jsonl"])
    prompts = [r.prompt for r in read_records(tmp_path)]
    assert prompts == sorted(prompts) and prompts[-1] == 99 and len(prompts) < 100


def _append_many(directory: str, worker: int) -> None:
    ledger = Ledger(Path(directory), rotate_bytes=20_000)
    for i in range(300):
        ledger.append(_record(prompt=worker * 1000 + i))
    ledger.close()


def test_two_processes_appending_lose_and_tear_nothing(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), n)) for n in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    prompts = sorted(r.prompt for r in read_records(tmp_path))
    assert prompts == sorted([1000 + i for i in range(300)] + [2000 + i for i in range(300)])


def test_today_spend_follows_what_other_writers_append(tmp_path):
    today = TodaySpend(tmp_path)
    assert today.refresh().total == 0
    Ledger(tmp_path).append(_record(t=time.time() - 2 * 86_400, prompt=10_000))  # not today
    writer = Ledger(tmp_path, rotate_bytes=600)
    writer.append(_record(prompt=100, completion=0, job="j1"))
    day = today.refresh()
    assert (day.total, day.background, day.by_job) == (100, 100, {"j1": 100})
    for _ in range(5):  # rotates on the way: what went to a rotated file still counts
        writer.append(_record(prompt=10, completion=0))
    assert rotated_files(tmp_path)
    assert today.refresh().total == 150


def test_today_starts_at_local_midnight(tmp_path):
    now = time.time()
    clock = [now]
    today = TodaySpend(tmp_path, clock=lambda: clock[0])
    Ledger(tmp_path).append(_record(t=now, prompt=5, completion=0))
    assert today.refresh().total == 5
    clock[0] = day_start(now) + 86_400 + 60  # one minute past the next midnight
    assert today.refresh().total == 0


def test_summary_by_period_source_and_model_with_costs():
    now = time.time()
    records = [
        _record(t=now, source="chat", prompt=1_000_000, completion=0, cache_read=500_000),
        _record(
            t=now - 3 * 86_400,
            source="cron",
            job="j",
            model="anthropic/claude",
            prompt=100,
            completion=100,
        ),
        _record(t=now - 20 * 86_400, source="subagent", prompt=0, completion=1_000_000),
        _record(t=now - 40 * 86_400, source="chat", prompt=7, completion=7),  # outside 30 days
    ]
    prices = {"openai/gpt-4.1": ModelPrice(input=2.0, output=8.0, cache_read=0.5)}
    today, week, month = summarise(records, now=now, prices=prices)
    assert (today.total.calls, week.total.calls, month.total.calls) == (1, 2, 3)
    assert today.total.cost == 500_000 * 2.0 / 1e6 + 500_000 * 0.5 / 1e6
    assert today.total.cache_share == 0.5
    assert set(month.by_source) == {"chat", "cron", "subagent"}
    assert month.by_model["anthropic/claude"].unpriced == 1
    assert month.by_model["openai/gpt-4.1"].cost == 1.25 + 8.0


def test_paused_lines_name_each_limit_reached_and_its_key(tmp_path):
    ledger = Ledger(tmp_path)
    ledger.append(_record(prompt=600, completion=0, job="j1", source="cron"))
    ledger.append(_record(prompt=100, completion=0, job="j2", source="cron"))
    day = TodaySpend(tmp_path).refresh()
    limits = UsageLimits(background_daily_tokens=0, job_daily_tokens=500)
    assert [line.split(" is paused")[0] for line in paused_lines(day, limits)] == ["cron job j1"]
    lines = paused_lines(day, UsageLimits(background_daily_tokens=700, daily_tokens=650))
    assert any("usage.limits.dailyTokens" in line for line in lines)


def test_background_sessions_consolidate_without_touching_memory_unless_the_job_says_so(
    fake_llm, configure, isolated_home
):
    from nanobot.app import background_memory_writes, open_assistant
    from nanobot.config import load_config
    from nanobot.cron.jobs import current_job
    from nanobot.cron.schedule import parse_schedule
    from nanobot.cron.store import JobStore
    from nanobot.fakellm import Reply

    cfg = load_config(configure())
    store = JobStore(cfg.workspace_path())
    now = int(time.time() * 1000)
    quiet = store.add(parse_schedule(every_seconds=60, now_ms=now), "weather", now_ms=now)
    remembering = store.add(parse_schedule(every_seconds=60, now_ms=now), "diary", now_ms=now)

    def remember(jobs):
        for job in jobs:
            if job.id == remembering.id:
                job.raw["memory"] = True

    store.update(remember)
    memory_dir = cfg.workspace_path() / "memory"

    async def two_turns_then_compact(job_id: str) -> list:
        token = current_job.set(job_id)
        try:
            key = f"cron:{job_id}"
            assistant = open_assistant(
                cfg, key, stream=False, memory_writes=background_memory_writes(cfg, key)
            )
            try:
                await assistant.conversation.send("how is the weather")
                await assistant.conversation.send("and tomorrow")
                await assistant.conversation.compact()
                return list(
                    assistant.conversation.session.messages
                ), assistant.conversation.session.last_consolidated
            finally:
                await assistant.aclose()
        finally:
            current_job.reset(token)

    fake_llm.script(Reply.text("Sunny."), Reply.text("Rain."))
    messages, pointer = asyncio.run(two_turns_then_compact(quiet.id))
    assert len(fake_llm.requests) == 2  # no consolidation call
    assert (
        pointer == 2 and len(messages) == 4
    )  # archived in its own session: every message kept there
    memory_files = [p.name for p in memory_dir.glob("*.md")] if memory_dir.exists() else []
    assert "HISTORY.md" not in memory_files
    memory = (memory_dir / "MEMORY.md").read_text() if (memory_dir / "MEMORY.md").exists() else ""
    fake_llm.script(
        Reply.text("Dear diary."),
        Reply.text("More."),
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-01] diary",
                        "memory_update": memory + "\n- keeps a diary\n",
                    },
                )
            ]
        ),
    )
    asyncio.run(two_turns_then_compact(remembering.id))
    assert "save_memory" in json.dumps(fake_llm.requests[-1].tools)
    assert "keeps a diary" in (memory_dir / "MEMORY.md").read_text()
    assert os.path.exists(memory_dir / "HISTORY.md")


def test_a_limit_raised_in_the_file_applies_without_a_restart(configure, isolated_home):
    from nanobot.config import load_config
    from nanobot.errors import SpendLimitReached
    from nanobot.usage.meter import shared_meter

    path = configure()
    data = json.loads(path.read_text())
    data["usage"] = {"limits": {"backgroundDailyTokens": 100}}
    path.write_text(json.dumps(data))
    meter = shared_meter(load_config(path))
    meter.ledger.append(_record(prompt=150, completion=0, job="j1", source="cron"))
    try:
        meter.check("j1")
        raise AssertionError("the limit did not hold")
    except SpendLimitReached as exc:
        assert exc.key == "backgroundDailyTokens"
    assert meter.check(None) is None  # the chat is not background work
    data["usage"] = {"limits": {"backgroundDailyTokens": 1000}}
    path.write_text(json.dumps(data))
    os.utime(
        path, (time.time() + 5, time.time() + 5)
    )  # a later mtime, whatever the clock's resolution
    assert shared_meter(load_config(path)) is meter
    assert meter.check("j1") is None and meter.paused("j1") is None
    meter.close()


def test_a_job_aimed_at_the_users_session_consolidates_it_as_usual(configure):
    from nanobot.app import background_memory_writes
    from nanobot.config import load_config
    from nanobot.cron.jobs import current_job

    cfg = load_config(configure())
    token = current_job.set("abc123")
    try:
        assert background_memory_writes(cfg, "cli:direct") is True
        assert background_memory_writes(cfg, "cron:abc123") is False
    finally:
        current_job.reset(token)
    assert (
        background_memory_writes(cfg, "cron:abc123") is True
    )  # not inside that job's turn: a chat opened it
