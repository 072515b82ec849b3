"""The honest fallback through the real CLI: where no confinement works (forced here by asking
for bwrap with bwrap hidden from PATH), the chat's first lines say so, one-shot mode refuses
every command, and --allow-unconfined-exec lets them run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pexpect

from nanobot.fakellm import Reply
from test_without_bwrap import path_without_bwrap  # noqa: F401  (fixture)


def _force_no_confinement(cfg_path) -> None:
    data = json.loads(cfg_path.read_text())
    data.setdefault("tools", {})["exec"] = {"confinement": "bwrap"}  # and bwrap is not on PATH
    cfg_path.write_text(json.dumps(data))


def test_one_shot_refuses_unconfined_exec_unless_the_flag_allows_it(nanobot_cmd, fake_llm, configure,
                                                                    isolated_home, path_without_bwrap):
    _force_no_confinement(configure())
    env = {**os.environ, "PATH": path_without_bwrap}
    ws = isolated_home / "workspace"
    fake_llm.script(Reply.tool_calls([("exec", {"command": "touch ran"})]), Reply.text("done"))
    run = subprocess.run([*nanobot_cmd, "agent", "-m", "make a file"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert "NOT confined (bwrap is not on PATH)" in " ".join(run.stderr.split())
    assert not (ws / "ran").exists()
    tool_result = next(m for m in fake_llm.requests[-1].messages if m.get("role") == "tool")
    assert "--allow-unconfined-exec" in json.dumps(tool_result)  # the model (and the user) learn what allows it

    fake_llm.script(Reply.tool_calls([("exec", {"command": "touch ran"})]), Reply.text("done"))
    run = subprocess.run([*nanobot_cmd, "agent", "-m", "make a file", "--allow-unconfined-exec"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert (ws / "ran").exists()


def test_chat_first_lines_name_the_confinement_or_its_absence(configure, isolated_home, path_without_bwrap):
    cfg_path = configure()

    def banner(path: str) -> str:
        env = {**os.environ, "PATH": path, "TERM": "xterm", "COLUMNS": "200", "PROMPT_TOOLKIT_NO_CPR": "1"}
        child = pexpect.spawn(sys.executable, ["-m", "nanobot", "agent"], env=env, encoding="utf-8", timeout=30,
                              dimensions=(40, 200))
        try:
            child.expect_exact("you ›")
            return " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before).split())
        finally:
            child.terminate(force=True)

    confined = banner(os.environ["PATH"])
    assert re.search(r"exec: (bubblewrap [\d.]+|Landlock ABI \d+) · writes only to the workspace", confined), confined
    _force_no_confinement(cfg_path)
    assert "exec: NOT confined (bwrap is not on PATH); every command needs your approval" in banner(path_without_bwrap)
