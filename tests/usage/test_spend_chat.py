"""The spawn chain in the interactive chat, through a real terminal (pexpect)."""

from __future__ import annotations

import os
import re
import sys
import time

import pexpect
from test_spend_cli import runaway_responder

import forkserver

PROMPT = "you ›"


def test_the_spawn_chain_stops_at_the_limit_in_the_chat(isolated_home, configure, fake_llm):
    configure()
    calls: dict = {}
    fake_llm.responder = runaway_responder(calls)
    env = {
        **os.environ,
        "TERM": "xterm",
        "COLUMNS": "200",
        "LINES": "40",
        "PYTHONUNBUFFERED": "1",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }
    child = forkserver.shared().spawn(
        [sys.executable, "-m", "nanobot", "agent"],
        env=env,
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 200),
    )
    try:
        child.expect_exact(PROMPT)
        child.sendline("count the files")
        child.expect(
            r"a helper was not started: 3 helpers in a row .*usage\.limits\.helperChain = 3",
            timeout=30,
        )
        child.expect("I could not start another helper")
        time.sleep(1.0)  # the chain has ended: nothing more arrives
        assert calls["helpers"] == 3 and calls["all"] < 15
        child.sendline("/status")
        child.expect(r"spend +this session: (\d+) calls today")
        assert int(child.match.group(1)) == calls["all"]
        child.sendline("/exit")
        child.expect(pexpect.EOF)
        shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before or "")
        assert "helperChain" not in shown  # told once
    finally:
        child.terminate(force=True)
    fake_llm.assert_all_valid()
