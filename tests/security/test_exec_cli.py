"""The honest fallback through the real CLI: where no confinement works (forced here by asking
for bwrap with bwrap hidden from PATH), the chat's first lines say so, one-shot mode refuses
every command, and --allow-unconfined-exec lets them run."""

from __future__ import annotations

import json
import os
import re
import sys

import pexpect
from nanobot.fakellm import Reply
from nanobot.sandbox import choose
from test_without_bwrap import path_without_bwrap  # noqa: F401  (fixture)

import forkserver


def _force_no_confinement(cfg_path) -> None:
    data = json.loads(cfg_path.read_text())
    data.setdefault("tools", {})["exec"] = {"confinement": "bwrap"}  # and bwrap is not on PATH
    cfg_path.write_text(json.dumps(data))


def test_one_shot_refuses_unconfined_exec_unless_the_flag_allows_it(
    nanobot_run, fake_llm, configure, isolated_home, path_without_bwrap
):
    _force_no_confinement(configure())
    env = {"PATH": path_without_bwrap}
    ws = isolated_home / "workspace"
    fake_llm.script(Reply.tool_calls([("exec", {"command": "touch ran"})]), Reply.text("done"))
    run = nanobot_run("agent", "-m", "make a file", env=env)
    assert run.returncode == 0, run.stderr
    assert "NOT confined (bwrap is not on PATH)" in " ".join(run.stderr.split())
    assert not (ws / "ran").exists()
    tool_result = next(m for m in fake_llm.requests[-1].messages if m.get("role") == "tool")
    assert "--allow-unconfined-exec" in json.dumps(
        tool_result
    )  # the model (and the user) learn what allows it

    fake_llm.script(Reply.tool_calls([("exec", {"command": "touch ran"})]), Reply.text("done"))
    run = nanobot_run("agent", "-m", "make a file", "--allow-unconfined-exec", env=env)
    assert run.returncode == 0, run.stderr
    assert (ws / "ran").exists()


def test_chat_first_lines_name_the_confinement_or_its_absence(
    configure, isolated_home, path_without_bwrap
):
    cfg_path = configure()

    def banner(path: str) -> str:
        env = {
            **os.environ,
            "PATH": path,
            "TERM": "xterm",
            "COLUMNS": "200",
            "PROMPT_TOOLKIT_NO_CPR": "1",
        }
        child = forkserver.shared().spawn(
            [sys.executable, "-m", "nanobot", "agent"],
            env=env,
            encoding="utf-8",
            timeout=30,
            dimensions=(40, 200),
        )
        try:
            child.expect_exact("you ›")
            return " ".join(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before).split())
        finally:
            child.terminate(force=True)

    confined = banner(os.environ["PATH"])
    assert re.search(
        r"exec: (bubblewrap [\d.]+|Landlock ABI \d+) · writes only to the workspace", confined
    ), confined
    _force_no_confinement(cfg_path)
    assert "exec: NOT confined (bwrap is not on PATH); every command needs your approval" in banner(
        path_without_bwrap
    )


def test_chat_asks_before_network_from_exec_and_the_answer_decides(
    configure, fake_llm, isolated_home, canary_tcp
):
    """n to the command: it does not run. y to the command: it runs, and where the kernel holds it to
    nanobot's egress proxy, the domain it contacts is asked about while it runs; n reaches nothing.
    (y to the domain reaching a site: tests/tools/test_egress_proxy.py, where a test seam lets the proxy
    reach a loopback site; here, in a real process, loopback stays refused.)"""
    configure()
    url = f"http://127.0.0.1:{canary_tcp.port}/"
    named = f"http://collector.test:{canary_tcp.port}/"
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": f"curl -s {url} > refused.txt"})]),
        Reply.text("it was refused"),
        Reply.tool_calls([("exec", {"command": f"touch started; curl -s {named} > page.txt"})]),
        Reply.text("fetched"),
    )
    proxied = choose("auto").filters_egress
    env = {
        **os.environ,
        "TERM": "xterm",
        "COLUMNS": "160",
        "LINES": "40",
        "PYTHONUNBUFFERED": "1",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }
    child = forkserver.shared().spawn(
        [sys.executable, "-m", "nanobot", "agent"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 160),
    )
    ws = isolated_home / "workspace"
    try:
        child.expect_exact("you ›")
        child.sendline("fetch the page")
        child.expect("approval needed")
        child.expect_exact("exec wants network access")
        child.expect_exact("allow? [y/a/n]")
        child.sendline("n")
        child.expect("it was refused")
        child.expect_exact("you ›")
        assert canary_tcp.connections == 0 and not (ws / "refused.txt").exists()
        child.sendline("fetch it now")
        child.expect_exact("allow? [y/a/n]")
        child.sendline("y")
        if proxied:
            child.expect_exact("wants to contact collector.test")
            child.expect_exact("allow? [y/a/n]")
            assert (ws / "started").exists()  # the question came while the command ran
            child.sendline("n")
        child.expect("fetched")
        child.expect_exact("you ›")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.terminate(force=True)
    assert canary_tcp.connections == 0 and "canary" not in (ws / "page.txt").read_text()
