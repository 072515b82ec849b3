"""What a new user hits in the first hour, through the real command: slash commands in one-shot
mode, an empty history, provider failures, config mistakes, and the chat's small signals."""

from __future__ import annotations

import json
import os
import socket

from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore
from tests.cli.terminal import Terminal
from tests.providers.test_raw_http import CannedServer


def run(nanobot_run, *args, env=None):
    return nanobot_run(*args, env={"NANOBOT_RETRY_BASE_DELAY": "0.01", **(env or {})})


def assert_one_error(result, *parts, code=1):
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert lines[errors[0] + 1].startswith("hint: "), result.stderr  # the hint is on its own line
    for part in parts:
        assert part in result.stderr, (part, result.stderr)


def test_slash_commands_act_in_one_shot_mode_and_history_starts_empty(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(
        Reply.text("hello Ada"),
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] Ada said hello.",
                        "memory_update": "# Memory\n\n- The user is Ada.",
                    },
                )
            ]
        ),
    )
    empty = run(nanobot_run, "history", "grep", "Ada")
    assert empty.returncode == 1 and empty.stdout == "" and "no history yet" in empty.stderr
    assert run(nanobot_run, "agent", "-m", "my name is Ada").returncode == 0
    status = run(nanobot_run, "agent", "-m", "/status")
    assert status.returncode == 0 and "cli:direct: 2 messages" in status.stdout
    new = run(nanobot_run, "agent", "-m", "/new")
    assert new.returncode == 0, new.stderr
    assert "started a new conversation" in new.stdout
    # the working state leaves with the conversation: nothing said of keeping it, or of a checkpoint
    assert "compaction done: 2 messages archived" in new.stderr
    assert "working state" not in new.stderr + new.stdout, new.stderr
    assert (
        len(fake_llm.requests) == 2
    )  # the turn, then the archive call; "/new" never reached the model
    assert not any(
        "/new" in json.dumps(m)
        for r in fake_llm.requests
        for m in r.messages
        if m["role"] == "user"
    )
    stored = [
        json.loads(line) for line in SessionStore().path_for("cli:direct").read_text().splitlines()
    ]
    assert [m for m in stored if "role" in m] == []  # started afresh, after being archived:
    found = run(nanobot_run, "history", "grep", "Ada")
    assert found.returncode == 0 and "Ada said hello" in found.stdout
    assert_one_error(
        run(nanobot_run, "agent", "-m", "/bogus"), "unknown command /bogus", "-m ' /bogus'", code=2
    )
    stop = run(nanobot_run, "agent", "-m", "/stop")
    assert stop.returncode == 0 and "no subagents are running" in stop.stdout
    assert len(fake_llm.requests) == 2


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _custom(home, base, **provider):
    (home / "config.json").write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "custom/test-model", "provider": "custom"}},
                "providers": {"custom": {"apiKey": "sk-test", "apiBase": base, **provider}},
            }
        )
    )


