"""The chat driven through a real pseudo-terminal (pexpect), as a user would see it."""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import UTC

import pexpect
import pytest
from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import is_consolidation

import forkserver

PROMPT = "you ›"


def spawn(isolated_home, *args):
    env = {
        **os.environ,
        "TERM": "xterm",
        "COLUMNS": "100",
        "LINES": "40",
        "PYTHONUNBUFFERED": "1",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }
    child = forkserver.shared().spawn(
        [sys.executable, "-m", "nanobot", "agent", *args],
        env=env,
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 100),
    )
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
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})]),
        Reply.text("Your workspace holds the usual files.", chunks=6),
    )
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
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": "touch started; sleep 60; touch finished"})]),
        Reply.text("second turn answer"),
    )
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


def test_status_and_new(repl, fake_llm, isolated_home):
    fake_llm.script(
        Reply.text("hello Ada", usage={"prompt_tokens": 1234, "completion_tokens": 5}),
        # /new archives the conversation into memory before clearing it
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] Ada introduced herself.",
                        "memory_update": "# Memory\n\n- The user is Ada.",
                    },
                )
            ]
        ),
        Reply.text("fresh start"),
    )
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
    assert (
        "The user is Ada." in fake_llm.requests[-1].messages[0]["content"]
    )  # remembered across /new
    history = (isolated_home / "workspace" / "memory" / "HISTORY.md").read_text()
    assert "Ada introduced herself" in history
    child.sendline("quit")
    child.expect(pexpect.EOF)


