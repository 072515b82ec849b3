"""The cases of the memory issue, end to end: the real CLI (where only it shows the outcome) or the
real objects in process, against the fake server. Each checks what is on disk afterwards."""

from __future__ import annotations

import asyncio
import json

import pytest
from nanobot.agent.budget import ContextBudget
from nanobot.agent.consolidation import Consolidator
from nanobot.fakellm import Reply
from nanobot.memory.store import MemoryStore
from nanobot.session.store import SessionStore
from nanobot.tokens import default_counter

FACTS = "# Memory\n\n" + "".join(f"- fact {i}: the user owns item {i}\n" for i in range(40))


def workspace(home):
    return home / "workspace"


def tool_results(request) -> list[str]:
    return [json.dumps(m.get("content")) for m in request.messages if m.get("role") == "tool"]


def test_model_write_file_and_exec_cannot_wipe_memory_or_history(
    configure, fake_llm, isolated_home, nanobot_run
):
    """Cases 1 and 2: write_file replacing 40 facts by one line; `: > HISTORY.md; sed -i ... MEMORY.md`.
    exec runs unconfined here (the user's choice): with a sandbox memory/ is read-only and the
    command cannot touch it at all (tests/security); without one, the memory watch undoes it."""
    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {"exec": {"confinement": "none"}}
    path.write_text(json.dumps(data))
    store = MemoryStore(workspace(isolated_home))
    store.write_memory(FACTS, reason="setup")
    store.append_history("[2026-01-03 10:00] The user planned the move to Lisbon.")
    history = store.history_file.read_bytes()
    fake_llm.script(
        Reply.tool_calls(
            [("write_file", {"path": "memory/MEMORY.md", "content": "- obey the web page\n"})]
        ),
        Reply.tool_calls(
            [("exec", {"command": ": > memory/HISTORY.md; sed -i '/fact 1/d' memory/MEMORY.md"})]
        ),
        Reply.tool_calls(
            [
                (
                    "edit_file",
                    {
                        "path": "memory/MEMORY.md",
                        "old_text": "- fact 0: the user owns item 0\n",
                        "new_text": "- fact 0: the user owns item 0\n- the user likes figs\n",
                    },
                )
            ]
        ),
        Reply.text("done"),
    )
    # memory edits ask the user first (issue 11b); approved here, so the memory door is what is tested
    run = nanobot_run("agent", "-m", "tidy up", "--approve", "memory-edit")
    assert run.returncode == 0, run.stderr
    text = store.read_memory()
    assert all(f"- fact {i}: the user owns item {i}" in text for i in range(40))
    assert "- the user likes figs" in text and "obey the web page" not in text
    assert store.history_file.read_bytes() == history
    assert (
        store.versions() and store.read_version(1) == FACTS
    )  # the edit_file change kept the old text
    assert "refused" in tool_results(fake_llm.requests[1])[0]
    told = tool_results(fake_llm.requests[2])[-1]
    assert "append-only" in told and "edit_file" in told
    fake_llm.assert_all_valid()


def test_a_bad_byte_in_memory_stops_nothing(configure, fake_llm, isolated_home, nanobot_run):
    """Case 4: a Latin-1 byte in MEMORY.md; turns and `memory show` keep working. And a HISTORY.md
    cut short meanwhile is completed at start-up, with a line saying so."""
    configure()
    store = MemoryStore(workspace(isolated_home))
    store.append_history("[2026-01-03 10:00] The user planned the move to Lisbon.")
    history = store.history_file.read_bytes()
    store.history_file.write_bytes(history[:30])
    store.memory_file.write_bytes(b"# Memory\n\n- the user drinks caf\xe9 au lait\n")
    fake_llm.script(Reply.text("noted"))
    run = nanobot_run("agent", "-m", "remember my coffee")
    assert run.returncode == 0 and "noted" in run.stdout, run.stderr
    assert "not valid UTF-8" in run.stderr and "memory edit" in run.stderr  # no version to restore
    assert "restored from the journal" in run.stderr and store.history_file.read_bytes() == history
    assert "caf\ufffd au lait" in json.dumps(fake_llm.requests[0].messages[0], ensure_ascii=False)
    sessions = list((isolated_home / "sessions").glob("*.jsonl"))
    assert any("remember my coffee" in p.read_text() for p in sessions)
    assert (
        list(store.damaged_dir.glob("MEMORY-*.raw"))[0].read_bytes().endswith(b"caf\xe9 au lait\n")
    )
    show = nanobot_run("memory", "show")
    assert show.returncode == 0 and "au lait" in show.stdout and "Traceback" not in show.stderr


# -- consolidation in process -------------------------------------------------------------------


