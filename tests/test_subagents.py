"""Subagents: reports come back as injected assistant turns, queued, valid, never saved."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import pytest

from nanobot.app import open_assistant
from nanobot.config import load_config
from nanobot.fakellm import Reply
from nanobot.session import SessionStore


def is_subagent(request) -> bool:
    return "You are a subagent" in json.dumps(request.body)


def last_message_text(request) -> str:
    return json.dumps(request.messages[-1])


def run(coro):
    return asyncio.run(coro)


async def with_assistant(cfg_path, fn):
    assistant = open_assistant(load_config(cfg_path), "cli:direct", stream=False)
    try:
        return await fn(assistant.conversation)
    finally:
        await assistant.aclose()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_seed_scenario_injected_report_answered_with_a_tool_call_then_next_user_turn(fake_llm, configure,
                                                                                    isolated_home, protocol):
    cfg_path = configure(protocol)
    state = {"main": 0}

    def responder(request):
        if is_subagent(request):
            return Reply.text("Report: the answer is 42, stored nowhere yet.")
        state["main"] += 1
        step = state["main"]
        if step == 1:
            return Reply.tool_calls([("spawn", {"task": "find the answer", "label": "research"})])
        if step == 2:
            return Reply.text("I started a research helper.")
        if step == 3:  # reacting to the injected report: a tool call
            return Reply.tool_calls([("write_file", {"path": "answer.txt", "content": "42"})])
        if step == 4:
            return Reply.text("The helper found 42; I saved it to answer.txt.")
        return Reply.text("You asked about the answer: 42.")

    fake_llm.responder = responder

    async def scenario(conv):
        await conv.send("please research the answer")
        assert await conv.wait_for_background(10)
        await conv.send("what did it find?")
        return conv

    run(with_assistant(cfg_path, scenario))
    assert (isolated_home / "workspace" / "answer.txt").read_text() == "42"
    fake_llm.assert_all_valid()  # no consecutive assistants, every tool result paired, both protocols
    main = [r for r in fake_llm.requests if not is_subagent(r)]
    assert len(main) == 5
    reaction = main[2]
    assert "Subagent 'research'" in json.dumps(reaction.body) and "the answer is 42" in json.dumps(reaction.body)
    # the injected report is context for its own turn only: never saved, not in the next user turn
    assert "the answer is 42, stored nowhere" not in json.dumps(main[4].body)
    store = SessionStore()
    saved = store.load("cli:direct").messages
    assert not any("Subagent 'research'" in str(m.get("content")) for m in saved)
    assert [m["role"] for m in saved].count("user") == 2


def test_session_file_with_consecutive_assistants_from_before_the_fix_gives_valid_requests(fake_llm, configure,
                                                                                          isolated_home):
    cfg_path = configure("anthropic")
    sessions = isolated_home / "sessions"
    sessions.mkdir(parents=True)
    path = SessionStore().path_for("cli:direct")
    lines = [
        {"_type": "metadata", "key": "cli:direct", "created_at": "2026-03-01T10:00:00", "metadata": {},
         "last_consolidated": 0},
        {"role": "user", "content": "start a helper", "timestamp": "2026-03-01T10:00:00"},
        {"role": "assistant", "content": "Started it.", "timestamp": "2026-03-01T10:00:01"},
        {"role": "assistant", "content": "[Subagent 'x' finished] Report: done", "timestamp": "2026-03-01T10:01:00"},
        {"role": "assistant", "content": None, "timestamp": "2026-03-01T10:01:01",
         "tool_calls": [{"id": "call_9", "type": "function",
                         "function": {"name": "list_dir", "arguments": "{\"path\": \".\"}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "name": "list_dir", "content": "a.txt",
         "timestamp": "2026-03-01T10:01:02"},
        {"role": "assistant", "content": "All done.", "timestamp": "2026-03-01T10:01:03"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    fake_llm.script(Reply.text("hello again"))
    run(with_assistant(cfg_path, lambda conv: conv.send("and now?")))
    fake_llm.assert_all_valid()
    roles = [m["role"] for m in fake_llm.requests[0].messages]
    assert roles == ["user", "assistant", "user", "assistant", "user"]


def test_two_reports_finishing_during_a_user_turn_are_processed_after_it_in_order(fake_llm, configure):
    cfg_path = configure()
    state = {"main": 0}

    def responder(request):
        body = json.dumps(request.body)
        if is_subagent(request):
            return Reply.text("report A") if "task A" in body else Reply.text("report B", delay=0.3)
        state["main"] += 1
        if state["main"] == 1:
            return Reply.tool_calls([("spawn", {"task": "task A", "label": "A"}),
                                     ("spawn", {"task": "task B", "label": "B"})])
        if state["main"] == 2:
            return Reply.text("both started", delay=1.0)  # the user turn is still running when both finish
        return Reply.text(f"noted {state['main']}")

    fake_llm.responder = responder
    events = []

    async def scenario(conv):
        conv.background_emit = events.append
        outcome = await conv.send("start two helpers")
        assert outcome.content == "both started"
        assert await conv.wait_for_background(10)

    run(with_assistant(cfg_path, scenario))
    fake_llm.assert_all_valid()
    main = [r for r in fake_llm.requests if not is_subagent(r)]
    assert len(main) == 4
    user_turn_end = main[1].t_answered
    reactions = main[2:]
    assert all(r.t_received >= user_turn_end for r in reactions)  # never concurrent with the user turn
    assert "report A" in last_message_text(reactions[0]) and "report B" in last_message_text(reactions[1])
    subs = [r for r in fake_llm.requests if is_subagent(r)]
    assert all(s.t_answered <= user_turn_end for s in subs)  # both really finished during the user turn
    notices = [e.text for e in events if hasattr(e, "text") and "subagent" in getattr(e, "text", "")]
    assert any("'A'" in n and "started" in n for n in notices) and any("'B'" in n and "completed" in n for n in notices)
    store = SessionStore()
    history = store.load("cli:direct").get_history()
    from nanobot.fakellm.rules import check_openai_messages

    assert check_openai_messages([{"role": "system", "content": "s"}, *history,
                                  {"role": "user", "content": "next"}]) == []


def test_report_on_an_empty_session_still_starts_with_a_user_turn(fake_llm, configure):
    cfg_path = configure("anthropic")
    fake_llm.script(Reply.text("noted"))
    from nanobot.subagents import SubagentResult

    async def scenario(conv):
        await conv._process_report(SubagentResult("sa-1", "late", "t", "completed", "result text"))

    run(with_assistant(cfg_path, scenario))
    fake_llm.assert_all_valid()
    assert fake_llm.requests[0].messages[0]["role"] == "user"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_stop_cancels_a_subagent_stuck_in_a_long_exec_and_kills_its_process_group(fake_llm, configure,
                                                                                 isolated_home, host_sleepers):
    cfg_path = configure()
    pidfile = isolated_home / "workspace" / "sleeper.pid"

    def responder(request):
        if is_subagent(request):
            return Reply.tool_calls([("exec", {"command": "sleep 6061 & echo $! > sleeper.pid; wait"})])
        if "Subagent" in json.dumps(request.body):
            return Reply.text("unexpected")
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("started")
        return Reply.tool_calls([("spawn", {"task": "sleep a lot", "label": "sleeper"})])

    fake_llm.responder = responder

    async def scenario(conv):
        await conv.send("start the sleeper")
        deadline = time.monotonic() + 10
        while not pidfile.exists() or not pidfile.read_text().strip():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        # exec runs in its own PID namespace: find the sleeper by its command line, not by $!
        (pid,) = host_sleepers("6061")
        assert pid_alive(pid)
        assert len(conv.running_subagents()) == 1
        stopped = await conv.stop_background()
        return stopped, pid

    stopped, pid = run(with_assistant(cfg_path, scenario))
    assert stopped == 1
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


def test_one_shot_waits_for_its_subagents_and_prints_the_reaction(nanobot_cmd, fake_llm, configure):
    configure()

    def responder(request):
        body = json.dumps(request.body)
        if is_subagent(request):
            return Reply.text("the helper's report", delay=0.3)
        if "Subagent 'helper'" in body:
            return Reply.text("Final: the helper reported back.")
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("Started a helper.")
        return Reply.tool_calls([("spawn", {"task": "do it", "label": "helper"})])

    fake_llm.responder = responder
    result = subprocess.run([*nanobot_cmd, "agent", "-m", "go"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Started a helper.", "Final: the helper reported back."]
    assert "waiting up to" in result.stderr
    fake_llm.assert_all_valid()


def test_one_shot_stops_waiting_after_the_configured_timeout(nanobot_cmd, fake_llm, configure, isolated_home):
    configure(subagentWaitSeconds=1)

    def responder(request):
        if is_subagent(request):
            return Reply.tool_calls([("exec", {"command": "sleep 30"})])
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("Started.")
        return Reply.tool_calls([("spawn", {"task": "slow", "label": "slow"})])

    fake_llm.responder = responder
    started = time.monotonic()
    result = subprocess.run([*nanobot_cmd, "agent", "-m", "go"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20
    assert "stopped waiting after 1s" in result.stderr and "1 subagent(s) stopped" in result.stderr


def test_subagent_requests_stay_inside_the_window_when_it_reads_a_huge_file(fake_llm, configure, isolated_home):
    cfg_path = configure(contextWindowTokens=8192)
    fake_llm.context_window = 8192
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "huge.txt").write_text("".join(f"line {i}: some log text here\n" for i in range(12000)))

    def responder(request):
        body = json.dumps(request.body)
        if is_subagent(request):
            if any(m.get("role") == "tool" for m in request.messages):
                return Reply.text("report: the file is a log")
            return Reply.tool_calls([("exec", {"command": "cat huge.txt"}), ("read_file", {"path": "huge.txt"})])
        if "Subagent" in body:
            return Reply.text("ok, it is a log")
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("started")
        return Reply.tool_calls([("spawn", {"task": "look at huge.txt", "label": "reader"})])

    fake_llm.responder = responder

    async def scenario(conv):
        await conv.send("look at the huge file in the background")
        assert await conv.wait_for_background(20)

    run(with_assistant(cfg_path, scenario))
    fake_llm.assert_all_valid()  # includes "no prompt over the window"
    assert max(r.estimated_tokens for r in fake_llm.requests) <= 8192
    assert sum(1 for r in fake_llm.requests if is_subagent(r)) == 2


def test_a_subagent_cancelled_before_it_starts_does_not_stay_running(tmp_path):
    from nanobot.subagents import SubagentManager

    async def scenario():
        manager = SubagentManager(provider=None, tools=None, workspace=tmp_path)
        manager.spawn("never runs", "ghost")
        stopped = await manager.cancel_all()  # cancelled before its first step
        await asyncio.sleep(0)
        return stopped, manager.running(), await manager.wait(0.1)

    stopped, running, done = asyncio.run(scenario())
    assert stopped == 1 and running == [] and done
