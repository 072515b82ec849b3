"""The working state survives compaction: a long task through the real `nanobot` command.

A goal, three identifiers, a decision and a next step are planted in the first turns of a session;
then long answers push it through several consolidations. The fake server answers each
consolidation request as a model would (nanobot/fakellm/summariser.py): it fills
`session_checkpoint` from the excerpt and the previous checkpoint the request carries. The last
request must still carry every planted item, inside the one working-state block, while the
planted turns themselves have left the prompt.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import is_consolidation
from nanobot.session.store import SessionStore
from nanobot.session.working_state import SOURCE, WorkingStateLog

from budget_helpers import make_strict, over_window

PLANTED_TURNS = [
    "Goal: migrate the billing service to Postgres 16. The ticket is BILL-4821",
    "We work on the branch feat/pg16-migration and the config lives in /srv/billing/config.yaml",
    "Decision: keep the old replica until Friday",
    "Next step: run the schema diff against staging",
]
PLANTED_ITEMS = [
    "migrate the billing service to Postgres 16",
    "BILL-4821",
    "feat/pg16-migration",
    "/srv/billing/config.yaml",
    "keep the old replica until Friday",
    "run the schema diff against staging",
]
TURNS = 16
_VOCAB = [
    a + b
    for a in ("ka", "lo", "mi", "ne", "pu", "ro", "sa", "ti", "vu", "ze")
    for b in ("ber", "dan", "fol", "gim", "hup", "jas", "kor", "lum", "mep", "nix")
]
_BLOCK = re.compile(
    r'<untrusted-data source="' + re.escape(SOURCE) + r'">\n(.*?)\n</untrusted-data>', re.S
)


def filler(seed: int, tokens: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_VOCAB) for _ in range(tokens // 2)) + "."


def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or [] if isinstance(p, dict)]


def wire_text(req) -> str:
    """Every text of a request as the model reads it (system prompt and messages), one after another."""
    parts = _texts(req.system) if req.system else []
    for msg in req.messages:
        parts += _texts(msg.get("content"))
    return "\n".join(parts)


def run_long_task(
    nanobot_run, fake_llm, configure, *, protocol: str, window: int, turns: int = TURNS
) -> list[str]:
    configure(protocol, contextWindowTokens=window)
    make_strict(fake_llm, window)
    fake_llm.summarise = True
    answer_tokens = window // 6
    fake_llm.responder = lambda req: Reply.text(
        f"Working on it. {filler(len(req.messages), answer_tokens)}"
    )
    stderr = []
    for turn in range(turns):
        text = PLANTED_TURNS[turn] if turn < len(PLANTED_TURNS) else f"turn {turn}: carry on please"
        result = nanobot_run("agent", "-m", text)
        assert result.returncode == 0, result.stderr
        stderr.append(result.stderr)
    return stderr


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("window", [8192, 32768])
def test_planted_items_reach_the_last_request_after_compactions(
    nanobot_run, fake_llm, configure, isolated_home, protocol, window
):
    stderr = run_long_task(nanobot_run, fake_llm, configure, protocol=protocol, window=window)
    fake_llm.assert_all_valid()  # includes prompt + max_tokens over the window
    assert over_window(fake_llm, window) == []
    consolidations = [r for r in fake_llm.requests if is_consolidation(r)]
    turns = [r for r in fake_llm.requests if not is_consolidation(r)]
    assert len(consolidations) >= 2
    session_path = SessionStore().path_for("cli:direct")
    state = WorkingStateLog(session_path).read()
    assert len(state.versions) >= 2, "every consolidation wrote a version"

    last = wire_text(turns[-1])
    blocks = _BLOCK.findall(last)
    assert len(blocks) == 1, "one working-state block in the request"
    for item in PLANTED_ITEMS:
        assert item in blocks[0], f"{item!r} was lost from the working state"
    # the planted turns have left the prompt: only the block carries them now
    outside = _BLOCK.sub("", last)
    assert not any(item in outside for item in PLANTED_ITEMS)
    # the later consolidations got the previous checkpoint to merge
    assert (
        "BILL-4821"
        in "".join(_texts(consolidations[-1].messages[-1]["content"])).split("## Current MEMORY")[0]
    )
    # between two consolidations the system prompt stays byte-identical (the block is not in it)
    system = None
    for req in fake_llm.requests:
        if is_consolidation(req):
            system = None
            continue
        now = json.dumps(req.system) if protocol == "anthropic" else req.messages[0]["content"]
        assert system is None or now == system, (
            "the system prompt changed between two consolidations"
        )
        assert SOURCE not in now
        system = now
    # each compaction said when it started and what it kept
    said = "\n".join(stderr)
    assert "compacting" in said and re.search(
        r"compaction done: kept 6 items of working state; \d+ messages? "
        r"archived",
        said,
    ), said[-2000:]


def test_session_show_prints_every_version_and_json_carries_them(
    nanobot_run, fake_llm, configure, isolated_home
):
    run_long_task(nanobot_run, fake_llm, configure, protocol="openai", window=8192, turns=7)
    versions = WorkingStateLog(SessionStore().path_for("cli:direct")).read().versions
    assert len(versions) >= 2
    shown = nanobot_run("session", "show", "cli:direct")
    assert shown.returncode == 0, shown.stderr
    assert "working state" in shown.stdout and "BILL-4821" in shown.stdout
    assert f"version {versions[-1].number}" in shown.stdout
    as_json = json.loads(nanobot_run("session", "show", "cli:direct", "--json").stdout)
    assert [v["version"] for v in as_json["working_state"]["versions"]] == [
        v.number for v in versions
    ]
    assert as_json["working_state"]["current"]["text"] == versions[-1].text
    assert as_json["messages"][0]["content"] == PLANTED_TURNS[0]


# -- consolidation in process: the previous checkpoint in, the new one out ------------------------


def _consolidator(tmp_path, llm, window: int = 4096):
    from nanobot.agent.budget import ContextBudget
    from nanobot.agent.consolidation import Consolidator
    from nanobot.memory.store import MemoryStore
    from nanobot.tokens import default_counter

    store = SessionStore(tmp_path / "sessions")
    session = store.open("cli:test")
    budget = ContextBudget(window=window, max_tokens=512, counter=default_counter())
    cons = Consolidator(llm.provider("openai"), MemoryStore(tmp_path / "ws"), store, budget)
    for i, text in enumerate([*PLANTED_TURNS, "turn 4: carry on", "turn 5: and on"]):
        store.append(
            session,
            [
                {"role": "user", "content": text, "timestamp": f"2026-01-05T10:0{i}:00"},
                {
                    "role": "assistant",
                    "content": f"ok {i}. {filler(i, 200)}",
                    "timestamp": f"2026-01-05T10:0{i}:30",
                },
            ],
        )
    return store, session, cons


def _run(coro):
    import asyncio

    return asyncio.run(coro)


def test_the_previous_checkpoint_is_in_the_request_and_the_reply_replaces_it(
    tmp_path, scripted_llm
):
    store, session, cons = _consolidator(tmp_path, scripted_llm)
    scripted_llm.summarise = True
    report = _run(cons.compact(session))
    first = WorkingStateLog(session.path).read()
    assert (
        report.checkpoint_version == 1 and first.text == session.working_state == report.checkpoint
    )
    assert "BILL-4821" in first.text and first.current.items == 6
    store.append(
        session,
        [
            {"role": "user", "content": "Next step: open the pull request for BILL-4821"},
            {"role": "assistant", "content": "will do"},
            {"role": "user", "content": "thanks"},
        ],
    )
    _run(cons.compact(session))
    asked = scripted_llm.requests[-1].messages[-1]["content"]
    assert asked.startswith(
        "## Previous session checkpoint\n\n" + first.text
    )  # merged, not forgotten
    versions = WorkingStateLog(session.path).read().versions
    assert [v.number for v in versions] == [1, 2]
    assert "Next step: open the pull request for BILL-4821" in versions[1].text
    assert "feat/pg16-migration" in versions[1].text  # still in play: kept
    scripted_llm.assert_all_valid()


def test_a_reply_without_a_checkpoint_keeps_the_previous_one_and_says_so(tmp_path, scripted_llm):
    from nanobot.agent.events import Notice

    store, session, cons = _consolidator(tmp_path, scripted_llm)
    log = WorkingStateLog(session.path)
    log.add_version("Goal: the previous goal", archived=2)
    session.working_state = "Goal: the previous goal"
    scripted_llm.script(
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {"history_entry": "[2026-01-05 10:00] Talked.", "memory_update": "# Memory\n"},
                )
            ]
        )
    )
    notices: list[Notice] = []
    report = _run(cons.compact(session, emit=notices.append))
    assert report.ran and session.working_state == "Goal: the previous goal"
    assert [v.text for v in log.read().versions] == ["Goal: the previous goal"]
    assert any(
        "no session_checkpoint" in n and "previous working state is kept" in n
        for n in report.notices
    )
    assert any("compaction done: kept 1 item of working state" in n.text for n in notices)


def test_the_version_is_on_disk_before_the_pointer_moves(tmp_path, scripted_llm):
    store, session, cons = _consolidator(tmp_path, scripted_llm)
    scripted_llm.summarise = True
    seen = []
    set_pointer = store.set_pointer

    def watched(session, pointer):
        seen.append(len(WorkingStateLog(session.path).read().versions))
        set_pointer(session, pointer)

    store.set_pointer = watched
    _run(cons.compact(session))
    assert seen == [1]


# -- what the user sees ----------------------------------------------------------------------------


def test_compact_prints_the_new_checkpoint(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.summarise = True
    fake_llm.responder = lambda req: Reply.text("sure")
    for text in [*PLANTED_TURNS, "thanks, go ahead"]:  # /compact keeps the last exchange
        assert nanobot_run("agent", "-m", text).returncode == 0
    result = nanobot_run("agent", "-m", "/compact")
    assert result.returncode == 0, result.stderr
    assert "working state (version 1; sent with every request)" in result.stdout
    assert (
        "- BILL-4821" in result.stdout
        and "Next step: run the schema diff against staging" in result.stdout
    )
    assert "compaction done: kept 6 items of working state; 8 messages archived" in result.stderr


def test_new_archives_the_working_state_with_the_messages(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.summarise = True
    fake_llm.responder = lambda req: Reply.text("sure")
    for text in PLANTED_TURNS[:2]:
        assert nanobot_run("agent", "-m", text).returncode == 0
    assert nanobot_run("agent", "-m", "/compact").returncode == 0
    assert nanobot_run("agent", "-m", "/new").returncode == 0
    assert nanobot_run("agent", "-m", "a fresh start").returncode == 0
    turns = [r for r in fake_llm.requests if not is_consolidation(r)]
    assert SOURCE not in wire_text(turns[-1])  # the new conversation starts without it
    store = SessionStore()
    assert store.working_state_for("cli:direct").read().versions == []  # it starts afresh
    (kept,) = store.archives()  # the old conversation's state went with it
    state = store.working_state_for(kept.key).read()
    assert state.current is None and state.versions and all(v.closed for v in state.versions)
    assert "BILL-4821" in state.versions[-1].text  # archived, still on disk
    shown = nanobot_run("session", "show", kept.key).stdout
    assert "archived by /new" in shown


def test_status_after_new_says_the_session_started_afresh_and_the_versions_are_archived(
    nanobot_run, fake_llm, configure
):
    configure()
    fake_llm.summarise = True
    fake_llm.responder = lambda req: Reply.text("sure")
    for text in PLANTED_TURNS[:2]:
        assert nanobot_run("agent", "-m", text).returncode == 0
    assert "no checkpoint yet" in " ".join(nanobot_run("status").stdout.split())
    assert nanobot_run("agent", "-m", "/compact").returncode == 0
    assert "version 1:" in " ".join(nanobot_run("status").stdout.split())
    assert nanobot_run("agent", "-m", "/new").returncode == 0
    status = nanobot_run("status")
    assert status.returncode == 0, status.stderr
    said = " ".join(status.stdout.split())  # the table wraps long rows
    assert "no checkpoint yet" in said and "version 1:" not in said  # the new conversation's
    (kept,) = SessionStore().archives()
    assert f"1 earlier conversation(s) of cli:direct kept by /new; newest {kept.key}" in said
    archived = SessionStore().working_state_for(kept.key).read().versions
    assert archived and all(v.closed for v in archived)  # /new's own compaction may add one
    # the archived conversation's own screen lists them
    shown = nanobot_run("session", "show", kept.key).stdout
    assert shown.count("archived by /new") == len(archived) + 1  # and the header line
    chat = " ".join(nanobot_run("agent", "-m", "/status").stdout.split())
    assert "no checkpoint yet" in chat and "1 earlier conversation(s) kept by /new" in chat


def test_a_failed_compaction_shows_in_status_and_doctor(nanobot_run, fake_llm, configure):
    configure(contextWindowTokens=8192)
    fake_llm.responder = lambda req: Reply.text(
        "I would rather not summarise"
    )  # never calls save_memory
    for text in PLANTED_TURNS[:2]:
        assert nanobot_run("agent", "-m", text).returncode == 0
    compact = nanobot_run("agent", "-m", "/compact")
    assert "memory consolidation failed" in compact.stderr
    status = nanobot_run("status")
    assert status.returncode == 0, status.stderr
    assert (
        "the last compaction failed" in status.stdout
        and "did not call save_memory" in status.stdout
    )
    doctor = nanobot_run("doctor", "--offline")
    assert (
        "compaction" in doctor.stdout
        and "cli:direct" in doctor.stdout
        and "did not call save_memory" in doctor.stdout
    )
    # once a compaction succeeds, both screens are quiet about it again
    fake_llm.summarise = True
    assert nanobot_run("agent", "-m", PLANTED_TURNS[2]).returncode == 0
    assert nanobot_run("agent", "-m", "/compact").returncode == 0
    assert "the last compaction failed" not in nanobot_run("status").stdout
    assert "did not call save_memory" not in nanobot_run("doctor", "--offline").stdout
    # a failure again, then /new: the conversation is archived, and its failed compaction with it
    fake_llm.summarise = False
    for text in PLANTED_TURNS[3:5]:
        assert nanobot_run("agent", "-m", text).returncode == 0
    assert "memory consolidation failed" in nanobot_run("agent", "-m", "/compact").stderr
    assert "did not call save_memory" in nanobot_run("status").stdout
    assert nanobot_run("agent", "-m", "/new").returncode == 0
    assert "the last compaction failed" not in nanobot_run("status").stdout
    assert "no session's last compaction failed" in nanobot_run("doctor", "--offline").stdout


def test_helpers_do_not_get_the_working_state_but_the_report_turn_does(
    nanobot_run, fake_llm, configure
):
    configure()
    WorkingStateLog(SessionStore().path_for("cli:direct")).add_version(
        "Goal: ship it\nIdentifiers:\n- REL-9", archived=2
    )

    def responder(request):
        text = wire_text(request)
        if "You are a subagent" in text:
            return Reply.text("the helper's report")
        if "subagent 'helper'" in json.dumps(request.messages[-1]):
            return Reply.text("Final: the helper reported back.")
        if any(m.get("role") == "tool" for m in request.messages):
            return Reply.text("Started a helper.")
        return Reply.tool_calls([("spawn", {"task": "count the files", "label": "helper"})])

    fake_llm.responder = responder
    result = nanobot_run("agent", "-m", "go")
    assert result.returncode == 0, result.stderr
    helper = [r for r in fake_llm.requests if "You are a subagent" in wire_text(r)]
    main = [r for r in fake_llm.requests if r not in helper]
    assert helper and main and len(main) >= 3
    assert all(
        SOURCE not in wire_text(r) for r in helper
    )  # the helper gets its task, not the state
    assert all(
        wire_text(r).count(SOURCE) == 1 for r in main
    )  # every main-lane request, report turn included
    fake_llm.assert_all_valid()


def test_a_huge_checkpoint_is_cut_and_a_key_in_it_is_masked(tmp_path, scripted_llm):
    store, session, cons = _consolidator(tmp_path, scripted_llm)
    key = "sk-proj-" + "a1B2c3D4e5" * 5
    huge = f"Goal: ship it\nIdentifiers:\n- {key}\n" + "".join(
        f"- item{i} {filler(i, 20)}\n" for i in range(2000)
    )
    scripted_llm.script(
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] Talked.",
                        "memory_update": "# Memory\n",
                        "session_checkpoint": huge,
                    },
                )
            ]
        )
    )
    report = _run(cons.compact(session))
    stored = WorkingStateLog(session.path).read().text
    assert key not in stored and "Goal: ship it" in stored
    assert cons.budget.counter.count_text(stored) <= cons.budget.budget // 8
    assert "characters of the checkpoint cut" in stored
    assert any("longer than" in n for n in report.notices)
