"""Two nanobot processes: one writer per session, and separate sessions side by side.

The interactive chat runs in a real pseudo-terminal (pexpect); the second process is a one-shot
`nanobot agent -m` on the same session, which must be refused (exit code 2, a clear message)
without touching the first process's session file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore

import forkserver

PROMPT = "you ›"
IN_USE = "session cli:direct is in use by another nanobot process"


def spawn_repl(*args: str) -> pexpect.spawn:
    env = {
        **os.environ,
        "TERM": "xterm",
        "COLUMNS": "120",
        "LINES": "40",
        "PYTHONUNBUFFERED": "1",
        "PROMPT_TOOLKIT_NO_CPR": "1",
    }
    child = forkserver.shared().spawn(
        [sys.executable, "-m", "nanobot", "agent", "--no-markdown", *args],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 120),
    )
    child.expect_exact(PROMPT)  # the session is open (and locked) before the first prompt
    return child


def ask(child: pexpect.spawn, text: str, answer: str) -> None:
    child.sendline(text)
    child.expect_exact(answer)
    child.expect_exact(PROMPT)


def leave(child: pexpect.spawn) -> None:
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.wait()


def one_shot(nanobot_run, *args: str) -> subprocess.CompletedProcess:
    """`nanobot agent ...` in the test process: a second process beside the chat's pty child."""
    return nanobot_run("agent", *args)


def stored(home: Path, key: str) -> tuple[list[dict], bytes]:
    path = SessionStore(home / "sessions").path_for(key)
    raw = path.read_bytes()
    records = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return [r for r in records if "role" in r], raw


def pairs(messages: list[dict]) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content")) for m in messages if m["role"] in ("user", "assistant")]


@pytest.fixture
def children():
    started: list[pexpect.spawn] = []
    yield started
    for child in started:
        if child.isalive():
            child.terminate(force=True)


def test_second_process_on_a_busy_session_is_refused_and_the_first_loses_nothing(
    configure, fake_llm, isolated_home, nanobot_run, children
):
    configure()
    fake_llm.script(
        Reply.text("first answer"),
        # the tool waits until the test lets it go, so the second process surely runs mid-turn
        Reply.tool_calls(
            [("exec", {"command": "while [ ! -f go ]; do sleep 0.05; done; echo slept"})]
        ),
        Reply.text("third answer"),
    )
    repl = spawn_repl()
    children.append(repl)
    ask(repl, "first question", "first answer")

    # between turns: refused, exit code 2, nothing written
    before = stored(isolated_home, "cli:direct")[1]
    second = one_shot(nanobot_run, "-m", "second question")
    assert second.returncode == 2, second.stderr
    assert IN_USE in second.stderr
    assert "Traceback" not in second.stderr
    assert second.stdout == ""
    assert stored(isolated_home, "cli:direct")[1] == before

    # during a turn (a tool is running): refused again, and the turn finishes normally
    repl.sendline("third question")
    repl.expect_exact("exec(")
    during = one_shot(nanobot_run, "-m", "second question again", "--session", "cli:direct")
    assert during.returncode == 2 and IN_USE in during.stderr
    assert len(fake_llm.requests) == 2  # the first process's turn is still inside its tool call
    (isolated_home / "workspace" / "go").write_text("")
    repl.expect_exact("third answer")
    repl.expect_exact(PROMPT)
    leave(repl)
    assert repl.exitstatus == 0

    messages, raw = stored(isolated_home, "cli:direct")
    assert pairs(messages) == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "third question"),
        ("assistant", None),
        ("assistant", "third answer"),
    ]
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "slept" in messages[4]["content"]
    assert b"second question" not in raw
    assert not list((isolated_home / "sessions").glob("*.corrupt"))

    # the refused process never reached the model; every request the first one sent was valid
    assert len(fake_llm.requests) == 3
    fake_llm.assert_all_valid()
    texts = [json.dumps(m) for m in fake_llm.requests[1].messages]
    assert any("first question" in t for t in texts) and any("first answer" in t for t in texts)
    assert not any("second question" in json.dumps(r.messages) for r in fake_llm.requests)

    # once the first process has gone, the session is free again and holds both earlier turns
    fake_llm.script(Reply.text("fourth answer"))
    after = one_shot(nanobot_run, "-m", "fourth question")
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "fourth answer"
    sent = [m.get("content") for m in fake_llm.requests[-1].messages[1:-1]]
    assert (
        any(isinstance(c, str) and c.endswith("first question") for c in sent)
        and "third answer" in sent
    )


def _answer_by_user_text(rec) -> Reply:
    user = next(m for m in reversed(rec.messages) if m.get("role") == "user")
    text = user["content"] if isinstance(user["content"], str) else json.dumps(user["content"])
    word = text.strip().splitlines()[-1]
    return Reply.text(f"reply to {word}", delay=0.4)


