"""The first hour, third round: what a new user still hit, through the real command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nanobot.fakellm import Reply

HOMES = Path(__file__).parents[1] / "fixtures" / "nanobot_homes"


def _edit_config(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("section", ["tool", "Tools"])
def test_a_safety_switch_in_a_misspelt_section_stops_nanobot_before_any_request(
    nanobot_run, fake_llm, configure, section
):
    config = configure()
    _edit_config(config, lambda d: d.update({section: {"restrictToWorkspace": True}}))
    fake_llm.script(Reply.tool_calls([("read_file", {"path": "/etc/hostname"})]), Reply.text("ok"))
    result = nanobot_run("agent", "-m", "read /etc/hostname", "--approve", "all")
    assert result.returncode == 2
    assert f"{section}.restrictToWorkspace" in result.stderr
    assert "tools.restrictToWorkspace" in result.stderr  # where it goes
    assert fake_llm.requests == []  # nothing ran with the switch silently off


def test_a_misspelt_section_is_warned_about_and_nanobots_own_sections_stay_quiet(
    nanobot_run, fake_llm, configure
):
    config = configure()
    _edit_config(config, lambda d: d.update(agent={"defaults": {"maxTokens": 512}}))
    fake_llm.script(Reply.text("ok"))
    result = nanobot_run("agent", "-m", "hi")
    assert result.returncode == 0, result.stderr
    assert "agent: unknown key, ignored; did you mean agents?" in result.stderr
    assert fake_llm.requests[0].body["max_tokens"] != 512  # it was ignored, as said
    for home in ("v0_1_4_post6", "v0_3_5"):
        (config.parent / "config.json").write_bytes(
            (HOMES / home / ".nanobot" / "config.json").read_bytes()
        )
        quiet = nanobot_run("memory", "show")
        assert "unknown key" not in quiet.stderr, (home, quiet.stderr)


def test_a_reminder_in_the_past_says_what_time_it_is_now(nanobot_run, isolated_home):
    from datetime import datetime, timezone

    result = nanobot_run("cron", "add", "-m", "Call mum", "--at", "2020-01-01T10:00", "--tz", "UTC")
    assert result.returncode == 2
    assert "2020-01-01T10:00 is in the past (2020-01-01 10:00 UTC; it is now " in result.stderr
    assert f"it is now {datetime.now(timezone.utc):%Y-%m-%d}" in result.stderr
    assert "runtime context" not in result.stderr  # words for the model, not for a person
    listed = nanobot_run("cron", "list", "--json")
    assert json.loads(listed.stdout)["jobs"] == []
