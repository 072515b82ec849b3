"""A chat started without `nanobot onboard` gets the prompt files onboard writes, and never loses
a file of the user's to them."""

from __future__ import annotations

import json
from pathlib import Path

from nanobot import paths
from nanobot.fakellm import Reply

TEMPLATES = paths.bundled_dir("workspace")


def _env(fake_llm) -> dict[str, str]:
    """No config file at all: the key and the server come from the environment."""
    return {
        "OPENAI_API_KEY": "sk-test-openai-key-0001",
        "NANOBOT_AGENTS__DEFAULTS__MODEL": "openai/gpt-4.1",
        "NANOBOT_PROVIDERS__OPENAI__API_BASE": fake_llm.openai_base_url,
    }


def _system_prompt(fake_llm) -> str:
    return json.dumps(fake_llm.requests[0].messages[0]["content"])


def test_the_first_chat_without_onboard_writes_the_templates_and_the_model_reads_them(
    nanobot_run, fake_llm, isolated_home
):
    assert not (isolated_home / "config.json").exists()
    fake_llm.script(Reply.text("hello"))
    result = nanobot_run("agent", "-m", "hi", env=_env(fake_llm))
    assert result.returncode == 0, result.stderr
    workspace = isolated_home / "workspace"
    for name in ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "HEARTBEAT.md"):
        assert (workspace / name).read_bytes() == (TEMPLATES / name).read_bytes(), name
    assert result.stderr == ""  # one-shot mode adds nothing to a script's stderr
    soul_line = (TEMPLATES / "SOUL.md").read_text().strip().splitlines()[-1]
    assert json.dumps(soul_line)[1:-1] in _system_prompt(fake_llm)  # in the very first request
    fake_llm.script(Reply.text("again"))
    again = nanobot_run("agent", "-m", "hi", env=_env(fake_llm))
    assert again.returncode == 0, again.stderr


def test_a_users_own_prompt_file_is_kept_and_only_the_missing_ones_are_written(
    nanobot_run, fake_llm, isolated_home
):
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "SOUL.md").write_text("I answer like a pirate.\n")
    (workspace / "USER.md").write_text("")  # emptied on purpose: kept empty
    fake_llm.script(Reply.text("arr"))
    result = nanobot_run("agent", "-m", "hi", env=_env(fake_llm))
    assert result.returncode == 0, result.stderr
    assert (workspace / "SOUL.md").read_text() == "I answer like a pirate.\n"
    assert (workspace / "USER.md").read_text() == ""
    assert (workspace / "AGENTS.md").read_bytes() == (TEMPLATES / "AGENTS.md").read_bytes()
    assert "I answer like a pirate." in _system_prompt(fake_llm)


def test_a_project_folder_used_as_the_workspace_gets_no_templates(
    nanobot_run, fake_llm, tmp_path: Path
):
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print('hi')\n")
    fake_llm.script(Reply.text("ok"))
    result = nanobot_run("agent", "-m", "hi", "-w", str(project), env=_env(fake_llm))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in project.iterdir() if not p.is_dir()) == ["main.py"]