def test_two_sessions_at_the_same_time_both_work(configure, fake_llm, isolated_home, children):
    configure()
    fake_llm.responder = _answer_by_user_text
    a = spawn_repl()
    children.append(a)
    b = spawn_repl("--session", "team:b")
    children.append(b)  # both prompts are up: both sessions are open and locked at once

    for round_ in (1, 2):
        # send both before reading either answer, so the two turns overlap
        a.sendline(f"alpha-{round_}")
        b.sendline(f"beta-{round_}")
        a.expect_exact(f"reply to alpha-{round_}")
        a.expect_exact(PROMPT)
        b.expect_exact(f"reply to beta-{round_}")
        b.expect_exact(PROMPT)
    leave(a)
    leave(b)
    assert a.exitstatus == 0 and b.exitstatus == 0

    fake_llm.assert_all_valid()
    assert not any(r.unscripted for r in fake_llm.requests)
    overlaps = [
        (r, s)
        for r in fake_llm.requests
        for s in fake_llm.requests
        if r.index < s.index and s.t_received < (r.t_answered or 0)
    ]
    assert overlaps, "the two sessions' turns never ran at the same time"

    a_msgs, a_raw = stored(isolated_home, "cli:direct")
    b_msgs, b_raw = stored(isolated_home, "team:b")
    assert pairs(a_msgs) == [
        ("user", "alpha-1"),
        ("assistant", "reply to alpha-1"),
        ("user", "alpha-2"),
        ("assistant", "reply to alpha-2"),
    ]
    assert pairs(b_msgs) == [
        ("user", "beta-1"),
        ("assistant", "reply to beta-1"),
        ("user", "beta-2"),
        ("assistant", "reply to beta-2"),
    ]
    assert b"beta" not in a_raw and b"alpha" not in b_raw
    # each second-round request carried its own session's first round, not the other one's
    for request in fake_llm.requests:
        body = json.dumps(request.messages)
        assert not ("alpha" in body and "beta" in body)


def test_two_processes_consolidating_into_one_workspace_lose_neither_update(
    configure, fake_llm, isolated_home, nanobot_cmd, nanobot_forkserver, nanobot_run
):
    """Both summaries are computed from the same MEMORY.md at the same time; the second to land is
    merged on top of the first (compare-and-swap), so both facts stay."""
    from nanobot.memory.store import MemoryStore

    window = 8192
    configure(contextWindowTokens=window)
    store = MemoryStore(isolated_home / "workspace")
    store.write_memory("# Memory\n\n- The user is Ana.\n", reason="setup")
    sessions = SessionStore(isolated_home / "sessions")
    for key in ("cli:alpha", "cli:beta"):
        session = sessions.open(key)
        for i in range(60):
            sessions.append(
                session,
                [
                    {
                        "role": "user",
                        "content": f"{key} turn {i}: " + "lorem ipsum dolor " * 30,
                        "timestamp": "2026-01-05T10:00:00",
                    },
                    {
                        "role": "assistant",
                        "content": "ok " * 40,
                        "timestamp": "2026-01-05T10:01:00",
                    },
                ],
            )
        sessions.close(session)

    import threading

    both_asked = threading.Barrier(2, timeout=90)
    first_seen: set[str] = set()
    seen_lock = threading.Lock()

    def brain(req):
        if not (req.tools and req.tools[0].get("function", {}).get("name") == "save_memory"):
            return Reply.text("answered")
        body = json.dumps(req.messages)
        who = "alpha" if "cli:alpha turn" in body else "beta"
        current = (
            req.messages[-1]["content"]
            .split("## Current MEMORY.md\n\n", 1)[1]
            .split("\n\n## Conv", 1)[0]
        )
        with seen_lock:
            first = who not in first_seen
            first_seen.add(who)
        if (
            first
        ):  # answer neither first summary before both were asked: both start from the same text
            both_asked.wait()
        return Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": f"[2026-01-05 10:00] talked in {who}",
                        "memory_update": current + f"\n- Learned in {who}.\n",
                    },
                )
            ]
        )

    fake_llm.responder = brain
    # one real child process, and this test's process as the other
    child = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-s", "cli:alpha", "-m", "hello"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    here = nanobot_run("agent", "-s", "cli:beta", "-m", "hello")
    outs = [child.communicate(timeout=120), (here.stdout, here.stderr)]
    assert [child.returncode, here.returncode] == [0, 0], outs
    text = store.read_memory()
    assert (
        "- The user is Ana." in text
        and "- Learned in alpha." in text
        and "- Learned in beta." in text
    )
    history = store.history_file.read_text()
    assert "talked in alpha" in history and "talked in beta" in history
    saves = [
        r
        for r in fake_llm.requests
        if r.tools and r.tools[0].get("function", {}).get("name") == "save_memory"
    ]
    bases = {r.messages[-1]["content"].split("## Conversation")[0] for r in saves[:2]}
    assert len(bases) == 1, "both updates were computed from the same MEMORY.md"
    assert any("merged on top" in err for _, err in outs)
