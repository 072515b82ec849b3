"""The jobs file: nanobot's format, atomic rewrites, and a corrupt file kept aside, never emptied."""

from __future__ import annotations

import json

from nanobot.cron.schedule import Schedule
from nanobot.cron.store import JobStore

NANOBOT_JOBS = {
    "version": 1,
    "jobs": [
        {
            "id": "3f2a9c1b",
            "name": "standup",
            "enabled": True,
            "schedule": {
                "kind": "cron",
                "atMs": None,
                "everyMs": None,
                "expr": "0 9 * * 1-5",
                "tz": "Europe/Berlin",
            },
            "payload": {
                "kind": "agent_turn",
                "message": "Remind me of the stand-up",
                "deliver": True,
                "channel": "telegram",
                "to": "12345",
                "channelMeta": {"thread": 7},
            },
            "state": {
                "nextRunAtMs": 1772956800000,
                "lastRunAtMs": None,
                "lastStatus": None,
                "lastError": None,
            },
            "createdAtMs": 1772000000000,
            "updatedAtMs": 1772000000000,
            "deleteAfterRun": False,
        },
        {
            "id": "77aa00ff",
            "name": "water",
            "enabled": False,
            "schedule": {
                "kind": "every",
                "atMs": None,
                "everyMs": 1800000,
                "expr": None,
                "tz": None,
            },
            "payload": {
                "kind": "agent_turn",
                "message": "Drink water",
                "deliver": False,
                "channel": "cli",
                "to": "direct",
            },
            "state": {},
            "createdAtMs": 1772000000000,
            "updatedAtMs": 1772000000000,
            "deleteAfterRun": False,
        },
    ],
}


def test_a_nanobot_jobs_file_in_the_old_place_is_imported_with_every_field_kept(
    workspace, isolated_home
):
    legacy = isolated_home / "cron" / "jobs.json"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps(NANOBOT_JOBS))
    store = JobStore(workspace)
    jobs = store.jobs()
    assert [(j.id, j.name, j.enabled, j.schedule.kind) for j in jobs] == [
        ("3f2a9c1b", "standup", True, "cron"),
        ("77aa00ff", "water", False, "every"),
    ]
    assert jobs[0].schedule.tz == "Europe/Berlin" and jobs[1].schedule.every_ms == 1_800_000
    assert jobs[0].session_key == "cron:3f2a9c1b"  # nanobot ran jobs in cron:<id> too
    assert "imported 2 job(s)" in store.notices[0]
    saved = json.loads((workspace / "cron" / "jobs.json").read_text())
    assert saved["jobs"][0]["payload"]["channelMeta"] == {"thread": 7}  # unknown keys survive
    assert saved["jobs"][0]["state"]["nextRunAtMs"] == 1772956800000
    assert json.loads(legacy.read_text()) == NANOBOT_JOBS  # the original is untouched


def test_a_corrupt_jobs_file_is_kept_aside_byte_for_byte_and_the_user_is_told(workspace):
    store = JobStore(workspace)
    store.add(Schedule("every", every_ms=60_000), "stretch", now_ms=1_000)
    path = workspace / "cron" / "jobs.json"
    damaged = path.read_text()[:-40]  # a torn edit by hand
    path.write_text(damaged)
    assert store.jobs() == []
    aside = list(path.parent.glob("jobs.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text() == damaged
    assert aside[0].name in store.notices[0] and "could not be read" in store.notices[0]
    # open chats learn of it too: they print what runs.jsonl records
    records = [
        json.loads(line) for line in (workspace / "cron" / "runs.jsonl").read_text().splitlines()
    ]
    assert records[-1]["kind"] == "notice" and aside[0].name in records[-1]["text"]
    # adding a job afterwards starts a new file; the kept copy is not touched
    store.add(Schedule("every", every_ms=60_000), "new one", now_ms=2_000)
    assert aside[0].read_text() == damaged
    assert [j.message for j in store.jobs()] == ["new one"]


def test_a_file_of_the_wrong_shape_is_kept_aside_too(workspace):
    path = workspace / "cron" / "jobs.json"
    path.parent.mkdir()
    path.write_text('{"jobs": [{"id": "x", "schedule": {"kind": "sometimes"}}]}')
    store = JobStore(workspace)
    assert store.jobs() == []
    assert "schedule.kind" in store.notices[0]
    assert list(path.parent.glob("jobs.json.corrupt-*"))[0].read_text().startswith('{"jobs"')


def test_add_pause_resume_remove_round_trip_through_the_file(workspace):
    store = JobStore(workspace)
    job = store.add(Schedule("every", every_ms=60_000), "stretch", now_ms=0, session="cli:direct")
    assert job.next_run_at_ms == 60_000 and JobStore(workspace).get(job.id).session == "cli:direct"
    store.set_enabled(job.id, False, now_ms=10_000)
    assert JobStore(workspace).get(job.id).next_run_at_ms is None
    store.set_enabled(job.id, True, now_ms=610_000)
    assert (
        JobStore(workspace).get(job.id).next_run_at_ms == 660_000
    )  # the next grid point, nothing replayed
    store.remove(job.id)
    assert JobStore(workspace).jobs() == []
    assert not list(
        (workspace / "cron").glob(".jobs.json.*.tmp")
    )  # atomic writes leave no temp files


def test_the_heartbeat_interval_is_nanobots_gateway_key(isolated_home):
    import pytest
    from nanobot.config import load_config
    from nanobot.errors import ConfigError

    path = isolated_home / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "gateway": {
                    "host": "0.0.0.0",
                    "port": 18790,
                    "heartbeat": {"enabled": True, "intervalS": 600},
                }
            }
        )
    )
    assert load_config(path).gateway.heartbeat.interval_s == 600
    path.write_text(json.dumps({"gateway": {"heartbeat": {"intervalS": 5}}}))
    with pytest.raises(ConfigError, match="gateway.heartbeat.intervalS"):
        load_config(path)


