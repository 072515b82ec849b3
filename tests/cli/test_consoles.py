"""Piped, every list command prints whole lines: no table cell cut to fit 80 columns."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from nanobot.cron.schedule import parse_schedule
from nanobot.cron.store import JobStore
from nanobot.messages import assistant, user
from nanobot.session.store import SessionStore
from nanobot.usage.ledger import Ledger, UsageRecord, ledger_dir

# longer than any terminal the suite runs under: main laid tables out for 80 columns (or for the
# width of a terminal on stdin) and cut this to "a-very-long-na…"
LONG = "a-very-long-name-" + "x" * 150 + "-end"


@pytest.fixture(autouse=True)
def no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def _add_job(workspace, name: str) -> None:
    now = int(time.time() * 1000)
    JobStore(workspace).add(
        parse_schedule(every_seconds=3600, now_ms=now), "stretch", now_ms=now, name=name
    )


def test_cron_list_through_a_real_pipe_prints_whole_lines(configure, isolated_home):
    configure()
    _add_job(isolated_home / "workspace", LONG)
    # env: os.environ, not the C environment, where an imported readline may have put COLUMNS=80
    nanobot = subprocess.Popen(
        [sys.executable, "-m", "nanobot", "cron", "list"],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    out, _ = nanobot.communicate(timeout=60)
    assert nanobot.returncode == 0
    row = next(line for line in out.splitlines() if LONG in line)
    assert "every 1h" in row and "cron:" in row  # the whole row on one line
    assert "…" not in out


def test_session_list_piped_keeps_a_long_key_whole(nanobot_run):
    store = SessionStore()
    session = store.open(f"cli:{LONG}")
    store.append(session, [user("hi"), assistant("hello")])
    store.close(session)
    result = nanobot_run("session", "list")
    assert result.returncode == 0, result.stderr
    assert f"cli:{LONG}" in result.stdout and "…" not in result.stdout


def test_skills_list_piped_keeps_a_long_description_whole(nanobot_run, isolated_home):
    skill = isolated_home / "workspace" / "skills" / "mine"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(f"---\nname: mine\ndescription: {LONG}\n---\nbody\n")
    result = nanobot_run("skills", "list")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if LONG in line)
    assert row.split()[0] == "mine"


def test_usage_piped_keeps_a_long_model_name_whole(nanobot_run):
    ledger = Ledger(ledger_dir())
    ledger.append(
        UsageRecord(
            t=time.time(),
            session="cli:direct",
            source="chat",
            model=f"openai/{LONG}",
            prompt=100,
            completion=10,
        )
    )
    ledger.close()
    result = nanobot_run("usage")
    assert result.returncode == 0, result.stderr
    assert f"openai/{LONG}" in result.stdout and "…" not in result.stdout


def test_columns_still_sets_the_width_of_a_pipe(nanobot_run, configure, isolated_home):
    configure()
    _add_job(isolated_home / "workspace", LONG)
    result = nanobot_run("cron", "list", env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()[:6]) <= 100


def test_a_piped_session_show_draws_its_rule_at_80_columns_not_the_pipes_width(nanobot_run):
    store = SessionStore()
    session = store.open("cli:direct")
    store.append(session, [user("old"), assistant("old answer"), user("new"), assistant("new")])
    store.set_pointer(session, 2)
    store.close(session)
    result = nanobot_run("session", "show", "cli:direct")
    assert result.returncode == 0, result.stderr
    [rule] = [line for line in result.stdout.splitlines() if "consolidated into memory" in line]
    assert len(rule) == 80 and rule.startswith("─")
