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
    from datetime import UTC, datetime

    result = nanobot_run("cron", "add", "-m", "Call mum", "--at", "2020-01-01T10:00", "--tz", "UTC")
    assert result.returncode == 2
    assert "2020-01-01T10:00 is in the past (2020-01-01 10:00 UTC; it is now " in result.stderr
    assert f"it is now {datetime.now(UTC):%Y-%m-%d}" in result.stderr
    assert "runtime context" not in result.stderr  # words for the model, not for a person
    listed = nanobot_run("cron", "list", "--json")
    assert json.loads(listed.stdout)["jobs"] == []


def test_onboard_with_a_workspace_makes_the_chat_work_there(
    nanobot_run, fake_llm, configure, tmp_path
):
    config = configure()  # a key and a model, no workspace yet
    (tmp_path / "start").mkdir()
    made = nanobot_run("onboard", "-w", "proj", cwd=tmp_path / "start")
    assert made.returncode == 0, made.stderr
    project = tmp_path / "start" / "proj"
    assert (project / "AGENTS.md").is_file()
    assert json.loads(config.read_text())["agents"]["defaults"]["workspace"] == str(project)
    fake_llm.script(
        Reply.tool_calls([("write_file", {"path": "notes.md", "content": "milk\n"})]),
        Reply.text("saved"),
    )
    turn = nanobot_run("agent", "-m", "note: milk", cwd=tmp_path)  # from another folder
    assert turn.returncode == 0, turn.stderr
    assert (project / "notes.md").read_text() == "milk\n"

    other = nanobot_run("onboard", "-w", str(tmp_path / "other"))
    assert other.returncode == 0, other.stderr
    assert json.loads(config.read_text())["agents"]["defaults"]["workspace"] == str(project)
    assert f"keeps agents.defaults.workspace {project}" in " ".join(other.stdout.split())


# What nanobot 0.3.5's `nanobot agent` wrote when its model added two jobs with the cron tool and
# then removed the first (its gateway, never started here, would merge them into jobs.json).
NANOBOT_035_ACTIONS = """\
{"action": "add", "params": {"id": "0e935b59", "name": "Drink water", "enabled": true, "schedule": {"kind": "every", "at_ms": null, "every_ms": 7200000, "expr": null, "tz": null}, "payload": {"kind": "agent_turn", "message": "Drink water", "deliver": false, "channel": null, "to": null, "channel_meta": {}, "session_key": "cli:direct", "origin_channel": "cli", "origin_chat_id": "direct", "origin_metadata": {}}, "state": {"next_run_at_ms": 1796345863529, "last_run_at_ms": null, "last_status": null, "last_error": null, "run_history": []}, "created_at_ms": 1796338663529, "updated_at_ms": 1796338663529, "delete_after_run": false}}
{"action": "add", "params": {"id": "d738aa65", "name": "Weekly review", "enabled": true, "schedule": {"kind": "cron", "at_ms": null, "every_ms": null, "expr": "0 17 * * 5", "tz": "Europe/Berlin"}, "payload": {"kind": "agent_turn", "message": "Weekly review", "deliver": false, "channel": null, "to": null, "channel_meta": {}, "session_key": "cli:direct", "origin_channel": "cli", "origin_chat_id": "direct", "origin_metadata": {}}, "state": {"next_run_at_ms": 1796400000000, "last_run_at_ms": null, "last_status": null, "last_error": null, "run_history": []}, "created_at_ms": 1796338667125, "updated_at_ms": 1796338667125, "delete_after_run": false}}
{"action": "del", "params": {"job_id": "0e935b59"}}
"""