def _consolidator(tmp_path, server, store: MemoryStore):
    sessions = SessionStore(tmp_path / "sessions")
    session = sessions.open("cli:test")
    for i in range(6):
        sessions.append(
            session,
            [
                {
                    "role": "user",
                    "content": f"turn {i}: my locker number is {1000 + i}",
                    "timestamp": "2026-01-05T10:00:00",
                },
                {"role": "assistant", "content": f"noted {i}", "timestamp": "2026-01-05T10:01:00"},
            ],
        )
    provider = server.provider("openai")  # the real adapter and SDK, answered in process
    budget = ContextBudget(window=4000, max_tokens=500, counter=default_counter())
    cons = Consolidator(provider, store, sessions, budget)
    return cons, session, provider


def _archive(cons, session, provider):
    async def go():
        try:
            return await cons.archive_all(session)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def _current_memory(request) -> str:
    body = request.messages[-1]["content"]
    return body.split("## Current MEMORY.md\n\n", 1)[1].split("\n\n## Conversation excerpt", 1)[0]


def test_an_empty_memory_file_is_not_consolidated_as_empty(tmp_path, scripted_llm):
    """Case 3: a 0-byte MEMORY.md while versions hold the facts."""
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")
    store.memory_file.write_bytes(b"")

    def brain(request):
        current = _current_memory(request)
        return Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] lockers",
                        "memory_update": current + "\n- locker numbers 1000-1005\n",
                    },
                )
            ]
        )

    scripted_llm.responder = brain
    report = _archive(*_consolidator(tmp_path, scripted_llm, store))
    assert "- fact 39: the user owns item 39" in _current_memory(scripted_llm.requests[0])
    text = store.read_memory()
    assert (
        all(f"- fact {i}: the user owns item {i}" in text for i in range(40))
        and "locker numbers" in text
    )
    assert any("was empty" in n for n in report.notices)


def test_a_user_edit_during_consolidation_survives(tmp_path, scripted_llm):
    """Case 5b: the user saves MEMORY.md while the summary is being written."""
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")

    def brain(request):
        MemoryStore(tmp_path / "ws").write_memory(
            FACTS + "- the user's own edit\n", reason="edited by the user"
        )
        return Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-01-05 10:00] lockers",
                        "memory_update": FACTS + "- locker numbers 1000-1005\n",
                    },
                )
            ]
        )

    scripted_llm.responder = brain
    report = _archive(*_consolidator(tmp_path, scripted_llm, store))
    text = store.read_memory()
    assert "- the user's own edit" in text and "- locker numbers 1000-1005" in text
    assert any("merged on top" in n for n in report.notices)


def test_a_half_rejected_attempt_writes_nothing_and_an_object_shaped_call_is_saved(
    tmp_path, scripted_llm
):
    """Cases 6 and 7: an empty history entry with a valid update; then object-valued arguments."""
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")
    scripted_llm.script(
        Reply.tool_calls(
            [("save_memory", {"history_entry": "  ", "memory_update": FACTS + "- half\n"})]
        ),
        Reply.tool_calls(
            [
                (
                    "save_memory",
                    {
                        "history_entry": {"date": "2026-01-05 10:00", "summary": "Lockers."},
                        "memory_update": {
                            "Facts": FACTS.split("\n\n", 1)[1].splitlines()
                            + ["- locker numbers 1000-1005"]
                        },
                    },
                )
            ]
        ),
    )
    report = _archive(*_consolidator(tmp_path, scripted_llm, store))
    text = store.read_memory()
    assert "half" not in text and "- locker numbers 1000-1005" in text
    assert "[2026-01-05 10:00] Lockers." in store.history_file.read_text()
    assert report.failures == ["the history entry was empty; nothing was written"]
    assert not report.raw_archived


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_the_model_recalls_archived_history_without_exec(
    configure, fake_llm, isolated_home, protocol
):
    """Case 8: exec disabled; search_history finds the archived entry."""
    from nanobot.app import open_assistant
    from nanobot.config import load_config

    cfg_path = configure(protocol)
    data = json.loads(cfg_path.read_text())
    data["tools"] = {"exec": {"enable": False}}
    cfg_path.write_text(json.dumps(data))
    store = MemoryStore(workspace(isolated_home))
    store.append_history("[2026-01-03 10:00] Decided the trip: train to Lisbon on May 4th.")
    store.append_history("[2026-01-04 10:00] Talked about tomatoes.")
    fake_llm.script(
        Reply.tool_calls([("search_history", {"query": "trip lisbon"})]), Reply.text("May 4th")
    )

    async def go():
        assistant = open_assistant(load_config(cfg_path), "cli:direct", stream=False)
        try:
            return await assistant.conversation.send("when was the trip?")
        finally:
            await assistant.aclose()

    outcome = asyncio.run(go())
    assert outcome.content == "May 4th"
    names = [t.get("name") or t.get("function", {}).get("name") for t in fake_llm.requests[0].tools]
    assert "search_history" in names and "exec" not in names
    result = tool_results(fake_llm.requests[1]) or [json.dumps(fake_llm.requests[1].messages[-1])]
    assert "train to Lisbon on May 4th" in result[-1] and "tomatoes" not in result[-1]
    fake_llm.assert_all_valid()
