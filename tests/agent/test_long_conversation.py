"""300 turns at an 8,192-token window: nothing over the window, nothing invalid, nothing forgotten."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from nanobot.fakellm import Reply
from nanobot.tools.base import Tool

from budget_helpers import open_quiet, talk

WINDOW = 8192
TURNS = 300
FACTS = [  # (what the user says in an early turn, what a later search must find)
    ("my cat is called Miso", "Miso"),
    ("my sister Ingrid lives in Tromso", "Ingrid"),
    ("my favourite editor is Helix", "Helix"),
    ("the project codename is BLUEHERON", "BLUEHERON"),
    ("my dentist appointment is on 2026-04-17", "2026-04-17"),
    ("I am allergic to hazelnuts", "hazelnuts"),
    ("my bike is a green Brompton", "Brompton"),
    ("our build server is called quokka-7", "quokka-7"),
]
_STAMP = re.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")


def _words(seed: int, n: int) -> str:
    return " ".join(f"topic{(seed * 31 + k * 7) % 211}" for k in range(n))


def _user_text(turn: int) -> str:
    if turn % 2 == 1 and turn // 2 < len(FACTS):
        return f"turn {turn}: please remember that {FACTS[turn // 2][0]}."
    if turn % 25 == 10:
        return f"turn {turn}: read the log big.log and tell me what is in it"
    if turn % 25 == 20:
        return f"turn {turn}: dump the whole log big.log for me"
    return f"turn {turn}: what do you think about {_words(turn, 25)}?"


class DumpFileTool(Tool):
    """Returns a whole file, however big: the 330 KB read that broke nanobot 0.1.4."""

    name = "dump_file"
    description = "Return the whole text of a file."
    parameters = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }

    async def run(self, path: str, **_: Any) -> str:
        return (self.ctx.workspace / path).read_text(encoding="utf-8")


class Brain:
    """The fake model: answers turns, and consolidation requests by calling save_memory."""

    def __init__(self) -> None:
        self.consolidations = 0
        self.turn_requests = 0

    def __call__(self, req) -> Reply:
        names = {(t.get("function") or {}).get("name") for t in req.tools or []}
        if "save_memory" in names:
            return self.consolidate(req)
        self.turn_requests += 1
        last = req.messages[-1]
        if last["role"] == "tool":
            return Reply.text(
                f"That log has {len(last['content']):,} characters of worker lines; all fine."
            )
        text = last["content"] if isinstance(last["content"], str) else ""
        if "read the log" in text:
            return Reply.tool_calls([("read_file", {"path": "big.log"})])
        if "dump the whole log" in text:
            return Reply.tool_calls([("dump_file", {"path": "big.log"})])
        turn = re.search(r"turn (\d+)", text)
        return Reply.text(
            f"Noted for turn {turn.group(1) if turn else '?'}. {_words(len(text), 45)}"
        )

    def consolidate(self, req) -> Reply:
        self.consolidations += 1
        stamp = _STAMP.search(req.messages[0]["content"]).group(0)
        body = req.messages[-1]["content"]
        current = body.split("## Current MEMORY.md\n\n", 1)[1].split(
            "\n\n## Conversation excerpt", 1
        )[0]
        if current.strip() == "(empty)":
            current = "# Memory"
        seen = [fact for fact, _ in FACTS if fact in body]
        turns = [int(n) for n in re.findall(r"USER: turn (\d+)", body)]
        span = f"turns {min(turns)}-{max(turns)}" if turns else "a background report"
        entry = f"{stamp} The user and nanobot talked through {span}. " + " ".join(
            f"The user said {fact}." for fact in seen
        )
        # only the first three facts go to MEMORY.md; the rest must be found in HISTORY.md
        new = [f"- {fact}" for fact in seen if fact in dict(FACTS[:3]) and fact not in current]
        memory = current.rstrip("\n") + "\n" + "".join(line + "\n" for line in new)
        return Reply.tool_calls(
            [("save_memory", {"history_entry": entry, "memory_update": memory})]
        )


def test_300_turns_at_an_8k_window(configure, fake_llm, isolated_home):
    from nanobot.app import open_assistant
    from nanobot.cli.setup import copy_templates
    from nanobot.config import load_config
    from nanobot.memory.store import MemoryStore

    configure(contextWindowTokens=WINDOW)
    fake_llm.context_window = WINDOW  # an oversize request is a violation and an HTTP 400
    brain = Brain()
    fake_llm.responder = brain
    cfg = load_config(None)
    workspace = cfg.workspace_path()
    copy_templates(workspace)
    log = "".join(
        f"2026-01-05 10:{i // 600 % 60:02d}:{i // 10 % 60:02d} INFO worker-{i % 7} processed job "
        f"{100000 + i} in {i % 97} ms\n"
        for i in range(6000)
    )
    (workspace / "big.log").write_text(log)
    assert len(log) > 300_000

    errors: list[str] = []

    async def chat() -> None:
        assistant = open_assistant(cfg, "cli:long", stream=False)
        conv = assistant.conversation
        from nanobot.app import tool_context

        conv.tools.register(DumpFileTool(tool_context(cfg, workspace)))
        try:
            for turn in range(TURNS):
                outcome = await conv.send(_user_text(turn))
                if outcome.error:
                    errors.append(f"turn {turn}: {outcome.error}")
        finally:
            await assistant.aclose()

    asyncio.run(chat())

    fake_llm.assert_all_valid()  # no request over the window, none malformed
    assert not errors, errors[:3]
    assert max(r.estimated_tokens for r in fake_llm.requests) <= WINDOW
    assert brain.turn_requests >= TURNS and brain.consolidations >= 10

    memory = MemoryStore(workspace)
    remembered = memory.read_memory()
    history = memory.history_file.read_text(encoding="utf-8")
    entries = [e for e in re.split(r"\n\n+", history.strip()) if e.strip()]
    assert entries and all(_STAMP.match(e) for e in entries), "every HISTORY.md entry is dated"
    assert "RAW archive" not in history
    from nanobot.app import tool_context
    from nanobot.tools.recall import SearchHistoryTool

    recall = SearchHistoryTool(tool_context(cfg, workspace))  # what the model itself would call
    for fact, key in FACTS:
        if key in remembered:
            continue
        found = asyncio.run(recall.run(query=key))
        assert fact in found, f"forgot {fact!r}: {found}"
    assert all(f"- {fact}" in remembered for fact, _ in FACTS[:3])


# -- the conversation around consolidation (in-process unless the real command matters) ----------


def _prefill(cfg, turns: int, key: str = "cli:direct", *, until_below: int | None = None) -> int:
    """Store `turns` old exchanges (or as many as keep the estimate under `until_below`)."""
    assistant = open_quiet(cfg, key)
    conv = assistant.conversation
    try:
        for turn in range(turns):
            exchange = [
                {
                    "role": "user",
                    "content": _user_text(turn * 2 + 100),
                    "timestamp": "2026-01-04T09:30:00",
                },
                {
                    "role": "assistant",
                    "content": f"Noted for turn {turn}. {_words(turn, 60)}",
                    "timestamp": "2026-01-04T09:31:00",
                },
            ]
            if until_below is not None and conv.estimate("hi") + 250 > until_below:
                break
            assistant.store.append(conv.session, exchange)
        return len(conv.session.messages)
    finally:
        asyncio.run(assistant.aclose())


def test_turn_over_budget_consolidates_first_with_a_notice(configure, fake_llm):
    from nanobot.agent.events import Notice
    from nanobot.config import load_config

    configure(contextWindowTokens=WINDOW)
    fake_llm.context_window = WINDOW
    fake_llm.responder = Brain()
    cfg = load_config(None)
    stored = _prefill(cfg, 40)
    events: list = []

    async def go(assistant):
        before = assistant.conversation.estimate("hello again")
        outcome = await assistant.conversation.send("hello again", emit=events.append)
        return before, outcome, assistant.conversation.session.last_consolidated

    before, outcome, pointer = talk(cfg, go)
    assert before > WINDOW - 2048 and not outcome.error
    kinds = [
        "save_memory" if r.tools and r.tools[0]["function"]["name"] == "save_memory" else "turn"
        for r in fake_llm.requests
    ]
    assert kinds[0] == "save_memory" and "turn" in kinds  # consolidated before the turn's request
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert any(re.fullmatch(r"compacting \d+ messages into memory…", n) for n in notices)
    assert 0 < pointer <= stored
    fake_llm.assert_all_valid()


def test_new_archives_first_and_clears_second(configure, fake_llm, isolated_home):
    from nanobot.config import load_config
    from nanobot.memory.store import MemoryStore
    from nanobot.session.store import SessionStore

    configure()
    fake_llm.responder = Brain()
    cfg = load_config(None)
    _prefill(cfg, 3)

    async def new(fail_clear: bool):
        assistant = open_quiet(cfg)
        try:
            if fail_clear:

                def crash(session):
                    raise OSError("disk gone")

                assistant.store.clear = crash
            return await assistant.conversation.new_session()
        finally:
            await assistant.aclose()

    try:
        asyncio.run(new(fail_clear=True))
    except OSError:
        pass
    history = MemoryStore(cfg.workspace_path()).history_file.read_text()
    assert "talked through turns 100-104" in history  # archived although the clear never happened
    kept = SessionStore().load("cli:direct")
    assert len(kept.messages) == 6 and kept.last_consolidated == 6  # nothing lost, nothing resent

    report = asyncio.run(new(fail_clear=False))
    assert not report.ran  # already archived: no second summary
    assert SessionStore().load("cli:direct").messages == []


def test_compact_keeps_the_last_exchange(configure, fake_llm):
    from nanobot.config import load_config

    configure()
    fake_llm.responder = Brain()
    cfg = load_config(None)
    _prefill(cfg, 4)

    async def go(assistant):
        report = await assistant.conversation.compact()
        return report, assistant.conversation.session.get_history()

    report, history = talk(cfg, go)
    assert report.messages == 6 and "[2026-01-04 09:30]" in report.receipt()
    assert [m["role"] for m in history] == ["user", "assistant"] and "turn 106" in history[0][
        "content"
    ]


def test_provider_prompt_counts_calibrate_the_estimate_and_status_shows_it(configure, fake_llm):
    from nanobot.cli.status_view import status_lines
    from nanobot.config import load_config

    # calibration matters near the budget, where requests are counted exactly (far below it a
    # byte bound proves they fit without loading the tokenizer); at 8k the first request is near it
    configure(contextWindowTokens=8192)
    fake_llm.script(Reply.text("hello", usage={"prompt_tokens": 9000, "completion_tokens": 3}))
    cfg = load_config(None)

    async def go(assistant):
        plain = assistant.conversation.estimate()
        await assistant.conversation.send("hi there")
        return assistant, plain, status_lines(assistant)

    assistant, plain, lines = talk(cfg, go)
    cal = assistant.conversation.budget.calibration
    assert cal.ratio > 1.5  # the provider counted far more than our estimate
    shown = "\n".join(lines)
    assert f"~{assistant.conversation.estimate():,} / 6,144 tokens" in shown
    assert "estimator  cl100k_base, exact (offline ranks), corrected x" in shown


def test_one_shot_waits_for_its_background_consolidation(configure, fake_llm, nanobot_run):
    import dataclasses

    from nanobot.config import load_config
    from nanobot.memory.store import MemoryStore
    from nanobot.session.store import SessionStore

    configure(contextWindowTokens=WINDOW)
    brain = Brain()
    cfg = load_config(None)
    stored = _prefill(cfg, 200, until_below=WINDOW - 2048)
    long_answer = "Here is a long answer. " + _words(7, 400)
    fake_llm.responder = lambda req: (
        dataclasses.replace(brain(req), delay=0.3)
        if req.tools and any(t["function"]["name"] == "save_memory" for t in req.tools)
        else Reply.text(long_answer)
    )
    run = nanobot_run("agent", "-m", "hi")
    assert run.returncode == 0, run.stderr
    assert long_answer in run.stdout and "compacting" in run.stdout + run.stderr
    assert "talked through turns" in MemoryStore(cfg.workspace_path()).history_file.read_text()
    session = SessionStore().load("cli:direct")
    assert len(session.messages) == stored + 2 and session.last_consolidated > 0


def test_start_up_refuses_a_window_too_small_for_the_fixed_prompt(configure, nanobot_run):
    configure(contextWindowTokens=3000)
    run = nanobot_run("agent", "-m", "hi")
    assert run.returncode == 2
    assert "more than the window of 3,000" in run.stderr and "contextWindowTokens" in run.stderr
