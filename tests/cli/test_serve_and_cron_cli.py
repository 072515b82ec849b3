"""`nanobot serve` and `nanobot cron` as real processes: what they print, write and fire."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from nanobot.cli.cron_cmd import cron_app
from nanobot.config import load_config
from nanobot.cron.schedule import parse_schedule
from nanobot.cron.store import JobStore
from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore
from typer.testing import CliRunner


def due_job(workspace, message, **kwargs):
    now = int(time.time() * 1000) - 65_000  # added 65 s ago, every 60 s: due now, not "missed"
    return JobStore(workspace).add(
        parse_schedule(every_seconds=60, now_ms=now), message, now_ms=now, **kwargs
    )


def test_serve_once_fires_the_due_job_and_the_heartbeat_then_exits(
    nanobot_run, configure, fake_llm
):
    cfg = load_config(configure())
    workspace = cfg.workspace_path()
    job = due_job(workspace, "Tell me to stretch")
    (workspace / "HEARTBEAT.md").write_text(
        "# Heartbeat\n\n## Active tasks\n\n- [ ] Check that backup.log says OK\n"
    )

    def responder(request):
        last = json.dumps(request.messages[-1])
        if "[Heartbeat]" in last:
            return Reply.text("The backup log says FAILED since Tuesday.")
        return Reply.text("Time to stretch!")

    fake_llm.responder = responder
    result = nanobot_run("serve", "--once")
    assert result.returncode == 0, result.stderr
    assert "Time to stretch!" in result.stdout and "FAILED since Tuesday" in result.stdout
    assert "ran 2 due job(s)/heartbeat; done" in result.stdout
    store = SessionStore()
    assert store.load(f"cron:{job.id}").messages[-1]["content"] == "Time to stretch!"
    assert "FAILED since Tuesday" in store.load("heartbeat").messages[-1]["content"]
    log = (workspace / "cron" / "cron.log").read_text()
    assert "Time to stretch!" in log and "FAILED since Tuesday" in log
    assert JobStore(workspace).get(job.id).last_status == "ok"
    fake_llm.assert_all_valid()


def test_serve_runs_until_sigterm_and_a_second_runner_fires_nothing(
    nanobot_cmd, nanobot_forkserver, nanobot_run, configure, fake_llm, capsys
):
    from nanobot.cli.setup import show_status

    cfg_path = configure()
    cfg = load_config(cfg_path)
    workspace = cfg.workspace_path()
    fake_llm.responder = lambda request: Reply.text("Stretch now.")
    # serve rereads the jobs file every 0.2 s instead of 5 (gateway.jobsPollS), from the environment
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NANOBOT_GATEWAY__JOBS_POLL_S": "0.2"}
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    try:
        first_line = proc.stdout.readline()
        assert first_line.startswith("nanobot serve · workspace"), first_line + proc.stderr.read()
        job = due_job(
            workspace, "Tell me to stretch"
        )  # added while serve runs: it rereads the store
        second = nanobot_run("serve", "--once")
        assert second.returncode == 0 and "another runner is firing" in second.stdout
        assert "nanobot serve (pid" in second.stdout
        third = nanobot_run("serve")  # a second long-running serve refuses to start
        assert third.returncode == 1 and "not starting a second one" in third.stderr
        show_status(cfg_path)
        assert (
            f"1 job(s), 1 on · fired by nanobot serve (pid {proc.pid})" in capsys.readouterr().out
        )
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and JobStore(workspace).get(job.id).last_status is None:
            time.sleep(0.3)
        assert JobStore(workspace).get(job.id).last_status == "ok"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Stretch now." in out and out.rstrip().endswith("nanobot serve stopped")
    fired = [
        json.loads(line) for line in (workspace / "cron" / "runs.jsonl").read_text().splitlines()
    ]
    assert [(r["job_id"], r["status"]) for r in fired] == [
        (job.id, "ok")
    ]  # once, by the one runner


def cron(*args):
    result = CliRunner().invoke(cron_app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_cron_commands_add_list_pause_resume_run_remove(configure, fake_llm):
    cfg = load_config(configure())
    added = cron(
        "add",
        "-m",
        "Remind me of the stand-up",
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Berlin",
        "--name",
        "standup",
    )
    assert added.exit_code == 0, added.output
    job_id = added.stdout.split()[2]
    listed = json.loads(cron("list", "--json").stdout)
    assert [
        (j["id"], j["name"], j["schedule"]["expr"], j["schedule"]["tz"]) for j in listed["jobs"]
    ] == [(job_id, "standup", "0 9 * * 1-5", "Europe/Berlin")]
    assert job_id in cron("list").stdout
    assert cron("pause", job_id).exit_code == 0
    assert JobStore(cfg.workspace_path()).get(job_id).enabled is False
    assert "resumed" in cron("resume", job_id).stdout
    fake_llm.script(Reply.text("Stand-up in 15 minutes."))
    ran = cron("run", job_id)
    assert ran.exit_code == 0 and "Stand-up in 15 minutes." in ran.stdout
    assert JobStore(cfg.workspace_path()).get(job_id).history[-1].session == f"cron:{job_id}"
    assert cron("remove", job_id).exit_code == 0
    assert JobStore(cfg.workspace_path()).jobs() == []


def test_cron_errors_say_what_to_do_and_exit_2(nanobot_run, configure):
    configure()
    bad = nanobot_run("cron", "add", "-m", "x", "--every", "60", "--cron", "* * * * *")
    assert (
        bad.returncode == 2
        and "exactly one of --every" in bad.stderr
        and "--every 3600" in bad.stderr
    )
    missing = nanobot_run("cron", "remove", "nope")
    assert (
        missing.returncode == 2
        and "no job with id 'nope'" in missing.stderr
        and "cron list" in missing.stderr
    )


@pytest.mark.parametrize("mechanism", ["landlock"])  # bwrap: its PID namespace, proved elsewhere
def test_sigterm_while_a_job_runs_a_command_kills_it_and_everything_it_started(
    nanobot_cmd, nanobot_forkserver, configure, fake_llm, host_sleepers, mechanism
):
    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {"exec": {"confinement": mechanism}}
    path.write_text(json.dumps(data))
    cfg = load_config(path)
    workspace = cfg.workspace_path()
    fake_llm.script(
        Reply.tool_calls(
            [
                (
                    "exec",
                    {
                        "command": "setsid sleep 7311 >/dev/null 2>&1 </dev/null & sleep 7312",
                        "timeout": 120,
                    },
                )
            ]
        ),
        Reply.text("done"),
    )
    job = due_job(workspace, "Run the long check")
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not (host_sleepers("7311") and host_sleepers("7312")):
            time.sleep(0.1)
        assert host_sleepers("7311") and host_sleepers("7312"), (
            proc.stderr.read() if proc.poll() else "not started"
        )
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
        gone_at_exit = not host_sleepers("7311") and not host_sleepers("7312")
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in host_sleepers("7311") + host_sleepers("7312"):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert gone_at_exit  # nothing the job's command started outlives serve
    assert out.rstrip().endswith("nanobot serve stopped")
    record = json.loads((workspace / "cron" / "runs.jsonl").read_text().splitlines()[-1])
    assert record["job_id"] == job.id and record["status"] != "ok"
