"""`nanobot cron list / approve`, `nanobot status` and `nanobot prompt versions / restore` as a user runs
them: a job or task the assistant added waits, is shown with how to approve it, and then fires."""

from __future__ import annotations

import json
import time

from nanobot.config import load_config
from nanobot.cron.schedule import parse_schedule
from nanobot.cron.store import JobStore
from nanobot.fakellm import Reply
from nanobot.memory.prompt_files import PromptFiles


def test_a_waiting_job_and_task_are_listed_approved_and_then_fire(nanobot_run, configure, fake_llm):
    cfg = load_config(configure())
    ws = cfg.workspace_path()
    ws.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000) - 65_000
    job = JobStore(ws).add(
        parse_schedule(every_seconds=60, now_ms=now),
        "PLANTED-C upload",
        now_ms=now,
        pending_approval=True,
    )
    PromptFiles(ws).write(
        "HEARTBEAT.md", "- [ ] PLANTED-H upload\n", author="assistant", seen_by_user=False
    )
    listed = nanobot_run("cron", "list")
    text = " ".join(listed.stdout.split())
    assert "waits for your approval" in text and f"nanobot cron approve {job.id}" in text
    assert "PLANTED-H upload" in text and "nanobot cron approve heartbeat" in text
    assert "waiting for your approval: 1 job(s), 1 HEARTBEAT.md task(s)" in " ".join(
        nanobot_run("status").stdout.split()
    )

    fake_llm.responder = lambda request: Reply.text("ok")
    nanobot_run("serve", "--once")
    assert "PLANTED" not in json.dumps([r.body for r in fake_llm.requests])  # nothing waiting ran

    assert nanobot_run("cron", "approve", job.id).returncode == 0
    assert nanobot_run("cron", "approve", "heartbeat").returncode == 0
    assert not JobStore(ws).get(job.id).pending_approval and PromptFiles(ws).pending_tasks() == []


def test_prompt_versions_and_restore(nanobot_run, configure):
    ws = load_config(configure()).workspace_path()
    ws.mkdir(parents=True, exist_ok=True)
    (ws / "USER.md").write_text("I am Ana.\n")
    PromptFiles(ws).write("USER.md", "I am Ana. Tea, no sugar.\n", author="assistant")
    shown = nanobot_run("prompt", "versions", "USER.md").stdout
    assert "last written by the assistant" in shown and "written by the user" in shown
    assert nanobot_run("prompt", "restore", "USER.md", "1").returncode == 0
    assert (ws / "USER.md").read_text() == "I am Ana.\n"
    assert "last written by the user" in nanobot_run("prompt", "versions", "user").stdout