def test_two_processes_adding_jobs_at_once_lose_none(workspace):
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path; from nanobot.cron.store import JobStore; "
        "from nanobot.cron.schedule import Schedule\n"
        "store = JobStore(Path(sys.argv[1]))\n"
        "for i in range(15):\n    store.add(Schedule('every', every_ms=60_000), f'{sys.argv[2]} {i}', now_ms=0)\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(workspace), name]) for name in ("a", "b")
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    messages = sorted(j.message for j in JobStore(workspace).jobs())
    assert messages == sorted([f"a {i}" for i in range(15)] + [f"b {i}" for i in range(15)])


def test_a_file_caught_halfway_through_a_hand_edit_is_read_again_not_kept_aside(
    workspace, monkeypatch
):
    import nanobot.cron.store as store_module

    store = JobStore(workspace)
    store.add(Schedule("every", every_ms=60_000), "stretch", now_ms=0)
    path = workspace / "cron" / "jobs.json"
    whole = path.read_text()
    path.write_text(whole[: len(whole) // 2])  # the editor has written half of it so far

    def editor_finishes(seconds):
        path.write_text(whole)

    monkeypatch.setattr(store_module.time, "sleep", editor_finishes)
    assert [j.message for j in store.jobs()] == ["stretch"]
    assert store.notices == [] and not list(path.parent.glob("jobs.json.corrupt-*"))


def test_the_run_log_is_rotated_past_its_limit_and_a_reader_follows_the_new_file(
    workspace, monkeypatch
):
    import nanobot.cron.store as store_module

    monkeypatch.setattr(
        store_module, "LOG_LIMIT_BYTES", 300
    )  # three records fit, a fourth does not
    store = JobStore(workspace)
    for i in range(3):
        store.append_run({"kind": "job", "text": f"run {i} " + "x" * 80})
    _, offset = store.read_runs(0)
    store.append_run(
        {"kind": "job", "text": "after rotation"}
    )  # the file passed 300 bytes: rotated first
    records, _ = store.read_runs(offset)
    assert [r["text"] for r in records] == ["after rotation"]
    kept = (workspace / "cron" / "runs.jsonl.1").read_text()
    assert all(f"run {i} " in kept for i in range(3))


def test_a_change_nanobot_logs_for_a_job_waiting_for_approval_leaves_it_waiting(workspace):
    store = JobStore(workspace)
    job = store.add(
        Schedule("every", every_ms=3_600_000), "ping", now_ms=1_000, pending_approval=True
    )
    nanobot_copy = {  # as nanobot 0.3.x logs an update: dataclasses.asdict, no approval field
        "id": job.id,
        "name": "ping hourly",
        "enabled": True,
        "schedule": {"kind": "every", "at_ms": None, "every_ms": 3_600_000, "expr": None},
        "payload": {"kind": "agent_turn", "message": "ping", "session_key": None},
        "state": {"next_run_at_ms": 2_000, "run_history": []},
    }
    (store.dir / "action.jsonl").write_text(
        json.dumps({"action": "update", "params": nanobot_copy}) + "\n"
    )
    [merged] = JobStore(workspace).jobs()
    assert merged.name == "ping hourly"  # nanobot's change is taken
    assert merged.pending_approval and not merged.due(now_ms=10_000)  # but it still does not fire