def test_provider_failures_say_what_happened_and_where(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(
        Reply.error(
            429,
            message="You exceeded your current quota, please check your plan and billing details.",
            error_type="insufficient_quota",
        )
    )
    quota = run(nanobot_run, "agent", "-m", "hi")
    assert_one_error(quota, "quota or spending limit reached", "add credit")
    assert len(fake_llm.requests) == 1  # not retried: waiting cannot refill a quota

    fake_llm.reset()
    fake_llm.script(*[Reply.text("too late", delay=4) for _ in range(4)])
    _custom(isolated_home, fake_llm.openai_base_url, timeout=1)
    silent = run(nanobot_run, "agent", "-m", "hi")
    assert_one_error(
        silent,
        f"no answer from {fake_llm.openai_base_url}",
        "within 1s",
        "providers.custom.timeout",
    )

    port = _closed_port()
    _custom(isolated_home, f"http://127.0.0.1:{port}/v1")
    assert_one_error(
        run(nanobot_run, "agent", "-m", "hi"), f"could not connect to http://127.0.0.1:{port}/v1"
    )

    _custom(isolated_home, fake_llm.base_url)  # the /v1 left out
    assert_one_error(
        run(nanobot_run, "agent", "-m", "hi"), f"HTTP 404 from {fake_llm.base_url}", "apiBase"
    )

    _custom(isolated_home, "not a url")
    assert_one_error(
        run(nanobot_run, "agent", "-m", "hi"),
        "providers.custom.apiBase: 'not a url' is not an http(s) URL",
        code=2,
    )

    canned = CannedServer(
        b'{"id": "x", "object": "chat.completion", "choices": []}', "application/json"
    )
    page = CannedServer(b"<!doctype html><html><body>Welcome to nginx!</body></html>", "text/html")
    try:
        _custom(isolated_home, canned.url + "/v1")
        assert_one_error(
            run(nanobot_run, "agent", "-m", "hi"), "answered without a message", "no choices"
        )
        _custom(isolated_home, page.url)
        assert_one_error(
            run(nanobot_run, "agent", "-m", "hi"),
            f"the server at {page.url}",
            "a web page",
            "providers.custom.apiBase",
        )
    finally:
        canned.close()
        page.close()


def test_config_mistakes_are_said_not_passed_over(nanobot_run, fake_llm, configure, isolated_home):
    path = configure(contxtWindowTokens=500)
    data = json.loads(path.read_text())
    data["providers"]["custom"]["apiKey"] = "${MY_KEY}"
    path.write_text(json.dumps(data))
    os.chmod(path, 0o644)
    fake_llm.script(Reply.text("ok"))
    result = run(nanobot_run, "agent", "-m", "hi", env={"MY_KEY": "sk-expanded-123"})
    assert result.returncode == 0, result.stderr
    assert (
        "agents.defaults.contxtWindowTokens: unknown key, ignored; did you mean contextWindowTokens?"
        in result.stderr
    )
    assert "readable by other users (mode 0644)" in result.stderr
    assert fake_llm.requests[0].headers["authorization"] == "Bearer sk-expanded-123"
    assert_one_error(
        run(nanobot_run, "agent", "-m", "hi"),
        "${MY_KEY} refers to an environment variable that is not set",
        code=2,
    )
    data["agents"]["defaults"]["temperature"] = -3
    path.write_text(json.dumps(data))
    shown = run(nanobot_run, "memory", "show", env={"MY_KEY": "x"})
    assert shown.returncode == 0
    assert (
        "agents.defaults.temperature: -3 is out of range; using the default workspace"
        in shown.stderr
    )


def test_chat_says_it_resumed_marks_continuation_lines_and_counts_the_wait(
    nanobot_run, fake_llm, configure
):
    configure()
    # the spinner starts counting after 3 s (render.Waiting.QUIET_SECONDS); the answer comes at 4
    fake_llm.script(Reply.text("first"), Reply.text("slow answer", delay=4))
    first = run(
        nanobot_run, "agent", "-m", "hello"
    )  # the earlier conversation: one turn in cli:direct
    assert first.returncode == 0 and "resumed" not in first.stdout + first.stderr, first.stderr
    term = Terminal("agent")
    try:
        term.wait_for("resumed cli:direct: 2 earlier message(s), 2 in the prompt")
        term.wait_for("you ›")
        term.child.send("line one\x1b\r")  # Esc-Enter: a second line
        term.child.send("line two")
        term.wait_for("… line two")
        term.child.send("\r")
        term.wait_for_drawn("s (Ctrl-C to stop)")  # the spinner says how long it has waited
        term.wait_for("slow answer")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        assert term.finish() == 0
    finally:
        term.close()
    assert fake_llm.requests[-1].messages[-1]["content"].endswith("line one\nline two")


def test_one_style_for_usage_errors_key_errors_and_a_misspelt_security_setting(
    nanobot_run, isolated_home
):
    usage = run(nanobot_run, "session", "show")
    assert usage.stderr.splitlines()[0] == "Usage: nanobot session show [OPTIONS] KEY"  # no {key}
    assert_one_error(usage, "Missing argument 'KEY'", "nanobot session show --help", code=2)
    restore = run(nanobot_run, "memory", "restore", "--help")
    assert "Usage: nanobot memory restore [OPTIONS] N\n" in restore.stdout
    no_key = run(nanobot_run, "agent", "-m", "hi")
    assert_one_error(no_key, "no API key for provider 'anthropic'", code=2)
    assert no_key.stderr.count("ANTHROPIC_API_KEY") == 1  # the hint says it once
    assert "`nanobot onboard` creates that file" in " ".join(
        no_key.stderr.split()
    )  # there is none yet
    isolated_home.mkdir(parents=True, exist_ok=True)
    (isolated_home / "config.json").write_text("{}")
    with_config = run(nanobot_run, "agent", "-m", "hi")
    assert_one_error(with_config, "no API key for provider 'anthropic'", code=2)
    assert (
        "onboard" not in with_config.stderr
        and str(isolated_home / "config.json") in with_config.stderr
    )
    (isolated_home / "config.json").write_text(json.dumps({"tools": {"restrictToWorkSpace": True}}))
    assert_one_error(
        run(nanobot_run, "agent", "-m", "hi"),
        "did you mean tools.restrictToWorkspace?",
        "security setting",
        code=2,
    )
    tail = run(
        nanobot_run, "history", "tail", "-n", "2"
    )  # -n is --last, as in grep and session show
    assert (
        tail.returncode == 0 and "warning: " in tail.stderr
    )  # memory stays readable with a broken config
    assert "restrictToWorkspace" in tail.stderr and "no history yet" in tail.stderr


def test_ctrl_c_in_any_command_says_interrupted_and_exits_130(isolated_home):
    """typer turns a Ctrl-C inside a command into exit code 130 without a word; every command says
    "interrupted", as the chat does. Here `doctor` is waiting on a model server that never answers."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    isolated_home.mkdir(parents=True, exist_ok=True)
    config = isolated_home / "config.json"
    config.write_text(
        json.dumps(
            {
                "agents": {"defaults": {"model": "custom/m", "provider": "custom"}},
                "providers": {
                    "custom": {
                        "apiKey": "sk-test-key-123456",
                        "apiBase": f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
                    }
                },
            }
        )
    )
    config.chmod(0o600)
    term = Terminal("doctor")
    try:
        silent.settimeout(30)
        conn, _ = silent.accept()  # the probe is under way: the Ctrl-C lands inside the command
        term.child.sendintr()
        term.wait_for("interrupted")
        assert term.finish() == 130
        conn.close()
    finally:
        term.close()
        silent.close()
    assert "Traceback" not in term.text()
