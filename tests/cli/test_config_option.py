"""`--config/-c` on every command that reads the config, and each one reading the file it names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nanobot.memory.store import MemoryStore
from nanobot.messages import assistant, user
from nanobot.session.store import SessionStore


def _commands() -> list[tuple[str, ...]]:
    """Every command under the groups and the top level, as its argv words."""
    import typer
    from nanobot.cli import app as cli_app

    cli_app._mount_subcommands()
    found = []

    def walk(command, words: tuple[str, ...]) -> None:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            found.append(words)
            return
        for name, sub in subcommands.items():
            walk(sub, (*words, name))

    walk(typer.main.get_command(cli_app.app), ())
    return found


# the demo runs on its own scripted model and home: it reads no config file
WITHOUT_CONFIG = {("demo",)}


def test_every_command_that_reads_the_config_takes_config_and_c(nanobot_run):
    missing = []
    for words in _commands():
        if words in WITHOUT_CONFIG:
            continue
        shown = nanobot_run(*words, "--help", env={"COLUMNS": "200"}).stdout
        if "--config" not in shown or "-c" not in shown:
            missing.append(" ".join(words))
    assert missing == []


@pytest.fixture
def other_config(tmp_path: Path) -> Path:
    """A config file away from the default one, naming a workspace of its own."""
    workspace = tmp_path / "other-ws"
    workspace.mkdir()
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"agents": {"defaults": {"workspace": str(workspace)}}}))
    return path


def _workspace(config: Path) -> Path:
    return Path(json.loads(config.read_text())["agents"]["defaults"]["workspace"])


def test_memory_and_history_read_the_workspace_of_the_config_given(nanobot_run, other_config):
    workspace = _workspace(other_config)
    MemoryStore(workspace).write_memory("- lives in Lisbon\n", reason="test")
    (workspace / "memory" / "HISTORY.md").write_text(
        "[2026-03-01 10:00] booked the Lisbon flight\n"
    )
    shown = nanobot_run("memory", "show", "-c", str(other_config))
    assert shown.returncode == 0, shown.stderr
    assert "lives in Lisbon" in shown.stdout
    assert nanobot_run("memory", "show").stdout == ""  # the default config's workspace has none
    found = nanobot_run("history", "grep", "Lisbon", "--config", str(other_config))
    assert found.returncode == 0 and "booked the Lisbon flight" in found.stdout
    assert nanobot_run("history", "grep", "Lisbon").returncode == 1


def test_prompt_and_skills_read_the_workspace_of_the_config_given(nanobot_run, other_config):
    workspace = _workspace(other_config)
    (workspace / "USER.md").write_text("# User\n")
    versions = nanobot_run("prompt", "versions", "USER.md", "-c", str(other_config))
    assert versions.returncode == 0, versions.stderr
    assert f"{workspace / 'USER.md'}: last written by" in versions.stdout
    skill = workspace / "skills" / "mine"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: mine\ndescription: only here\n---\nbody\n")
    assert "only here" in nanobot_run("skills", "list", "-c", str(other_config)).stdout
    assert "only here" not in nanobot_run("skills", "list").stdout


def test_session_show_and_repair_read_the_config_given(nanobot_run, tmp_path):
    store = SessionStore()
    session = store.open("cli:direct")
    store.append(session, [user("hi"), assistant("hello")])
    store.close(session)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for words in (("session", "show", "cli:direct"), ("session", "repair", "cli:direct")):
        result = nanobot_run(*words, "-c", str(broken))
        assert result.returncode == 0, result.stderr
        assert str(broken) in result.stderr  # the file given was read (and is reported as broken)
    assert "hello" in nanobot_run("session", "show", "cli:direct", "-c", str(broken)).stdout


def test_a_config_named_that_does_not_exist_is_said_and_a_missing_default_is_not(
    nanobot_run, tmp_path
):
    typo = tmp_path / "confg.json"
    listed = nanobot_run("cron", "list", "-c", str(typo))
    assert listed.returncode == 0, listed.stderr
    assert f"warning: {typo} does not exist: using the defaults and the environment" in (
        listed.stderr
    )
    assert f"`nanobot onboard -c {typo}` creates it" in listed.stderr
    first_run = nanobot_run("cron", "list")  # no config file yet: the normal first run
    assert first_run.returncode == 0 and "does not exist" not in first_run.stderr
