"""Each overflow case of issue 12, through the real `nanobot` command, against a strict fake server.

The server counts every prompt with cl100k (as a provider would) and rejects prompt + max_tokens
over the 8,192-token window; each test checks what reached it, what is on disk, and what was printed.
"""

from __future__ import annotations

import json
import random
import re
import string

from nanobot.cli.setup import copy_templates
from nanobot.fakellm import Reply
from nanobot.messages import tool_call

from budget_helpers import (
    WINDOW,
    is_consolidation,
    make_strict,
    make_text,
    over_window,
    save_memory_reply,
)


def _turns(server) -> list:
    return [r for r in server.requests if not is_consolidation(r)]


def _body_text(req) -> str:
    return json.dumps(req.messages, ensure_ascii=False)


def _assert_inside(server, window: int = WINDOW) -> None:
    assert over_window(server, window) == []
    server.assert_all_valid()


def _session_file(home):
    return next((home / "sessions").glob("*.jsonl"))


def _stored(home) -> list[dict]:
    return [json.loads(line) for line in _session_file(home).read_text().splitlines()]


def test_after_a_long_answer_the_next_request_leaves_room_for_the_reply(
    nanobot_run, fake_llm, configure
):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    rng = random.Random(5)
    essay = " ".join(
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))
        for _ in range(3000)
    )  # 3,000 words, ~6,000 tokens: alone nearly the whole budget
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text(essay)
    )
    assert nanobot_run("agent", "-m", "write me a long essay about logs").returncode == 0
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("glad to help")
    )
    second = nanobot_run("agent", "-m", "thanks, that was great")
    assert second.returncode == 0, second.stderr
    assert "glad to help" in second.stdout
    _assert_inside(fake_llm)
    assert all(r.body["max_tokens"] == 2048 for r in fake_llm.requests)
    follow_up = _turns(fake_llm)[-1]
    assert "thanks, that was great" in _body_text(follow_up)
    # the essay was summarised (or cut for this request) rather than sent whole
    assert essay not in _body_text(follow_up)


def test_huge_pastes_are_kept_as_workspace_files_and_the_next_turn_works(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("read it")
    )
    inbox = isolated_home / "workspace" / "inbox"
    for size in (100_000, 1_000_000):
        paste = make_text("json", size, size)
        result = nanobot_run("agent", input=paste)
        assert result.returncode == 0, result.stderr
        said = [line for line in result.stderr.splitlines() if "saved it whole as" in line]
        assert len(said) == 1 and f"{size:,} characters" in said[0]
        kept = [p for p in inbox.iterdir() if p.read_text() == paste]
        assert len(kept) == 1, "the paste is on disk whole"
        request = _turns(fake_llm)[-1]
        assert f"inbox/{kept[0].name}" in _body_text(request) and "read_file" in _body_text(request)
    after = nanobot_run("agent", "-m", "what was in the second one?")
    assert after.returncode == 0 and "read it" in after.stdout, after.stderr
    _assert_inside(fake_llm)
    stored = [m for m in _stored(isolated_home) if m.get("role") == "user"]
    assert all(len(m["content"]) < 20_000 for m in stored), (
        "the session holds the excerpt, the file the rest"
    )