def test_second_process_on_the_same_session_is_refused(repl, isolated_home, nanobot_run):
    child = repl()
    result = nanobot_run(
        "agent", "-m", "hi"
    )  # this test's process is the second one, beside the chat's pty child
    assert result.returncode == 2
    assert "session cli:direct is in use by another nanobot process" in result.stderr
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_subagent_lines_reaction_and_stop_in_the_chat(repl, fake_llm, isolated_home, host_sleepers):
    import json as _json

    from nanobot.session.store import SessionStore

    pidfile = isolated_home / "workspace" / "slow.pid"

    def responder(request):
        body = _json.dumps(request.body)
        last = request.messages[-1]
        if "You are a subagent" in body:
            if "quick job" in body:
                return Reply.text("quick report: 7 files")
            return Reply.tool_calls(
                [("exec", {"command": "sleep 6072 & echo $! > slow.pid; wait"})]
            )
        if "subagent 'quick'" in _json.dumps(last):
            return Reply.text("The quick helper counted 7 files.")
        if last.get("role") == "tool":
            return Reply.text("Helper started.")
        if "what now" in _json.dumps(last):
            return Reply.text("noted the stop")
        label = "quick" if "quick" in _json.dumps(last) else "slow"
        return Reply.tool_calls([("spawn", {"task": f"{label} job", "label": label})])

    fake_llm.responder = responder
    child = repl()
    child.sendline("run a quick job")
    child.expect("subagent 'quick' \\(sa-[0-9a-f]+\\) started")
    child.expect("The quick helper counted 7 files.", timeout=20)
    child.sendline("now a slow job")
    child.expect("subagent 'slow' \\(sa-[0-9a-f]+\\) started")
    child.expect_exact(PROMPT)
    deadline = time.monotonic() + 10
    # $! is written once the shell has forked the sleeper, maybe before it has become `sleep`
    while (
        not (pidfile.exists() and pidfile.read_text().strip() and host_sleepers("6072"))
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    (pid,) = host_sleepers("6072")
    child.sendline("/status")
    child.expect("helper +subagent 'quick' \\(sa-[0-9a-f]+\\) completed after 1 step")
    child.expect("helper +subagent 'slow' \\(sa-[0-9a-f]+\\) is running: 1 step \\(exec\\) so far")
    child.sendline("/stop")
    child.expect("stopped 1 subagent")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the subagent's sleep survived /stop")
    child.sendline("what now?")  # the model sees the stop on the next turn
    child.expect("noted the stop")
    seen = _json.dumps(fake_llm.requests[-1].messages)
    assert "subagent 'slow'" in seen and "was stopped by the user (/stop)" in seen
    fake_llm.assert_all_valid()
    child.sendline("now a slow job")  # a second slow helper, still running when the user leaves
    child.expect("subagent 'slow' \\(sa-[0-9a-f]+\\) started")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(r"stopping 1 subagent\(s\) still running")
    child.expect(pexpect.EOF)
    notes = [m["content"] for m in SessionStore().load("cli:direct").messages if m.get("subagent")]
    assert len(notes) == 3, notes
    assert "'quick'" in notes[0] and "completed" in notes[0]
    assert "'slow'" in notes[1] and "was stopped by the user (/stop)" in notes[1]
    assert "'slow'" in notes[2] and "was stopped by the user leaving nanobot" in notes[2]


def test_new_says_a_running_helper_reports_into_the_new_conversation(repl, fake_llm):
    import json as _json

    def responder(request):
        body = _json.dumps(request.body)
        if "You are a subagent" in body:
            return Reply.text("slow report", delay=4)
        if request.messages[-1].get("role") == "tool":
            return Reply.text("Helper started.")
        return Reply.tool_calls([("spawn", {"task": "a slow job", "label": "slow"})])

    fake_llm.responder = responder
    child = repl()
    child.sendline("start a slow job")
    child.expect("Helper started.")
    child.expect_exact(PROMPT)
    child.sendline("/new")
    child.expect("started a new conversation")
    child.expect_exact(PROMPT)
    screen = screen_text(child)
    shown = " ".join(screen.split())
    assert (
        "1 subagent(s) still running: their reports will come into this new conversation" in shown
    )
    # the archive's name and the command to show it: wrapped between words at the 100 columns,
    # where the terminal itself would have cut "sessio|n"
    assert "the previous one is kept as cli:direct@" in shown and "(`nanobot session show" in shown
    assert max(len(line.rstrip()) for line in screen.splitlines()) <= 100, screen
    child.sendline("/stop")
    child.expect("stopped 1 subagent")


def test_stop_says_it_stopped_a_report_turn_that_was_answering(repl, fake_llm, isolated_home):
    # a report turn renders its answer whole when it ends: while it runs the screen shows nothing,
    # and /stop, which ends it, said "no subagents are running"
    import json as _json

    from nanobot.session.store import SessionStore

    def responder(request):
        body = _json.dumps(request.body)
        if "You are a subagent" in body:
            return Reply.text("quick report")
        if "quick report" in _json.dumps(request.messages[-1]):
            return Reply.text("reacting " * 200, chunks=100, pace=0.1)
        if request.messages[-1].get("role") == "tool":
            return Reply.text("Helper started.")
        return Reply.tool_calls([("spawn", {"task": "a quick job", "label": "quick"})])

    fake_llm.responder = responder
    child = repl()
    child.sendline("start a quick job")
    child.expect("subagent 'quick' \\(sa-[0-9a-f]+\\) completed")
    time.sleep(1.0)  # its report turn is answering
    child.sendline("/stop")
    child.expect("stopped 1 report turn")
    saved = SessionStore().load("cli:direct").messages
    assert saved[-1]["content"].endswith("[interrupted: the user stopped this answer here]")


def test_a_message_typed_while_a_report_turn_answers_does_not_take_the_rest_of_its_answer(
    repl, fake_llm
):
    # the report's reaction is shown whole when it ends, then the user's own answer; the user's
    # turn used to render the rest of the reaction (its first words lost) as if it were its answer
    import json as _json

    def responder(request):
        body = _json.dumps(request.body)
        last = _json.dumps(request.messages[-1])
        if "You are a subagent" in body:
            return Reply.text("quick report")
        if "quick report" in last:
            words = " ".join(f"w{i}" for i in range(120))
            return Reply.text(f"REACTION-START {words} REACTION-END", chunks=60, pace=0.05)
        if "and meanwhile" in last:
            return Reply.text("ANSWER-TO-USER")
        if request.messages[-1].get("role") == "tool":
            return Reply.text("Helper started.")
        return Reply.tool_calls([("spawn", {"task": "a quick job", "label": "quick"})])

    fake_llm.responder = responder
    child = repl()
    child.sendline("start a quick job")
    child.expect("subagent 'quick' \\(sa-[0-9a-f]+\\) completed")
    time.sleep(0.8)  # its report turn is answering, out of sight
    child.sendline("and meanwhile, hello")
    child.expect("ANSWER-TO-USER", timeout=20)
    shown = screen_text(child)  # everything since the helper completed, before the user's answer
    assert "REACTION-START" in shown and "REACTION-END" in shown
    fake_llm.assert_all_valid()


def test_a_failed_background_turn_is_shown_above_the_prompt(repl, fake_llm):
    import json as _json

    def responder(request):
        last = _json.dumps(request.messages[-1])
        if "You are a subagent" in _json.dumps(request.body):
            return Reply.text("report", delay=0.5)
        if "subagent 'bg'" in last:
            return Reply.error(400, message="prefill is not supported by this model")
        if request.messages[-1].get("role") == "tool":
            return Reply.text("Helper started.")
        return Reply.tool_calls([("spawn", {"task": "bg job", "label": "bg"})])

    fake_llm.responder = responder
    child = repl()
    child.sendline("start it")
    child.expect("Helper started.")
    child.expect_exact(PROMPT)
    child.expect("error:.*prefill is not supported by this model", timeout=20)
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_ctrl_c_twice_on_an_empty_prompt_leaves_once_does_not(repl, fake_llm, isolated_home):
    marker = isolated_home / "workspace" / "started"
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": "touch started; sleep 60"})]),
        Reply.text("still here"),
    )
    child = repl()
    child.sendline("run the slow thing")
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    child.sendcontrol("c")  # one Ctrl-C cancels the running turn, and does not count toward leaving
    child.expect("cancelled")
    child.expect_exact(PROMPT)
    child.sendcontrol("c")  # one Ctrl-C on the empty prompt: a hint, still running
    child.expect_exact("press Ctrl-C again to leave")
    time.sleep(1.3)
    child.sendcontrol("c")  # more than a second later: a first Ctrl-C again
    child.expect_exact("press Ctrl-C again to leave")
    # typing only once the next prompt is up: between two prompts the terminal is in cooked mode,
    # where Ctrl-C is SIGINT and discards what was typed before it
    child.expect_exact(PROMPT)
    child.send("typed text")
    child.sendcontrol("c")  # clears a typed line; does not count either
    child.sendcontrol("c")
    child.expect_exact("press Ctrl-C again to leave")
    assert child.isalive()
    child.sendline("are you there?")
    child.expect("still here")
    child.expect_exact(PROMPT)
    child.sendcontrol("c")
    child.sendcontrol("c")  # twice within a second on an empty prompt: leave
    child.expect("bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_multiline_input_and_history_persist_across_runs(repl, fake_llm, isolated_home):
    fake_llm.script(Reply.text("got two lines"), Reply.text("recalled"))
    child = repl()
    child.send("first line")
    child.send("\x1b\r")  # Esc-Enter: a line break, not send
    child.send("second line\r")
    child.expect("got two lines")
    child.expect_exact(PROMPT)
    sent = fake_llm.requests[0].messages[-1]["content"]
    assert sent.endswith("first line\nsecond line")
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert "second line" in (isolated_home / "input_history").read_text()

    again = repl()
    again.send("\x1b[A")  # Up recalls the previous run's "/exit" ...
    again.send("\x1b[A")  # ... and Up again the two-line message
    again.send("\r")
    again.expect("recalled")
    assert fake_llm.requests[1].messages[-1]["content"].endswith("first line\nsecond line")
    again.sendline("/exit")
    again.expect(pexpect.EOF)


def two_turns(child) -> None:
    """Two user turns, answered "noted your cat" and "noted your dog": something for /compact to archive."""
    child.sendline("my cat is Miso")
    child.expect("noted your cat")
    child.sendline("my dog is Rex")
    child.expect("noted your dog")
    child.expect_exact(PROMPT)


def test_compact_prints_a_receipt_naming_the_history_entry(repl, fake_llm, isolated_home):
    fake_llm.script(
        Reply.text("noted your cat"),
        Reply.text("noted your dog"),
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] User has a cat named Miso.",
                        "memory_update": "# Memory\n\n- Cat: Miso",
                    },
                )
            ]
        ),
    )
    child = repl()
    two_turns(child)
    child.sendline("/compact")
    child.expect(r"archived 2 message\(s\) in HISTORY.md: \[2026-01-05 10:00\] User has a cat")
    child.expect_exact(PROMPT)
    assert (
        "User has a cat named Miso."
        in (isolated_home / "workspace" / "memory" / "HISTORY.md").read_text()
    )
    assert "Cat: Miso" in (isolated_home / "workspace" / "memory" / "MEMORY.md").read_text()
    child.sendline("/exit")
    child.expect(pexpect.EOF)


