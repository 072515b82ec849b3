"""nanobot_run (tests/cli_runner.py) gives the command what a child process would get, and keeps
what the command changes out of the test process."""

from __future__ import annotations

import os
import signal
import sys

from nanobot import secrets_mask
from nanobot.fakellm import Reply


def test_a_run_sees_env_cwd_and_stdin_and_leaves_the_test_process_as_it_was(
    nanobot_run, fake_llm, configure, isolated_home, tmp_path
):
    configure()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": "echo from-the-child; echo oops >&2"})]),
        Reply.text("done"),
    )
    before = (
        dict(os.environ),
        os.getcwd(),
        sys.argv[:],
        signal.getsignal(signal.SIGTERM),
        set(secrets_mask._known),
        sys.stdout,
        sys.stderr,
    )
    result = nanobot_run(
        "agent",
        "--no-markdown",
        input="run it\n",
        cwd=elsewhere,
        env={"MY_SERVICE_TOKEN": "tok-0123456789-secret"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "done\n" and 'exec("echo from-the-child' in result.stderr
    assert (
        fake_llm.requests[0].messages[-1]["content"].endswith("run it\n")
    )  # stdin was the message
    tool_result = next(m for m in fake_llm.requests[1].messages if m.get("role") == "tool")[
        "content"
    ]
    assert "from-the-child" in tool_result and "oops" in tool_result
    after = (
        dict(os.environ),
        os.getcwd(),
        sys.argv[:],
        signal.getsignal(signal.SIGTERM),
        set(secrets_mask._known),
        sys.stdout,
        sys.stderr,
    )
    assert after == before  # the token the command's masker learnt stays with the command


def test_exit_codes_usage_errors_and_uncaught_exceptions(nanobot_run, monkeypatch):
    assert nanobot_run("--version").stdout.startswith("nanobot ")
    usage = nanobot_run("no-such-command")
    assert usage.returncode == 2 and "No such command" in usage.stderr

    from nanobot.cli import setup

    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(setup, "show_status", broken)
    crashed = nanobot_run("status")
    assert crashed.returncode == 1  # as the interpreter exits on an uncaught exception
    assert "Traceback" in crashed.stderr and "RuntimeError: a bug" in crashed.stderr


def test_each_run_starts_with_the_per_process_state_of_a_new_process(nanobot_run, isolated_home):
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "config.json").write_text(
        '{"agents": {"defaults": {"contextWindowTokens": 32000}}}'
    )
    first = nanobot_run("history", "tail")  # loads and caches the config for this command
    (isolated_home / "config.json").write_text(
        '{"agents": {"defaults": {"contextWindowTokens": "x"}}}'
    )
    second = nanobot_run("history", "tail")  # a new process would read the broken file
    assert "warning: " not in first.stderr and "warning: " in second.stderr