def test_two_thousand_tool_calls_run_only_up_to_the_cap(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    calls = [("write_file", {"path": f"out/f{i}.txt", "content": "x"}) for i in range(2000)]
    fake_llm.script(Reply.tool_calls(calls), Reply.text("made them"))
    result = nanobot_run("agent", "-m", "make 2000 files")
    assert result.returncode == 0, result.stderr
    assert len(list((isolated_home / "workspace" / "out").iterdir())) == 32  # the rest never ran
    assert "asked for 2,000 tool calls in one step; ran the first 32" in result.stderr
    _assert_inside(fake_llm)
    refused = [
        m
        for m in _stored(isolated_home)
        if m.get("role") == "tool" and "not run" in m.get("content", "")
    ]
    assert len(refused) == 1968


def test_a_long_message_echoed_in_tool_arguments_is_cut_for_the_request_only(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    message = "please save this text: " + make_text("prose", 13_500)  # just under half the budget
    fake_llm.script(
        Reply.tool_calls([("write_file", {"path": "saved.txt", "content": message})]),
        Reply.text("saved"),
    )
    result = nanobot_run("agent", "-m", message)
    assert result.returncode == 0 and "saved" in result.stdout, result.stderr
    _assert_inside(fake_llm)
    assert (
        isolated_home / "workspace" / "saved.txt"
    ).read_text() == message  # the tool got the whole text
    assert "characters cut for this request only" in _body_text(_turns(fake_llm)[-1])
    call = next(m for m in _stored(isolated_home) if m.get("tool_calls"))
    assert (
        json.loads(call["tool_calls"][0]["function"]["arguments"])["content"] == message
    )  # whole on disk


def test_an_oversized_stored_tool_result_counts_at_its_capped_size(
    nanobot_run, fake_llm, configure, isolated_home
):
    from nanobot.session.save_policy import MAX_TOOL_RESULT_CHARS
    from nanobot.session.store import SessionStore

    from budget_helpers import write_session

    configure(contextWindowTokens=16_384)
    make_strict(fake_llm, 16_384)
    huge = make_text("prose", 200_000)
    old = [{"role": "user", "content": f"turn {i}: hello"} for i in range(2)]
    write_session(
        SessionStore(),
        "cli:direct",
        [
            old[0],
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "read big.txt"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("c1", "read_file", {"path": "big.txt"})],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "read_file",
                "content": huge,
            },  # written by an older version
            {"role": "assistant", "content": "it is long"},
        ],
    )
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("ok")
    )
    result = nanobot_run("agent", "-m", "and now?")
    assert result.returncode == 0, result.stderr
    assert not [r for r in fake_llm.requests if is_consolidation(r)], (
        "nothing was summarised away for it"
    )
    sent = _body_text(fake_llm.requests[0])
    assert (
        "turn 0: hello" in sent
        and f"[truncated: {len(huge) - MAX_TOOL_RESULT_CHARS} more characters]" in sent
    )
    _assert_inside(fake_llm, 16_384)


def test_the_fallback_estimator_keeps_dense_tool_output_inside_the_window(
    nanobot_run, fake_llm, configure, isolated_home
):
    # counting bytes, the fixed prompt alone is ~10k "tokens": the fallback needs a larger window than 8k
    window = 32_768
    configure(contextWindowTokens=window)
    make_strict(fake_llm, window)
    workspace = isolated_home / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    for name, kind in (("dump.hex", "hex"), ("rows.jsonl", "json"), ("notes.txt", "cjk")):
        (workspace / name).write_text(make_text(kind, 60_000))
    fake_llm.script(
        Reply.tool_calls(
            [("read_file", {"path": n}) for n in ("dump.hex", "rows.jsonl", "notes.txt")]
        ),
        Reply.text("all read"),
    )
    fake_llm.responder = save_memory_reply
    result = nanobot_run(
        "agent", "-m", "read the three files", env={"NANOBOT_TOKENIZER": "fallback"}
    )
    assert result.returncode == 0 and "all read" in result.stdout, result.stderr
    status = nanobot_run("status", env={"NANOBOT_TOKENIZER": "fallback"})
    assert "fallback: UTF-8 bytes, an upper bound" in " ".join(status.stdout.split())
    _assert_inside(fake_llm, window)


def test_a_pointer_that_cannot_be_right_falls_back_to_what_history_proves(
    nanobot_run, fake_llm, configure, isolated_home
):
    from nanobot.session.store import SessionStore

    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    msgs = []
    for i in range(6):
        msgs += [
            {"role": "user", "content": f"question {i}", "timestamp": f"2026-01-05T10:0{i}:00"},
            {"role": "assistant", "content": f"answer {i}", "timestamp": f"2026-01-05T10:0{i}:30"},
        ]
    store = SessionStore()
    store.directory.mkdir(parents=True, exist_ok=True)
    meta = {"_type": "metadata", "key": "cli:direct", "created_at": "2026-01-05T10:00:00"}
    lines = [
        dict(meta, last_consolidated=0),
        *msgs[:4],
        dict(meta, last_consolidated=4),
        *msgs[4:],
        dict(meta, last_consolidated=True),
    ]  # a bool: the file was edited by hand or a buggy tool
    store.path_for("cli:direct").write_text("".join(json.dumps(x) + "\n" for x in lines))
    memory = isolated_home / "workspace" / "memory"
    memory.mkdir(parents=True)
    (memory / "HISTORY.md").write_text("[2026-01-05 10:00] Asked questions 0 and 1.\n\n")
    fake_llm.responder = lambda req: Reply.text("ok")
    result = nanobot_run("agent", "-m", "what did I ask?")
    assert result.returncode == 0, result.stderr
    assert len(re.findall("consolidation pointer", result.stderr)) == 1
    sent = _body_text(fake_llm.requests[0])
    assert "question 1" not in sent and all(f"question {i}" in sent for i in (2, 3, 4, 5))
    assert (
        SessionStore().load("cli:direct").warnings == []
    )  # told once: the proven pointer was recorded
    _assert_inside(fake_llm)


