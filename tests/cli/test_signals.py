"""SIGTERM, SIGHUP and a closed terminal: every process group nanobot and its helpers started
dies, the session is saved (and loads), and the exit code is 128 + the signal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pexpect
import pytest
from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore

from host_procs import alive, host_pids_naming, parent

# Each command marks that it runs, then writes one line 3 s later unless it was killed first. The
# token (an unused $0 of the inner shell) is in the command line of every process that could still
# write the line, so the tests see at once whether one survived instead of waiting 3 s for the write.
TOKEN = f"nanobot-signals-{os.getpid()}"
MAIN_CMD = f'touch main.started; sh -c "sleep 3; echo x >> main.late" {TOKEN}-main'
HELPER_CMD = f'touch helper.started; sh -c "sleep 3; echo x >> helper.late" {TOKEN}-helper'


def responder(request):
    body = json.dumps(request.body)
    last = request.messages[-1]
    if "You are a subagent" in body:
        return Reply.tool_calls([("exec", {"command": HELPER_CMD})])
    if last.get("role") == "tool" and "runs in the background" in json.dumps(last):
        return Reply.tool_calls([("exec", {"command": MAIN_CMD})])
    if last.get("role") == "tool":
        return Reply.text("done")
    return Reply.tool_calls([("spawn", {"task": "background sleeper", "label": "sleeper"})])


def assert_no_writer_survived(workspace, *names: str) -> None:
    """No process that could still write `<name>.late` is alive (give the kernel a moment to finish
    the kills), and none wrote it: so none ever will."""
    deadline = time.monotonic() + 5
    while (
        left := [n for n in names if host_pids_naming(f"{TOKEN}-{n}")]
    ) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert left == [], f"the {left} command survived nanobot"
    for name in names:
        assert not (workspace / f"{name}.late").exists(), (
            f"the {name} command wrote after nanobot ended"
        )


def wait_for(path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def wait_until_running(workspace, *names: str) -> None:
    """The commands marked that they run, and their writers are seen (what the check after relies on)."""
    for name in names:
        wait_for(workspace / f"{name}.started")
        assert host_pids_naming(f"{TOKEN}-{name}"), f"the {name} command runs but is not seen"


def assert_nothing_survived_and_session_loads(workspace, reason: str):
    assert_no_writer_survived(workspace, "main", "helper")
    session = SessionStore().load("cli:direct")
    assert session.warnings == []
    assert any(m.get("role") == "user" and m.get("content") == "go" for m in session.messages)
    notes = [m for m in session.messages if m.get("subagent")]
    assert (
        len(notes) == 1
        and "subagent 'sleeper'" in notes[0]["content"]
        and reason in notes[0]["content"]
    )


@pytest.fixture
def started(configure, fake_llm, isolated_home):
    configure()
    fake_llm.responder = responder
    return isolated_home / "workspace"


@pytest.mark.parametrize(
    "sig, code, reason",
    [
        (signal.SIGTERM, 143, "was stopped when nanobot was terminated (SIGTERM)"),
        (signal.SIGHUP, 129, "was stopped when the terminal closed (SIGHUP)"),
    ],
)
def test_signal_in_one_shot_kills_every_command_saves_and_exits(
    started, nanobot_cmd, nanobot_forkserver, sig, code, reason
):
    workspace = started
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "go"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until_running(workspace, "main", "helper")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert_nothing_survived_and_session_loads(workspace, reason)


def test_closing_the_terminal_kills_every_command_saves_and_exits_129(started, nanobot_forkserver):
    workspace = started
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = nanobot_forkserver.spawn(
        [sys.executable, "-m", "nanobot", "agent"],
        env=env,
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 100),
    )
    child.expect_exact("you ›")
    child.sendline("go")
    wait_until_running(workspace, "main", "helper")
    os.close(child.child_fd)  # the terminal goes away: the kernel hangs up its session (SIGHUP)
    child.child_fd = -1
    child.wait()
    assert (child.exitstatus, child.signalstatus) == (129, None)
    assert_nothing_survived_and_session_loads(
        workspace, "was stopped when the terminal closed (SIGHUP)"
    )


def idle_responder(request):
    if "You are a subagent" in json.dumps(request.body):
        return Reply.tool_calls([("exec", {"command": HELPER_CMD})])
    if request.messages[-1].get("role") == "tool":
        return Reply.text("it runs in the background")
    return Reply.tool_calls([("spawn", {"task": "background sleeper", "label": "sleeper"})])


def idle_chat_with_a_helper_running(workspace, forkserver):
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = forkserver.spawn(
        [sys.executable, "-m", "nanobot", "agent"],
        env=env,
        encoding="utf-8",
        timeout=20,
        dimensions=(40, 100),
    )
    child.expect_exact("you ›")
    child.sendline("go")
    child.expect("it runs in the background")
    child.expect_exact("you ›")
    wait_until_running(workspace, "helper")
    return child


def assert_helper_killed_and_noted(workspace, reason):
    assert_no_writer_survived(workspace, "helper")
    notes = [m["content"] for m in SessionStore().load("cli:direct").messages if m.get("subagent")]
    assert len(notes) == 1 and reason in notes[0], notes


def test_sigterm_at_the_idle_prompt_with_a_helper_running_exits_143(
    configure, fake_llm, isolated_home, nanobot_forkserver
):
    configure()
    fake_llm.responder = idle_responder
    workspace = isolated_home / "workspace"
    child = idle_chat_with_a_helper_running(workspace, nanobot_forkserver)
    child.kill(signal.SIGTERM)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 143, (child.exitstatus, child.signalstatus)
    assert_helper_killed_and_noted(workspace, "was stopped when nanobot was terminated (SIGTERM)")


def test_closing_the_terminal_at_the_idle_prompt_exits_129(
    configure, fake_llm, isolated_home, nanobot_forkserver
):
    configure()
    fake_llm.responder = idle_responder
    workspace = isolated_home / "workspace"
    child = idle_chat_with_a_helper_running(workspace, nanobot_forkserver)
    os.close(child.child_fd)
    child.child_fd = -1
    child.wait()
    assert (child.exitstatus, child.signalstatus) == (129, None)
    assert_helper_killed_and_noted(workspace, "was stopped when the terminal closed (SIGHUP)")


@pytest.mark.parametrize("mechanism", ["bwrap", "landlock"])
def test_sigkill_of_nanobot_leaves_nothing_a_command_started(
    configure,
    fake_llm,
    isolated_home,
    nanobot_cmd,
    nanobot_forkserver,
    host_sleepers,
    mechanism,
    tmp_path,
    monkeypatch,
):
    """No cleanup code runs on SIGKILL: what a command started must still die with nanobot, and
    what it left on disk (a Landlock command's TMPDIR folder) goes at the next nanobot's command."""
    from nanobot.sandbox.confine import choose

    if choose(mechanism).mechanism != mechanism:
        pytest.skip(f"{mechanism} is not available here")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {"exec": {"confinement": mechanism}}
    path.write_text(json.dumps(data))
    fake_llm.script(
        Reply.tool_calls(
            [
                (
                    "exec",
                    {
                        "command": "setsid sleep 7411 >/dev/null 2>&1 </dev/null & "
                        "nohup sleep 7412 >/dev/null 2>&1 & sleep 7413",
                        "timeout": 120,
                    },
                )
            ]
        ),
        Reply.text("done"),
    )
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "go"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    markers = ("7411", "7412", "7413")
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(host_sleepers(m) for m in markers):
            time.sleep(0.05)
        assert all(host_sleepers(m) for m in markers), "the command never started"
        # under Landlock the command was forked by nanobot's launcher process: it must go too
        launchers = [
            pid for pid in host_pids_naming("nanobot.sandbox.launcher") if parent(pid) == proc.pid
        ]
        assert bool(launchers) == (mechanism == "landlock")
        proc.kill()
        proc.communicate(timeout=20)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (
            any(host_sleepers(m) for m in markers) or any(alive(pid) for pid in launchers)
        ):
            time.sleep(0.05)
        left = [m for m in markers if host_sleepers(m)] + [
            f"launcher {pid}" for pid in launchers if alive(pid)
        ]
    finally:
        for m in markers:
            for pid in host_sleepers(m):
                os.kill(pid, signal.SIGKILL)
    assert left == []
    left_on_disk = sorted(p.name for p in tmp.iterdir())
    if mechanism == "landlock":
        assert [name.split("-")[2] for name in left_on_disk] == [
            str(proc.pid)
        ]  # its TMPDIR, named after it
    else:
        assert left_on_disk == []  # bwrap's /tmp is a tmpfs that went with it
    fake_llm.reset()
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": 'echo next > "$TMPDIR/x" && cat "$TMPDIR/x"'})]),
        Reply.text("done"),
    )
    nxt = nanobot_forkserver.run([*nanobot_cmd, "agent", "-m", "again"], text=True, timeout=60)
    assert nxt.returncode == 0, nxt.stderr
    assert "next" in fake_llm.requests[1].messages[-1]["content"]
    assert (
        list(tmp.iterdir()) == []
    )  # the dead one's folder removed, and the new command's own after it
