"""`nanobot skills ...` through the real command, as a new user runs what it prints."""

from __future__ import annotations

import shlex
from pathlib import Path

from nanobot.skills import SkillSet


def _skill(workspace: Path, name: str, front: str) -> None:
    path = workspace / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(f"---\nname: {name}\ndescription: {name} helper\n{front}---\nDo it.\n")


def test_the_approve_command_skills_list_prints_approves_every_skill_it_names(
    nanobot_run, isolated_home
):
    workspace = isolated_home / "workspace"
    _skill(workspace, "standup", "always: true\n")
    _skill(workspace, "weather", "")  # shadows the bundled weather skill
    listed = nanobot_run("skills", "list")
    assert listed.returncode == 0, listed.stderr
    printed = next(line for line in listed.stderr.splitlines() if "nanobot skills approve" in line)
    argv = shlex.split(printed[printed.index("nanobot skills approve") :])[1:]
    assert argv == ["skills", "approve", "standup", "weather"]

    declined_first = nanobot_run(*argv, input="n\ny\n")  # each is shown and asked in turn
    assert declined_first.returncode == 1, declined_first.stderr
    assert "standup helper" in declined_first.stdout and "weather helper" in declined_first.stdout
    assert [s.name for s in SkillSet.discover(workspace).held] == ["standup"]

    approved = nanobot_run(*argv, input="y\n")  # weather is active now: only standup asks
    assert approved.returncode == 0, approved.stderr
    assert "weather is already active" in approved.stdout
    assert SkillSet.discover(workspace).held == []
    assert {"standup", "weather"} <= {
        s.name for s in SkillSet.discover(workspace).skills if s.source == "workspace"
    }


def test_approving_a_name_nobody_waits_for_says_so_and_exits_2(nanobot_run, isolated_home):
    _skill(isolated_home / "workspace", "standup", "always: true\n")
    result = nanobot_run("skills", "approve", "nosuch", "standup", "--yes")
    assert result.returncode == 2
    assert "error: no workspace skill named 'nosuch'" in result.stderr
    assert "hint: `nanobot skills list`" in result.stderr  # the one error shape
    assert SkillSet.discover(isolated_home / "workspace").held == []  # the known one was approved