def test_reminders_made_in_nanobot_035s_agent_come_across_and_fire(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    cron = isolated_home / "workspace" / "cron"
    cron.mkdir(parents=True)
    (cron / "action.jsonl").write_text(NANOBOT_035_ACTIONS)
    listed = nanobot_run("cron", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [job] = json.loads(listed.stdout)["jobs"]  # the removed one stays removed
    assert (job["id"], job["schedule"]["expr"], job["schedule"]["tz"]) == (
        "d738aa65",
        "0 17 * * 5",
        "Europe/Berlin",
    )
    assert job["payload"]["sessionKey"] == "cli:direct" and "session_key" not in job["payload"]
    assert "merged 3 job change(s)" in listed.stderr
    assert (cron / "action.jsonl").read_text() == ""  # as nanobot's gateway leaves it
    assert (cron / "action.jsonl.imported").read_text() == NANOBOT_035_ACTIONS
    again = nanobot_run("cron", "list", "--json")
    assert len(json.loads(again.stdout)["jobs"]) == 1 and "merged" not in again.stderr
    fake_llm.script(Reply.text("Time for the weekly review."))
    fired = nanobot_run("cron", "run", "d738aa65")
    assert fired.returncode == 0, fired.stderr
    assert "Time for the weekly review." in fired.stdout
    assert fake_llm.requests[0].messages[-1]["content"].endswith("Weekly review")


def test_the_other_provider_advice_works_when_the_config_names_a_provider(
    nanobot_run, fake_llm, isolated_home
):
    config = isolated_home / "config.json"
    isolated_home.mkdir(parents=True)
    config.write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "anthropic/claude-x", "provider": "anthropic"}},
                "providers": {"openai": {"apiBase": fake_llm.openai_base_url}},
            }
        )
    )
    config.chmod(0o600)
    env = {"OPENAI_API_KEY": "sk-test-openai-key-0001"}
    refused = nanobot_run("agent", "-m", "hi", env=env)
    assert refused.returncode == 2 and "no API key for provider 'anthropic'" in refused.stderr
    hint = " ".join(refused.stderr.split())
    assert "`nanobot agent --model openai/gpt-4.1`" in hint
    if 'set agents.defaults.provider to "auto"' in hint:  # do what it says, as a user would
        _edit_config(config, lambda d: d["agents"]["defaults"].update(provider="auto"))
    fake_llm.script(Reply.text("hello from openai"))
    followed = nanobot_run("agent", "-m", "hi", "--model", "openai/gpt-4.1", env=env)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.strip() == "hello from openai"
    assert fake_llm.requests[0].body["model"] == "gpt-4.1"


def test_a_bad_value_in_the_environment_names_the_variable_not_the_file(
    nanobot_run, fake_llm, configure
):
    configure()
    variable = "NANOBOT_TOOLS__RESTRICT_TO_WORKSPACE"
    result = nanobot_run("agent", "-m", "hi", env={variable: "yes"})
    assert result.returncode == 2
    assert f"{variable}: tools.restrictToWorkspace: expected true or false" in result.stderr
    assert f"Fix or unset {variable}" in result.stderr
    assert "in the file" not in result.stderr  # the file has no such key: the user would look there
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    "variable", ["NANOBOT_TOOL__RESTRICT_TO_WORKSPACE", "NANOBOT_TOOLS__RESTRICT_TO_WORKSPAC"]
)
def test_a_misspelt_safety_switch_in_the_environment_stops_nanobot(
    nanobot_run, fake_llm, configure, variable
):
    configure()
    fake_llm.script(Reply.tool_calls([("read_file", {"path": "/etc/hostname"})]), Reply.text("ok"))
    result = nanobot_run("agent", "-m", "read it", "--approve", "all", env={variable: "true"})
    assert result.returncode == 2
    assert f"{variable} names no setting; did you mean NANOBOT_TOOLS__RESTRICT_TO_WORKSPACE?" in (
        result.stderr
    )
    assert fake_llm.requests == []