def test_a_due_reminder_fires_in_the_chat_and_is_printed_above_the_prompt(
    repl, fake_llm, isolated_home, monkeypatch
):
    from datetime import datetime, timedelta

    from nanobot.cron.schedule import parse_schedule
    from nanobot.cron.store import JobStore

    monkeypatch.setenv(
        "NANOBOT_GATEWAY__JOBS_POLL_S", "0.2"
    )  # gateway.jobsPollS: the chat rereads the jobs often
    fake_llm.responder = lambda request: (
        Reply.text("Time to stretch!")
        if "Tell me to stretch" in str(request.messages[-1])
        else Reply.text("still here")
    )
    child = (
        repl()
    )  # the prompt is up; then a job is added, as `nanobot cron add` in another terminal does
    now = datetime.now(UTC)
    JobStore(isolated_home / "workspace").add(
        parse_schedule(
            at=(now + timedelta(seconds=1)).isoformat(), now_ms=int(now.timestamp() * 1000)
        ),
        "Tell me to stretch",
        now_ms=int(now.timestamp() * 1000),
        name="stretch",
    )
    child.expect_exact("⏰ stretch", timeout=30)
    child.expect_exact("Time to stretch!")
    child.expect_exact(PROMPT)  # the prompt is drawn again below the reminder
    child.sendline("are you there?")
    child.expect_exact("still here")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    assert JobStore(isolated_home / "workspace").jobs() == []  # a one-shot job is gone after it ran