def test_a_hung_consolidation_call_does_not_hold_the_turn(
    nanobot_run, fake_llm, configure, isolated_home
):
    from nanobot.session.store import SessionStore

    from budget_helpers import write_session

    # the turn waits 0.2 s for room; the summarising call hangs until its 0.4 s deadline
    configure(
        contextWindowTokens=WINDOW, consolidationTimeoutSeconds=0.4, consolidationWaitSeconds=0.2
    )
    make_strict(fake_llm)
    history = []
    for i in range(40):
        history += [
            {"role": "user", "content": f"turn {i}: " + make_text("prose", 300, i)},
            {"role": "assistant", "content": f"answer {i}: " + make_text("prose", 300, i + 1)},
        ]
    write_session(SessionStore(), "cli:direct", history)
    fake_llm.responder = lambda req: (
        Reply.error(500, delay=30) if is_consolidation(req) else Reply.text("here")
    )
    result = nanobot_run("agent", "-m", "still there?")
    assert result.returncode == 0 and "here" in result.stdout, result.stderr
    consolidation = [r for r in fake_llm.requests if is_consolidation(r)]
    turn = _turns(fake_llm)[0]
    assert (
        consolidation and turn.t_received < consolidation[0].t_received + 30
    )  # asked before the hang ended
    assert "earlier messages of this conversation are left out of this request" in _body_text(turn)
    assert "took longer than 0.4 s" in result.stderr
    assert (
        "taking longer than 0.2 s (agents.defaults.consolidationWaitSeconds)" in result.stderr
    )  # went ahead
    # a timeout is an outage, not a refusal: nothing archived RAW, the pointer stays for the next run
    assert not (isolated_home / "workspace" / "memory" / "HISTORY.md").exists()
    meta = [r for r in _stored(isolated_home) if r.get("_type") == "metadata"]
    # one call per consolidation: the one before the turn, and perhaps the one after it
    assert len(consolidation) <= 2 and meta and meta[-1]["last_consolidated"] == 0
    _assert_inside(fake_llm)


def test_status_and_the_next_request_agree(nanobot_run, fake_llm, configure, isolated_home):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm)
    memory = isolated_home / "workspace" / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text(
        "# Memory\n\n" + "".join(f"- fact {i}: {make_text('prose', 60, i)}\n" for i in range(40))
    )
    # as onboard leaves it: the first chat writes the missing templates, which status cannot count
    copy_templates(isolated_home / "workspace")
    status = nanobot_run("status")
    assert status.returncode == 0, status.stderr
    out = " ".join(status.stdout.split())
    assert "reply room 2,048 tokens" in out
    estimate, budget = (
        int(x.replace(",", "")) for x in re.search(r"~([\d,]+) / ([\d,]+) tokens", out).groups()
    )
    assert budget == WINDOW - 2048
    assert (
        "warning" in out and "the fixed prompt" in out
    )  # with MEMORY.md it is more than half the budget
    fake_llm.script(Reply.text("hi"))
    turn = nanobot_run("agent", "-m", "Can you look at the file we talked about earlier?")
    assert turn.returncode == 0, turn.stderr
    assert "the fixed prompt" in turn.stderr  # the start-up check warns the same way
    request = fake_llm.requests[0]
    assert request.body["max_tokens"] == 2048
    # the estimate shown is what this request costs (our counter is a little above the server's)
    assert request.estimated_tokens <= estimate <= request.estimated_tokens * 1.1
    _assert_inside(fake_llm)
