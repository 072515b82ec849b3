"""The chat driven through a real pseudo-terminal (pexpect), as a user would see it."""

from __future__ import annotations

import os
import re
import sys
import time

import pexpect
import pytest

from nanobot.fakellm import Reply

PROMPT = "you ›"


def spawn(isolated_home, *args):
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "100", "LINES": "40", "PYTHONUNBUFFERED": "1", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = pexpect.spawn(sys.executable, ["-m", "nanobot", "agent", *args], env=env, encoding="utf-8",
                          timeout=20, dimensions=(40, 100))
    child.expect_exact(PROMPT)
    return child


def screen_text(child) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before or "")


@pytest.fixture
def repl(isolated_home, configure):
    configure()
    children = []

    def start(*args):
        child = spawn(isolated_home, *args)
        children.append(child)
        return child

    yield start
    for child in children:
        child.terminate(force=True)


def test_streamed_answer_and_tool_hint(repl, fake_llm):
    fake_llm.script(Reply.tool_calls([("list_dir", {"path": "."})]),
                    Reply.text("Your workspace holds the usual files.", chunks=6))
    child = repl()
    child.sendline("what is here?")
    child.expect_exact('list_dir(".")')
    child.expect("Your workspace holds the usual files")
    child.expect_exact(PROMPT)
    assert fake_llm.requests[1].stream is True
    fake_llm.assert_all_valid()
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_ctrl_c_cancels_a_long_tool_call_and_the_prompt_comes_back(repl, fake_llm, isolated_home):
    marker = isolated_home / "workspace" / "started"
    fake_llm.script(Reply.tool_calls([("exec", {"command": "touch started; sleep 60; touch finished"})]),
                    Reply.text("second turn answer"))
    child = repl()
    child.sendline("run the slow thing")
    child.expect_exact("exec(")
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    child.sendcontrol("c")
    child.expect("cancelled")
    child.expect_exact(PROMPT)
    assert child.isalive()
    child.sendline("are you still there?")
    child.expect("second turn answer")
    child.expect_exact(PROMPT)
    assert not (isolated_home / "workspace" / "finished").exists()
    # the interrupted call reached the model closed by a synthetic result, never as a broken pair
    fake_llm.assert_all_valid()
    tool_msgs = [m for m in fake_llm.requests[1].messages if m.get("role") == "tool"]
    assert tool_msgs and "interrupted" in tool_msgs[0]["content"]
    child.sendeof()
    child.expect(pexpect.EOF)


def test_status_and_new(repl, fake_llm):
    fake_llm.script(Reply.text("hello Ada", usage={"prompt_tokens": 1234, "completion_tokens": 5}),
                    Reply.text("fresh start"))
    child = repl()
    child.sendline("my name is Ada")
    child.expect("hello Ada")
    child.expect_exact(PROMPT)
    child.sendline("/status")
    child.expect("workspace ")  # the last line of the status view
    shown = screen_text(child)
    child.expect_exact(PROMPT)
    assert "custom/test-model" in shown
    assert "65,536" in shown and "%" in shown
    assert "prompt 1,234" in shown
    assert "2 messages" in shown
    child.sendline("/new")
    child.expect("new conversation")
    child.expect_exact(PROMPT)
    child.sendline("who am I?")
    child.expect("fresh start")
    child.expect_exact(PROMPT)
    contents = [m.get("content") for m in fake_llm.requests[-1].messages[1:]]
    assert len(contents) == 1 and "who am I?" in contents[0]
    child.sendline("quit")
    child.expect(pexpect.EOF)


def test_second_process_on_the_same_session_is_refused(repl, isolated_home, nanobot_cmd):
    import subprocess

    child = repl()
    result = subprocess.run([*nanobot_cmd, "agent", "-m", "hi"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "session cli:direct is in use by another nanobot process" in result.stderr
    child.sendline("/exit")
    child.expect(pexpect.EOF)
