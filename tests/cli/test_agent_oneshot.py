"""`nanobot agent -m` through the real command against the fake server."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from nanobot.fakellm import Reply


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_one_shot_turn_with_two_tool_calls_writes_file_and_prints_answer(
    nanobot_run, fake_llm, configure, isolated_home, protocol
):
    configure(protocol)
    fake_llm.script(
        Reply.tool_calls(
            [
                ("write_file", {"path": "notes/todo.md", "content": "- buy milk\n"}),
                ("read_file", {"path": "notes/todo.md"}),
            ]
        ),
        Reply.text("I wrote notes/todo.md with your list."),
    )
    result = nanobot_run("agent", "-m", "make me a todo list")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "I wrote notes/todo.md with your list."
    assert (isolated_home / "workspace" / "notes" / "todo.md").read_text() == "- buy milk\n"
    assert 'write_file("notes/todo.md")' in result.stderr  # tool hints go to stderr
    fake_llm.assert_all_valid()
    second = fake_llm.requests[1]
    results = (
        [m for m in second.messages if m.get("role") == "tool"]
        if protocol == "openai"
        else [
            b
            for m in second.messages
            for b in (m["content"] if isinstance(m["content"], list) else [])
            if b.get("type") == "tool_result"
        ]
    )
    assert len(results) == 2
    assert "- buy milk" in json.dumps(results[1])


def test_runtime_context_is_in_the_user_message_and_system_prompt_is_stable(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(Reply.text("one"), Reply.text("two"))
    assert nanobot_run("agent", "-m", "first").returncode == 0
    assert nanobot_run("agent", "-m", "second").returncode == 0
    first, second = fake_llm.requests
    assert first.messages[0]["role"] == "system"
    assert first.messages[0]["content"] == second.messages[0]["content"]
    assert "Current time:" not in first.messages[0]["content"]
    last_user = second.messages[-1]
    assert last_user["role"] == "user" and last_user["content"].startswith("[Runtime Context]")
    assert last_user["content"].endswith("second")
    # the previous request is repeated byte for byte (prompt caching keeps hitting) ...
    assert second.messages[: len(first.messages)] == first.messages
    assert second.messages[len(first.messages)]["content"] == "one"
    # ... while the session file keeps the user's own words as the message text
    stored = [
        json.loads(line)
        for p in (isolated_home / "sessions").glob("*.jsonl")
        for line in p.read_text().splitlines()
    ]
    users = [m for m in stored if m.get("role") == "user"]
    assert [m["content"] for m in users] == ["first", "second"]
    assert all(m["runtime_context"].startswith("Current time:") for m in users)


def test_piped_stdin_is_the_message(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(Reply.text("piped ok"))
    result = nanobot_run("agent", input="what is this?\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "piped ok"
    assert fake_llm.requests[0].messages[-1]["content"].endswith("what is this?\n")


def test_json_output(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})]),
        Reply.text("empty folder", usage={"prompt_tokens": 77, "completion_tokens": 3}),
    )
    result = nanobot_run("agent", "-m", "ls", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["answer"] == "empty folder"
    assert data["tool_calls"] == [
        {"name": "list_dir", "arguments": {"path": "."}, "is_error": False}
    ]
    assert data["usage"] == {"prompt_tokens": 77, "completion_tokens": 3}


def test_provider_error_is_shown_not_saved_and_exit_code_1(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(Reply.error(401, message="invalid x-api-key"))
    result = nanobot_run("agent", "-m", "hello")
    assert result.returncode == 1
    assert "invalid x-api-key" in result.stderr and "API key" in result.stderr
    assert "Traceback" not in result.stderr
    session_text = "".join(p.read_text() for p in (isolated_home / "sessions").glob("*.jsonl"))
    assert '"hello"' in session_text  # the user's message is kept
    assert "invalid x-api-key" not in session_text  # the error is not history


def test_max_iterations_ends_with_a_clear_message(nanobot_run, fake_llm, configure):
    configure(maxToolIterations=3)
    fake_llm.script(*[Reply.tool_calls([("list_dir", {"path": "."})]) for _ in range(3)])
    result = nanobot_run("agent", "-m", "loop forever")
    assert result.returncode == 0
    assert "stopped after 3 steps" in result.stdout
    assert len(fake_llm.requests) == 3
    fake_llm.assert_all_valid()


def test_think_blocks_are_stripped_from_shown_and_saved_text(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(Reply.text("<think>secret reasoning</think>The answer is 4."))
    result = nanobot_run("agent", "-m", "2+2?")
    assert result.stdout.strip() == "The answer is 4."
    session_text = "".join(p.read_text() for p in (isolated_home / "sessions").glob("*.jsonl"))
    assert "secret reasoning" not in session_text and "The answer is 4." in session_text


def test_exec_child_does_not_see_api_keys(nanobot_run, fake_llm, configure, isolated_home):
    configure()
    fake_llm.script(Reply.tool_calls([("exec", {"command": "env > env.txt"})]), Reply.text("done"))
    result = nanobot_run(
        "agent",
        "-m",
        "dump env",
        env={
            "OPENAI_API_KEY": "sk-parent-secret",
            "MY_SERVICE_TOKEN": "tok-123",
            "HARMLESS": "yes",
        },
    )
    assert result.returncode == 0, result.stderr
    dumped = (isolated_home / "workspace" / "env.txt").read_text()
    assert "HARMLESS=yes" in dumped
    assert "sk-parent-secret" not in dumped and "tok-123" not in dumped
    assert "sk-test-key-123456" not in dumped  # the key from the config file either


def test_ctrl_c_during_a_one_shot_turn_exits_130_and_kills_the_command(
    nanobot_cmd, nanobot_forkserver, fake_llm, configure, isolated_home, host_sleepers
):
    import signal
    import time

    configure()
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": "sleep 6071 & echo $! > sleeper.pid; wait"})])
    )
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "run it"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pidfile = isolated_home / "workspace" / "sleeper.pid"
    deadline = time.monotonic() + 20
    # $! is written once the shell has forked the sleeper, maybe before it has become `sleep`
    while not (pidfile.exists() and pidfile.read_text().strip() and host_sleepers("6071")):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    (pid,) = host_sleepers("6071")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the command's process survived Ctrl-C")
    session_text = "".join(p.read_text() for p in (isolated_home / "sessions").glob("*.jsonl"))
    assert '"run it"' in session_text and "sleeper.pid" in session_text  # the turn so far is kept


def test_empty_and_cut_off_answers_are_flagged(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(
        Reply.text(""), Reply.text("This answer was cut mid-sen", finish_reason="length")
    )
    empty = nanobot_run("agent", "-m", "say nothing")
    assert empty.returncode == 0 and empty.stdout == ""
    assert "empty answer" in empty.stderr
    cut = nanobot_run("agent", "-m", "say a lot")
    assert cut.stdout.strip() == "This answer was cut mid-sen"
    assert "reached the reply limit" in cut.stderr and "maxTokens" in cut.stderr


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_prompt_too_long_is_recovered_by_learning_the_real_window(
    nanobot_run, fake_llm, configure, isolated_home, protocol
):
    configure(protocol, contextWindowTokens=16384)
    fake_llm.context_window = 8000  # the model's real window is smaller than configured
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "big.log").write_text(
        "".join(f"{i:06d} worker processed job {i * 7} fine\n" for i in range(3000))
    )
    fake_llm.script(
        Reply.tool_calls([("read_file", {"path": "big.log"})]), Reply.text("The log looks healthy.")
    )
    result = nanobot_run("agent", "-m", "check big.log")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The log looks healthy."
    assert "working within 8,000 tokens" in result.stderr and "contextWindowTokens" in result.stderr
    rejected = [r for r in fake_llm.requests if r.estimated_tokens > 8000]
    assert len(rejected) == 1  # one rejection, then every request fits the real window
    assert fake_llm.requests[-1].estimated_tokens <= 8000


def test_a_session_file_with_malformed_tool_calls_still_works_and_keeps_the_message(
    nanobot_run, fake_llm, configure, isolated_home
):
    from nanobot.session.store import SessionStore

    configure()
    path = SessionStore().path_for("cli:direct")
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        {"_type": "metadata", "key": "cli:direct", "last_consolidated": 0},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "x", "tool_calls": {"id": "a", "function": {"name": "f"}}},
        {"role": "assistant", "content": "y", "tool_calls": []},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fake_llm.script(Reply.text("all good"))
    result = nanobot_run("agent", "-m", "remember: my name is Ana")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "all good"
    assert "my name is Ana" in path.read_text()
    fake_llm.assert_all_valid()
    repair = nanobot_run("session", "repair", "cli:direct")
    assert repair.returncode == 0, repair.stderr


def test_an_empty_message_is_refused_with_exit_2(nanobot_run, fake_llm, configure):
    configure()
    result = nanobot_run("agent", "-m", "   ")
    assert result.returncode == 2 and "the message is empty" in result.stderr
    assert fake_llm.requests == []


# --------------------------------------------------------------------------- background work in one-shot


def _is_subagent(request) -> bool:
    return "You are a subagent" in json.dumps(request.body)


def _is_report(request) -> bool:
    return "subagent 'helper'" in json.dumps(request.messages[-1])


def helper_responder(
    *,
    parent_delay: float,
    helper_delay,
    answer: str = "handled the report",
    first: str | None = None,
):
    """Parent spawns a helper, answers "Started." after `parent_delay`; the helper reports after
    `helper_delay()`; the report turn answers `answer`. With `first` ("helper" or "parent"), the
    other's reply also waits until that one has been answered, so however busy the machine, the
    delay is counted from there."""
    answered = {"helper": threading.Event(), "parent": threading.Event()}

    def after_first(who: str) -> None:
        if first is not None and first != who:
            answered[first].wait(timeout=30)

    def responder(request):
        if _is_subagent(request):
            after_first("helper")
            answered["helper"].set()
            return Reply.text("the helper's report: 7 files", delay=helper_delay())
        if _is_report(request):
            return Reply.text(answer)
        if any(m.get("role") == "tool" for m in request.messages):
            after_first("parent")
            answered["parent"].set()
            return Reply.text("Started.", delay=parent_delay)
        return Reply.tool_calls([("spawn", {"task": "count files", "label": "helper"})])

    return responder


TIMINGS = {
    # the helper's report is queued while the parent turn still runs (the seed's lost case)
    "before": dict(parent_delay=0.15, helper_delay=lambda: 0.0, first="helper"),
    # it lands around the moment the parent turn ends
    "during": dict(parent_delay=0.05, helper_delay=lambda: random.uniform(0.0, 0.1)),
    # it arrives while one-shot mode is already waiting
    "after": dict(parent_delay=0.0, helper_delay=lambda: 0.15, first="parent"),
}


TRIALS = 20
AT_ONCE = (
    4  # trials side by side, each on its own thread, event loop and fake server; mostly they wait
)


class _PerThreadStream(io.TextIOBase):
    """sys.stdout or sys.stderr while trials run side by side: each thread writes to its own buffer."""

    encoding = "utf-8"

    def __init__(self) -> None:
        self._local = threading.local()

    def take(self) -> str:
        """What this thread wrote since the last take."""
        text = self._buffer().getvalue()
        self._local.buffer = io.StringIO()
        return text

    def _buffer(self) -> io.StringIO:
        if not hasattr(self._local, "buffer"):
            self._local.buffer = io.StringIO()
        return self._local.buffer

    def write(self, text: str) -> int:
        return self._buffer().write(text)

    def isatty(self) -> bool:
        return False


@dataclass
class _Trial:
    code: int
    out: str
    saved: list
    requests: list


def _run_trials(timing: str, home, monkeypatch) -> list[_Trial]:
    """TRIALS in-process `agent -m` runs (the real one-shot coroutine, the real SDK against a fake
    server), AT_ONCE at a time, each with its own session."""
    import asyncio

    from nanobot.cli.chat import _one_shot
    from nanobot.config import load_config
    from nanobot.fakellm import FakeLLMServer
    from nanobot.session.store import SessionStore

    out = _PerThreadStream()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", _PerThreadStream())
    results: dict[int, _Trial] = {}

    def slot(first: int) -> None:
        with FakeLLMServer() as server:
            path = home / f"config-{first}.json"
            path.write_text(
                json.dumps(
                    {
                        "agents": {
                            "defaults": {"model": "custom/test-model", "provider": "custom"}
                        },
                        "providers": {
                            "custom": {
                                "apiKey": "sk-test-key-123456",
                                "apiBase": server.openai_base_url,
                            }
                        },
                    }
                )
            )
            path.chmod(0o600)
            cfg = load_config(path)
            for trial in range(first, TRIALS, AT_ONCE):
                server.reset()
                server.responder = helper_responder(
                    **TIMINGS[timing]
                )  # its own events for each trial
                code = asyncio.run(
                    _one_shot(
                        cfg,
                        f"cli:trial{trial}",
                        "count the files in the background",
                        markdown=False,
                        json_out=False,
                    )
                )
                server.assert_all_valid()
                results[trial] = _Trial(
                    code,
                    out.take(),
                    SessionStore().load(f"cli:trial{trial}").messages,
                    list(server.requests),
                )

    home.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(AT_ONCE) as pool:
        for done in [pool.submit(slot, first) for first in range(AT_ONCE)]:
            done.result()
    return [results[trial] for trial in range(TRIALS)]


@pytest.mark.parametrize("timing", list(TIMINGS))
def test_one_shot_loses_no_report_in_20_trials(isolated_home, monkeypatch, timing):
    trials = _run_trials(timing, isolated_home, monkeypatch)
    assert len(trials) == 20
    lost, order = [], []
    for number, trial in enumerate(trials):
        handled = [r for r in trial.requests if _is_report(r)]
        if (
            trial.code != 0
            or "handled the report" not in trial.out
            or not handled
            or not any(m.get("content") == "handled the report" for m in trial.saved)
        ):
            lost.append(number)
        helper = next(r for r in trial.requests if _is_subagent(r))
        parent_end = next(
            r for r in trial.requests if r.reply is not None and r.reply.content == "Started."
        )
        order.append(helper.t_answered < parent_end.t_answered)
    assert lost == [], f"reports lost in trials {lost}"
    if timing == "before":
        assert all(order)
    elif timing == "after":
        assert not any(order)


def test_a_failed_report_turn_is_shown_on_stderr_and_a_good_answer_keeps_exit_0(
    fake_llm, configure, capsys
):
    import asyncio

    from nanobot.cli.chat import _one_shot
    from nanobot.config import load_config

    cfg = load_config(configure())
    base = helper_responder(parent_delay=0.0, helper_delay=lambda: 0.0)

    def responder(request):
        if _is_report(request):
            return Reply.error(400, message="does not support assistant message prefill")
        return base(request)

    fake_llm.responder = responder
    code = asyncio.run(_one_shot(cfg, "cli:direct", "go", markdown=False, json_out=False))
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.splitlines() == ["Started."]
    assert "error:" in captured.err and "does not support assistant message prefill" in captured.err


def test_the_only_answer_failing_in_the_background_exits_1(fake_llm, configure, capsys):
    import asyncio

    from nanobot.cli.chat import _one_shot
    from nanobot.config import load_config

    cfg = load_config(configure())
    state = {"main": 0}

    def responder(request):
        if _is_subagent(request):
            return Reply.text("report")
        state["main"] += 1
        if state["main"] == 1:
            return Reply.tool_calls([("spawn", {"task": "t", "label": "helper"})])
        return Reply.error(
            400, message=f"boom {state['main']}"
        )  # the user turn, then the report turn

    fake_llm.responder = responder
    code = asyncio.run(_one_shot(cfg, "cli:direct", "go", markdown=False, json_out=False))
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert "boom 2" in captured.err and "boom 3" in captured.err


def test_json_output_lists_the_report_turns(fake_llm, configure, capsys):
    import asyncio

    from nanobot.cli.chat import _one_shot
    from nanobot.config import load_config

    cfg = load_config(configure())
    fake_llm.responder = helper_responder(parent_delay=0.0, helper_delay=lambda: 0.1)
    code = asyncio.run(_one_shot(cfg, "cli:direct", "go", markdown=False, json_out=True))
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["answer"] == "Started."
    assert data["background"] == [
        {"answer": "handled the report", "stop_reason": "done", "error": None, "tool_calls": []}
    ]


def test_a_piped_answer_is_printed_as_the_model_wrote_it(nanobot_run, fake_llm, configure):
    """No emoji codes, markup or highlighting applied: `:smile:` and `[bold]` reach stdout as sent."""
    configure()
    answer = "Use :smile: or [bold]x[/bold] in 3.11 at http://example.test"
    fake_llm.script(Reply.text(answer))
    result = nanobot_run("agent", "-m", "how do I write a smile?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == answer + "\n"


def test_a_named_session_is_a_cli_chat_of_that_name_in_the_runtime_context(
    nanobot_run, fake_llm, configure
):
    # `-s work` told the model "Channel: work" (nanobot says channel cli, chat id work)
    configure()
    fake_llm.script(Reply.text("one"), Reply.text("two"))
    assert nanobot_run("agent", "-s", "work", "-m", "first").returncode == 0
    assert nanobot_run("agent", "-s", "telegram:42", "-m", "second").returncode == 0
    first, second = (r.messages[-1]["content"] for r in fake_llm.requests)
    assert "Channel: cli\nChat ID: work" in first
    assert "Channel: telegram\nChat ID: 42" in second