def test_ctrl_c_cancels_a_slow_compact_and_the_chat_stays(repl, fake_llm, isolated_home):
    memory = isolated_home / "workspace" / "memory" / "MEMORY.md"
    fake_llm.script(
        Reply.text("noted your cat"),
        Reply.text("noted your dog"),
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] User has a cat.",
                        "memory_update": "# Memory\n\n- Cat",
                    },
                )
            ],
            delay=60,
        ),
        Reply.text("still here"),
    )
    child = repl()
    two_turns(child)
    before = memory.read_bytes() if memory.exists() else None
    child.sendline("/compact")
    assert fake_llm.wait_for_requests(
        3, timeout=20
    )  # the consolidation call is under way (and slow)
    child.expect(r"compacting… \d+s \(Ctrl-C to stop\)", timeout=10)  # it says it is alive
    child.sendcontrol("c")  # before: the chat left with "interrupted" (exit 130)
    child.expect("cancelled")
    child.expect_exact(PROMPT)
    assert (memory.read_bytes() if memory.exists() else None) == before
    assert not (isolated_home / "workspace" / "memory" / "HISTORY.md").exists()
    child.sendline("are you there?")
    child.expect("still here")
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect("bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_a_ctrl_c_between_two_prompts_waits_for_the_next_prompt_and_two_still_leave():
    # the few ms between prompts, when neither the prompt nor a turn owns Ctrl-C: a signal, not a key
    from types import SimpleNamespace

    from nanobot.cli.chat import Chat

    chat = SimpleNamespace(_idle_ctrl_c=None)
    Chat._on_idle_sigint(
        chat, 2, None
    )  # noted for the next prompt, which counts it as a Ctrl-C there
    assert chat._idle_ctrl_c is not None
    with pytest.raises(
        KeyboardInterrupt
    ):  # a second within a second: leave, as two at the prompt do
        Chat._on_idle_sigint(chat, 2, None)


# One-shot slash commands: stdout carries the command's result, as it carries a turn's answer;
# progress notices, warnings and errors go to stderr, so a script capturing stdout gets only the result.


def test_compact_prints_its_receipt_on_stdout_and_its_notices_on_stderr(
    nanobot_run, fake_llm, configure
):
    configure()
    fake_llm.summarise = True
    fake_llm.responder = lambda req: Reply.text("sure")
    for text in ("my invoice is BILL-4821", "the deadline is Friday", "thanks"):
        assert nanobot_run("agent", "-m", text).returncode == 0
    result = nanobot_run("agent", "-m", "/compact")
    assert result.returncode == 0, result.stderr
    assert (
        "compacting 4 messages into memory" in result.stderr and "compaction done" in result.stderr
    )
    assert "compacting" not in result.stdout and "compaction done" not in result.stdout
    out = result.stdout.splitlines()
    assert out[0].startswith(
        "archived 4 message(s) in HISTORY.md"
    )  # the receipt, then the checkpoint
    assert out[1].startswith("working state (version 1")
    assert sum(is_consolidation(r) for r in fake_llm.requests) == 1


def test_a_failed_compact_says_so_on_stderr_only(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.responder = lambda req: Reply.text(
        "I would rather not summarise"
    )  # never calls save_memory
    for text in ("first", "second"):
        assert nanobot_run("agent", "-m", text).returncode == 0
    result = nanobot_run("agent", "-m", "/compact")
    assert "memory consolidation failed" in result.stderr
    assert "memory consolidation failed" not in result.stdout and "compacting" not in result.stdout
