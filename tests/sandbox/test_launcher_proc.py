"""The launcher process's side (nanobot/sandbox/launcher_proc.py): the process every Landlock
command is forked from loads keeper.py and its few modules, not nanobot's asyncio side, nor
subprocess (whose threading makes every fork run Python code in the child)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nanobot.tools.base import ToolContext
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.shell import ExecTool

from canaries import confinement_or_skip


@pytest.fixture
def landlock():
    return confinement_or_skip("landlock")


def test_the_launcher_loads_neither_asyncio_nor_subprocess(tmp_path: Path, landlock):
    ws = tmp_path / "workspace"
    ws.mkdir()
    tool = ExecTool(
        ToolContext(workspace=ws, confinement=landlock, exec_rules=ExecRules(network=False))
    )
    out = asyncio.run(tool.run(command="cat /proc/$PPID/stat"))  # the command's parent: its keeper
    launcher_pid = int(out.rsplit(")", 1)[1].split()[1])
    mapped = Path(f"/proc/{launcher_pid}/maps").read_text()
    assert "_ctypes" in mapped  # it is the launcher: the keeper's ctypes is loaded there
    assert "_asyncio" not in mapped  # nanobot's side of launcher.py is not
    assert "_posixsubprocess" not in mapped  # nor subprocess (nanobot.errors once imported it)