@pytest.mark.parametrize(
    "text, said",
    [
        ('["agents"]', "the top level must be a JSON object"),
        ('{"agents": {"defaults": "x"}}', 'agents.defaults: expected an object, got "x"'),
        ('{"tools": {"mcpServers": ["files"]}}', "tools.mcpServers: expected an object"),
    ],
)
def test_every_config_shape_error_says_what_to_do(nanobot_run, configure, text, said):
    config = configure()
    config.write_text(text)
    result = nanobot_run("status")
    assert result.returncode == 2
    error, hint = result.stderr.splitlines()[:2]
    assert error.startswith("error: ") and said in error
    assert hint.startswith("hint: ")
    assert config.read_text() == text  # never rewritten


def test_onboard_with_another_config_file_names_it_in_the_command_to_chat(
    nanobot_run, fake_llm, configure, tmp_path
):
    mine = tmp_path / "my config.json"
    configure().rename(mine)
    made = nanobot_run("onboard", "-c", str(mine))
    assert made.returncode == 0, made.stderr
    said = made.stdout.strip().splitlines()[-1]
    assert said.startswith(
        "model: custom/test-model — ready. Start chatting with: nanobot agent -c "
    )
    import shlex

    command = shlex.split(said.split("Start chatting with: ", 1)[1])
    fake_llm.script(Reply.text("hello"))
    chat = nanobot_run(*command[1:], "-m", "hi")  # the command it printed, as a user types it
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip() == "hello"


def test_a_refused_network_command_names_every_flag_it_will_need(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": "curl -sS https://example.com/data.json"})]),
        Reply.text("could not fetch it"),
    )
    result = nanobot_run("agent", "-m", "fetch the data", env={"COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    advice = " ".join(result.stderr.split())
    assert "--approve exec-network" in advice
    assert "--approve web-domain" in advice  # the proxy asks next: one rerun, not two
    assert "tools.web.allowDomains" in advice


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_session_key_is_refused_before_anything_is_saved(
    nanobot_run, fake_llm, configure, isolated_home, key
):
    configure()
    fake_llm.script(Reply.text("hello"))
    result = nanobot_run("agent", "-s", key, "-m", "hi")
    assert result.returncode == 2
    assert "error: the session key is empty" in result.stderr
    assert fake_llm.requests == []
    sessions = isolated_home / "sessions"
    assert not sessions.exists() or not list(sessions.glob("*.jsonl"))


def test_status_says_a_nanobot_session_is_still_to_be_imported_not_new(
    nanobot_run, fake_llm, isolated_home
):
    import shutil

    shutil.copytree(HOMES / "v0_3_5" / ".nanobot", isolated_home)
    env = {"NANOBOT_PROVIDERS__CUSTOM__API_BASE": fake_llm.openai_base_url, "COLUMNS": "400"}
    before = nanobot_run("status", env=env)
    row = next(line for line in before.stdout.splitlines() if line.strip().startswith("session"))
    assert "(new)" not in row and "nanobot's session, not imported yet" in row
    assert nanobot_run("session", "import", env=env).returncode == 0
    after = nanobot_run("status", env=env)
    row = next(line for line in after.stdout.splitlines() if line.strip().startswith("session"))
    assert row.split() == ["session", "cli:direct"]


def test_cron_lines_wrap_between_words_on_a_terminal(nanobot_run, configure, isolated_home):
    from tests.cli.terminal import Terminal

    configure()
    assert nanobot_run("cron", "add", "-m", "stretch", "--every", "3600").returncode == 0
    footer = (
        f"1 job(s) in {isolated_home / 'workspace' / 'cron' / 'jobs.json'}; they fire while "
        "`nanobot serve` or a chat runs"
    )
    columns = max(footer.index("`nanobot serve`") + 10, 72)  # an edge inside a word when possible
    term = Terminal("cron", "list", columns=columns, env={"NANOBOT_HOME": str(isolated_home)})
    try:
        term.wait_for("job(s) in")
        assert term.finish() == 0
    finally:
        term.close()
    lines = [line.rstrip() for line in term.lines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("1 job(s) in"))
    shown = " ".join(line for line in lines[start:] if line)
    assert shown == footer  # every line break fell between two words
    for line in lines[start:]:
        assert len(line) <= columns
