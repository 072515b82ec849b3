"""The scheduler under a fake clock: what fires, when, in which session, and what is recorded."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from cron_fakes import FakeClock, FakeTurns
from nanobot.cron.runner import MISSED_GAP_MS, HeartbeatSettings, RunnerLock, Scheduler
from nanobot.cron.schedule import parse_schedule
from nanobot.cron.store import JobStore
from nanobot.paths import bundled_dir

T0 = 1_800_000_000_000  # 2027-01-15, a fixed instant


def scheduler(workspace: Path, clock, turns, kind="serve", heartbeat=False) -> Scheduler:
    store = JobStore(workspace)
    return Scheduler(
        store, turns, RunnerLock(store, kind), clock, [], HeartbeatSettings(heartbeat, 1800)
    )


def runs(workspace: Path) -> list[dict]:
    path = workspace / "cron" / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def serve_until(sched: Scheduler) -> None:
    sched.lock.acquire()
    try:
        await sched.serve(asyncio.Event())
    finally:
        sched.lock.release()


def test_every_cron_and_at_jobs_fire_on_time_each_in_its_own_session(workspace):
    store = JobStore(workspace)
    every = store.add(parse_schedule(every_seconds=600, now_ms=T0), "stretch", now_ms=T0)
    once = store.add(
        parse_schedule(at="2027-01-15T09:25:00+00:00", now_ms=T0), "call mum", now_ms=T0
    )
    cron = store.add(
        parse_schedule(cron_expr="*/15 * * * *", tz="UTC", now_ms=T0),
        "check mail",
        now_ms=T0,
        session="cli:work",
    )
    clock, turns = FakeClock(T0, end_ms=T0 + 30 * 60_000 + 1_000), FakeTurns("all done")
    asyncio.run(serve_until(scheduler(workspace, clock, turns)))

    fired = [(r["job_id"], r["at_ms"]) for r in runs(workspace) if r["kind"] == "job"]
    # T0 is 08:00 UTC; every 10 min from T0; at 09:25 is outside the 30 minutes; */15 at 08:15 and 08:30
    assert fired == [
        (every.id, T0 + 600_000),
        (cron.id, T0 + 900_000),
        (every.id, T0 + 1_200_000),
        (every.id, T0 + 1_800_000),
        (cron.id, T0 + 1_800_000),
    ]
    sessions = {job_id: session for session, _, job_id in turns.calls}
    assert sessions == {every.id: f"cron:{every.id}", cron.id: "cli:work"}
    assert all("stretch" in prompt or "check mail" in prompt for _, prompt, _ in turns.calls)
    saved = {j.id: j for j in JobStore(workspace).jobs()}
    assert saved[every.id].last_status == "ok" and len(saved[every.id].history) == 3
    assert saved[every.id].history[-1].session == f"cron:{every.id}"
    assert saved[once.id].next_run_at_ms == once.schedule.at_ms  # still waiting


def test_a_one_shot_job_fires_once_and_is_removed(workspace):
    store = JobStore(workspace)
    job = store.add(
        parse_schedule(at="2027-01-15T08:05:00+00:00", now_ms=T0), "call mum", now_ms=T0
    )
    clock, turns = FakeClock(T0, end_ms=T0 + 20 * 60_000), FakeTurns()
    asyncio.run(serve_until(scheduler(workspace, clock, turns)))
    assert [r["job_id"] for r in runs(workspace)] == [job.id]
    assert len(turns.calls) == 1 and JobStore(workspace).jobs() == []


def test_missed_runs_are_run_once_or_skipped_per_job_and_reported(workspace):
    store = JobStore(workspace)
    catch_up = store.add(parse_schedule(every_seconds=3600, now_ms=T0), "hourly report", now_ms=T0)
    skip = store.add(
        parse_schedule(every_seconds=3600, now_ms=T0), "hourly ping", now_ms=T0, missed="skip"
    )
    clock, turns = FakeClock(T0 + 5 * 3600_000 + 60_000), FakeTurns()  # nothing ran for five hours
    sched = scheduler(workspace, clock, turns)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    sched.lock.release()

    assert [job_id for _, _, job_id in turns.calls] == [catch_up.id]  # once, not five times
    notices = {r["job_id"]: r for r in runs(workspace) if r["kind"] == "notice"}
    assert (
        "missed 5 run(s)" in notices[catch_up.id]["text"]
        and "running it once now" in notices[catch_up.id]["text"]
    )
    assert "missed 5 run(s)" in notices[skip.id]["text"] and notices[skip.id]["status"] == "skipped"
    saved = {j.id: j for j in JobStore(workspace).jobs()}
    assert saved[skip.id].last_status == "skipped"
    assert saved[skip.id].next_run_at_ms == T0 + 6 * 3600_000  # back on its grid
    assert saved[catch_up.id].next_run_at_ms == T0 + 6 * 3600_000


def test_a_runner_that_keeps_ticking_runs_a_late_job_without_calling_it_missed(workspace):
    store = JobStore(workspace)
    job = store.add(parse_schedule(every_seconds=60, now_ms=T0), "ping", now_ms=T0, missed="skip")
    clock, turns = FakeClock(T0), FakeTurns()
    sched = scheduler(workspace, clock, turns)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    clock.advance(MISSED_GAP_MS / 1000 - 10)  # a long turn kept this runner busy, but it was alive
    asyncio.run(sched.tick())
    sched.lock.release()
    assert [c[2] for c in turns.calls] == [job.id]
    assert [r["kind"] for r in runs(workspace)] == ["job"]


def test_two_runners_started_exactly_one_fires(workspace):
    store = JobStore(workspace)
    job = store.add(parse_schedule(every_seconds=300, now_ms=T0), "stretch", now_ms=T0)
    clock = FakeClock(T0, end_ms=T0 + 16 * 60_000)
    first, second = FakeTurns(), FakeTurns()
    a, b = scheduler(workspace, clock, first), scheduler(workspace, clock, second)

    async def both():
        assert a.lock.try_acquire()
        assert not b.lock.try_acquire()  # the second runner is refused by the lock
        try:
            await a.serve(asyncio.Event())
        finally:
            a.lock.release()

    asyncio.run(both())
    assert len(first.calls) == 3 and second.calls == []
    assert [r["job_id"] for r in runs(workspace)] == [job.id] * 3
    # the second runner, given the lock at the instant of the last firing, finds that job already claimed
    clock.now = T0 + 15 * 60_000
    assert b.lock.try_acquire()
    asyncio.run(b.tick())
    b.lock.release()
    assert second.calls == []


def test_a_busy_target_session_runs_the_job_in_its_own_session_and_says_so(workspace):
    store = JobStore(workspace)
    job = store.add(
        parse_schedule(every_seconds=60, now_ms=T0), "ping", now_ms=T0, session="cli:direct"
    )
    clock, turns = FakeClock(T0 + 60_000), FakeTurns(busy={"cli:direct"})
    sched = scheduler(workspace, clock, turns)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    sched.lock.release()
    assert [c[0] for c in turns.calls] == [f"cron:{job.id}"]
    record = runs(workspace)[-1]
    assert record["session"] == f"cron:{job.id}" and "cli:direct was in use" in record["title"]


def _heartbeat_tick(workspace: Path, text: str | None) -> tuple[FakeTurns, list[dict]]:
    if text is not None:
        (workspace / "HEARTBEAT.md").write_text(text)
    turns = FakeTurns("Watered the plants reminder sent.")
    sched = scheduler(workspace, FakeClock(T0), turns, heartbeat=True)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    sched.lock.release()
    return turns, runs(workspace)


def test_the_heartbeat_stays_quiet_on_the_template(workspace):
    template = (bundled_dir("workspace") / "HEARTBEAT.md").read_text()
    turns, records = _heartbeat_tick(workspace, template)
    assert turns.calls == [] and records == []


def test_the_heartbeat_stays_quiet_on_nanobots_template_and_on_done_items(workspace):
    nanobot_template = (
        "# Heartbeat Tasks\n\nThis file is checked every 30 minutes by your nanobot agent.\n"
        "Add tasks below that you want the agent to work on periodically.\n\n## Active Tasks\n\n"
        "<!-- Add your periodic tasks below this line -->\n\n- [ ]\n- [x] water the plants\n\n"
        "## Completed\n\n- check the backup\n"
    )
    turns, records = _heartbeat_tick(workspace, nanobot_template)
    assert turns.calls == [] and records == []


def test_the_heartbeat_acts_on_a_listed_task_in_the_heartbeat_session(workspace):
    turns, records = _heartbeat_tick(
        workspace, "# Heartbeat\n\n- [ ] Remind me to water the plants at 8\n"
    )
    assert [(session, job) for session, _, job in turns.calls] == [("heartbeat", "heartbeat")]
    assert "Remind me to water the plants at 8" in turns.calls[0][1]
    assert (
        records[-1]["kind"] == "heartbeat"
        and records[-1]["text"] == "Watered the plants reminder sent."
    )
    assert records[-1]["quiet"] is False


def test_a_runner_stopped_mid_turn_records_the_run_as_interrupted(workspace):
    store = JobStore(workspace)
    job = store.add(parse_schedule(every_seconds=60, now_ms=T0), "slow", now_ms=T0)

    class SlowTurns(FakeTurns):
        async def run(self, session_key, prompt):
            self.calls.append((session_key, prompt, None))
            await asyncio.sleep(60)

    turns = SlowTurns()
    sched = scheduler(workspace, FakeClock(T0 + 60_000), turns)

    async def stop_mid_turn():
        sched.lock.acquire()
        task = asyncio.ensure_future(sched.tick())
        while not turns.calls:
            await asyncio.sleep(0.01)
        task.cancel()  # what SIGTERM does to `nanobot serve`
        await asyncio.gather(task, return_exceptions=True)
        sched.lock.release()

    asyncio.run(stop_mid_turn())
    saved = JobStore(workspace).get(job.id)
    assert saved.last_status == "interrupted" and saved.history[-1].session == f"cron:{job.id}"
    assert saved.next_run_at_ms == T0 + 120_000  # not replayed in a loop on the next start
    assert [(r["job_id"], r["status"]) for r in runs(workspace)] == [(job.id, "interrupted")]


def test_a_missed_one_shot_job_runs_once_on_start_or_is_skipped_and_kept(workspace):
    store = JobStore(workspace)
    late = store.add(
        parse_schedule(at="2027-01-15T08:10:00+00:00", tz="UTC", now_ms=T0), "call mum", now_ms=T0
    )
    dropped = store.add(
        parse_schedule(at="2027-01-15T08:10:00+00:00", tz="UTC", now_ms=T0),
        "water plants",
        now_ms=T0,
        missed="skip",
    )
    turns = FakeTurns("Call your mum now (this was due at 08:10).")
    sched = scheduler(workspace, FakeClock(T0 + 3 * 3600_000), turns)  # started three hours later
    sched.lock.acquire()
    asyncio.run(sched.tick())
    sched.lock.release()
    assert [job_id for _, _, job_id in turns.calls] == [late.id]
    left = {j.id: j for j in JobStore(workspace).jobs()}
    assert late.id not in left  # it ran, so it is done
    assert left[dropped.id].enabled is False and left[dropped.id].last_status == "skipped"
    texts = [r["text"] for r in runs(workspace) if r["kind"] == "notice"]
    assert any("missed 1 run(s) since 2027-01-15 08:10" in t and "skipped" in t for t in texts)


def test_a_job_that_falls_due_during_a_long_turn_runs_late_and_is_not_skipped(workspace):
    store = JobStore(workspace)
    slow = store.add(parse_schedule(every_seconds=3600, now_ms=T0), "long report", now_ms=T0)
    ping = store.add(
        parse_schedule(every_seconds=300, now_ms=T0 + 3_500_000),
        "ping",
        now_ms=T0 + 3_500_000,
        missed="skip",
    )
    clock = FakeClock(T0 + 3_600_000)

    class LongTurns(FakeTurns):
        async def run(self, session_key, prompt):
            result = await super().run(session_key, prompt)
            if "long report" in prompt:
                clock.advance(600)  # this turn took ten minutes; ping fell due meanwhile
            return result

    turns = LongTurns()
    sched = scheduler(workspace, clock, turns)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    clock.advance(5)
    asyncio.run(sched.tick())
    sched.lock.release()
    assert [job_id for _, _, job_id in turns.calls] == [slow.id, ping.id]
    assert all(r["kind"] == "job" for r in runs(workspace))


def test_firings_reach_a_desktop_notification_and_the_log_but_quiet_heartbeats_do_not(
    workspace, tmp_path, monkeypatch
):
    from nanobot.cron.delivery import LogDelivery, NotifySendDelivery
    from nanobot.cron.runner import Firing

    calls = tmp_path / "notify-calls"
    fake = tmp_path / "notify-send"
    fake.write_text(f"#!/bin/sh\nprintf '%s|' \"$@\" >> {calls}\necho >> {calls}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DISPLAY", ":0")
    notify, log = NotifySendDelivery(str(fake)), LogDelivery(tmp_path / "cron.log")
    assert notify.available
    for firing in (
        Firing("job", T0, "⏰ stretch", "Time to stretch!"),
        Firing("heartbeat", T0, "💓 heartbeat", "HEARTBEAT_OK", quiet=True),
    ):
        notify.deliver(firing)
        log.deliver(firing)
    assert calls.read_text() == "--app-name=nanobot|⏰ stretch|Time to stretch!|\n"
    lines = (tmp_path / "cron.log").read_text().splitlines()
    assert lines[0].endswith("⏰ stretch: Time to stretch!") and lines[1].endswith(
        "💓 heartbeat: nothing to report"
    )
    monkeypatch.delenv("DISPLAY")
    for name in ("WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    assert not NotifySendDelivery(str(fake)).available  # no desktop session: not tried


def test_nanobots_internal_jobs_are_kept_but_never_run(workspace):
    path = workspace / "cron" / "jobs.json"
    path.parent.mkdir()
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "jobs": [
                    {
                        "id": "dream",
                        "name": "dream",
                        "enabled": True,
                        "schedule": {"kind": "every", "everyMs": 7200000},
                        "payload": {"kind": "system_event", "message": ""},
                        "state": {"nextRunAtMs": T0 - 1000},
                        "createdAtMs": T0 - 7_201_000,
                    }
                ],
            }
        )
    )
    turns = FakeTurns()
    sched = scheduler(workspace, FakeClock(T0 + 60_000), turns)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    sched.lock.release()
    assert turns.calls == [] and runs(workspace) == []
    assert json.loads(path.read_text())["jobs"][0]["payload"]["kind"] == "system_event"


def test_serve_once_from_system_cron_runs_a_job_due_minutes_ago_as_late_not_missed(workspace):
    from nanobot.cron.runner import ONCE_LATE_MS

    store = JobStore(workspace)
    job = store.add(
        parse_schedule(every_seconds=3600, now_ms=T0), "hourly ping", now_ms=T0, missed="skip"
    )
    turns = FakeTurns()
    sched = scheduler(
        workspace, FakeClock(T0 + 3600_000 + 4 * 60_000), turns
    )  # cron ran us 4 minutes late
    sched.lock.acquire()
    asyncio.run(sched.tick(late_ms=ONCE_LATE_MS))
    sched.lock.release()
    assert [job_id for _, _, job_id in turns.calls] == [job.id]
    assert [r["kind"] for r in runs(workspace)] == ["job"]


def test_a_daily_job_in_new_york_fires_at_nine_local_across_the_spring_forward_weekend(workspace):
    from datetime import datetime
    from zoneinfo import ZoneInfo

    ny = ZoneInfo("America/New_York")
    start = int(datetime(2026, 3, 6, 12, 0, tzinfo=ny).timestamp() * 1000)
    end = int(datetime(2026, 3, 10, 12, 0, tzinfo=ny).timestamp() * 1000)
    store = JobStore(workspace)
    job = store.add(
        parse_schedule(cron_expr="0 9 * * *", tz="America/New_York", now_ms=start),
        "morning brief",
        now_ms=start,
    )
    clock = FakeClock(start, end_ms=end)
    sched = scheduler(workspace, clock, FakeTurns())
    sched.poll_s = 6 * 3600  # the fake clock jumps straight to each due time
    asyncio.run(serve_until(sched))
    fired = [
        datetime.fromtimestamp(r["at_ms"] / 1000, ny)
        for r in runs(workspace)
        if r["job_id"] == job.id
    ]
    assert [f.strftime("%m-%d %H:%M %Z") for f in fired] == [
        "03-07 09:00 EST",
        "03-08 09:00 EDT",
        "03-09 09:00 EDT",
        "03-10 09:00 EDT",
    ]


def test_imported_jobs_without_a_next_time_are_scheduled_as_nanobot_does_on_start(workspace):
    path = workspace / "cron" / "jobs.json"
    path.parent.mkdir()
    base = {
        "enabled": True,
        "payload": {"kind": "agent_turn", "message": "ping"},
        "state": {},
        "createdAtMs": T0 - 100_000,
    }
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "jobs": [
                    {
                        **base,
                        "id": "every1",
                        "name": "every",
                        "schedule": {"kind": "every", "everyMs": 3600_000},
                    },
                    {
                        **base,
                        "id": "late1",
                        "name": "late",
                        "schedule": {"kind": "at", "atMs": T0 - 7200_000},
                    },
                ],
            }
        )
    )
    turns = FakeTurns()
    sched = scheduler(workspace, FakeClock(T0), turns)
    sched.lock.acquire()
    asyncio.run(sched.tick())
    sched.lock.release()
    saved = {j.id: j for j in JobStore(workspace).jobs()}
    assert saved["every1"].next_run_at_ms == T0 - 100_000 + 3600_000
    assert [job_id for _, _, job_id in turns.calls] == [
        "late1"
    ]  # a missed one-shot: run once, reported
    assert any("missed 1 run(s)" in r["text"] for r in runs(workspace) if r["kind"] == "notice")
