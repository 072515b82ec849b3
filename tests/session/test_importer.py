"""A nanobot user's sessions and history come along: real nanobot homes, continued with valid requests."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from nanobot.app import open_assistant
from nanobot.config import load_config
from nanobot.fakellm import Reply
from nanobot.memory.store import MemoryStore
from nanobot.session.importer import import_all, read_receipts
from nanobot.session.store import SessionStore

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nanobot_homes"


def hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def nanobot_home(isolated_home: Path, fake_llm, monkeypatch):
    """Copy a real nanobot home in place of ours; the model side is the fake server."""

    def install(version: str) -> dict[str, str]:
        shutil.copytree(FIXTURES / version / ".nanobot", isolated_home)
        monkeypatch.setenv("NANOBOT_PROVIDERS__CUSTOM__API_BASE", fake_llm.openai_base_url)
        return {name: digest for name, digest in hashes(isolated_home).items()}

    return install


def continue_session(text: str, key: str = "cli:direct"):
    async def go():
        assistant = open_assistant(load_config(), key, stream=False)
        try:
            notes = assistant.startup_notes()  # what the chat shows before its first prompt
            outcome = await assistant.conversation.send(text)
            return notes, outcome, list(assistant.conversation.session.messages)
        finally:
            await assistant.aclose()

    return asyncio.run(go())


def test_a_nanobot_0_1_session_is_continued_and_the_original_is_untouched(
    nanobot_home, isolated_home, fake_llm
):
    before = nanobot_home("v0_1_4_post6")
    fake_llm.script(Reply.text("Teal, as you said."))
    notes, outcome, messages = continue_session("Remind me of my colour?")
    assert notes[0] == "continuing your nanobot session cli:direct (6 messages)"
    assert outcome.content == "Teal, as you said."
    sent = fake_llm.requests[0].messages
    texts = [m.get("content") for m in sent if m["role"] == "user"]
    assert texts[0] == "Please list my workspace. My favourite colour is teal."
    assert any(
        m["role"] == "tool" and m["tool_call_id"] == "call_1" for m in sent
    )  # the pair came along
    fake_llm.assert_all_valid()
    assert len(messages) == 8
    after = hashes(isolated_home)
    assert {k: after[k] for k in before} == before  # every nanobot file byte-identical
    (receipt,) = read_receipts()
    original = isolated_home / "workspace" / "sessions" / "cli_direct.jsonl"
    assert (
        receipt.source == str(original)
        and receipt.sha256 == before["workspace/sessions/cli_direct.jsonl"]
    )
    assert receipt.format == "nanobot-0.1" and receipt.messages == 6


def test_a_nanobot_0_3_session_and_its_history_are_imported_once(
    nanobot_home, isolated_home, fake_llm
):
    before = nanobot_home("v0_3_5")
    fake_llm.script(Reply.text("Miso is a fine name."), Reply.text("Still Miso."))
    notes, outcome, messages = continue_session("What is my cat called?")
    assert notes[0] == "continuing your nanobot session cli:direct (2 messages)"
    assert any("history: 1 entry from" in n for n in notes)
    sent = fake_llm.requests[0].messages
    assert [m["content"] for m in sent if m["role"] == "user"][0] == "My cat is called Miso."
    fake_llm.assert_all_valid()
    history = MemoryStore(isolated_home / "workspace").history_file.read_text()
    assert "The user asked for a workspace listing; nanobot listed it and said hello." in history
    # a second start imports nothing again and says nothing about nanobot
    notes2, _, messages2 = continue_session("And again?")
    assert notes2 == [] and len(messages2) == len(messages) + 2
    assert MemoryStore(isolated_home / "workspace").history_file.read_text() == history
    after = hashes(isolated_home)
    assert {k: after[k] for k in before} == before
    assert [r.kind for r in read_receipts()] == ["session", "history"]


def test_history_entries_nanobot_adds_later_are_imported_and_old_ones_are_not_repeated(
    nanobot_home, isolated_home
):
    nanobot_home("v0_3_5")
    workspace = isolated_home / "workspace"
    import_all(workspace)
    source = workspace / "memory" / "history.jsonl"
    with source.open("a") as fh:  # the user went back to nanobot for a while
        fh.write(
            json.dumps(
                {
                    "cursor": 2,
                    "timestamp": "2026-12-02 10:00",
                    "content": "Talked about Miso's vet.",
                }
            )
            + "\n"
        )
    result = import_all(workspace)
    assert [r.messages for r in result.imported] == [1]
    text = MemoryStore(workspace).history_file.read_text()
    assert text.count("said hello") == 1 and "[2026-12-02 10:00] Talked about Miso's vet." in text


def test_a_session_we_already_have_is_never_overwritten(nanobot_home, isolated_home):
    nanobot_home("v0_1_4_post6")
    store = SessionStore()
    session = store.open("cli:direct")
    store.append(session, [{"role": "user", "content": "our own turn"}])
    store.close(session)
    ours = session.path.read_bytes()
    result = import_all(isolated_home / "workspace")
    assert result.imported == [] and "exists here already" in result.kept[0]
    assert session.path.read_bytes() == ours
    assert import_all(isolated_home / "workspace").kept == []  # said once, not at every start


def test_a_damaged_nanobot_session_goes_through_the_same_validity_rules(
    isolated_home, fake_llm, monkeypatch
):
    shutil.copytree(FIXTURES / "v0_1_4_post6" / ".nanobot", isolated_home)
    monkeypatch.setenv("NANOBOT_PROVIDERS__CUSTOM__API_BASE", fake_llm.openai_base_url)
    original = isolated_home / "workspace" / "sessions" / "cli_direct.jsonl"
    lines = original.read_bytes().splitlines(keepends=True)
    # drop the tool result (a dangling call), add an orphan result and a torn last line
    orphan = json.dumps(
        {"role": "tool", "tool_call_id": "call_zz", "name": "list_dir", "content": "x"}
    ).encode()
    damaged = b"".join(lines[:3] + lines[4:]) + orphan + b"\n" + b'{"role": "user", "cont'
    original.write_bytes(damaged)
    fake_llm.script(Reply.text("All good."))
    notes, outcome, _ = continue_session("Still there?")
    assert outcome.content == "All good."
    fake_llm.assert_all_valid()  # the interrupted call got a result, the orphan was left out
    sent = fake_llm.requests[0].messages
    assert not any(m.get("tool_call_id") == "call_zz" for m in sent)
    assert original.read_bytes() == damaged


def test_session_import_command_and_the_chat_line(
    nanobot_home, isolated_home, fake_llm, nanobot_run
):
    nanobot_home("v0_1_4_post6")
    listed = nanobot_run("session", "list")
    assert listed.returncode == 0, listed.stderr
    assert "imported from nanobot: session cli:direct: 6 messages" in listed.stdout
    assert "No saved sessions yet" not in listed.stdout and "│ cli:direct │ 6 " in listed.stdout
    again = nanobot_run("session", "import")
    assert again.returncode == 0 and "Nothing new to import from nanobot" in again.stdout
    fake_llm.script(Reply.text("Hello again."))
    run = nanobot_run("agent", "-m", "hi again")
    assert run.returncode == 0, run.stderr
    assert "Hello again." in run.stdout
    # imported by `session import`; the first chat in it still says where it came from
    assert "continuing your nanobot session cli:direct (6 messages)" in run.stderr
    assert len(SessionStore().load("cli:direct").messages) == 8


def test_the_one_shot_chat_says_it_continues_the_nanobot_session(
    nanobot_home, fake_llm, nanobot_run
):
    nanobot_home("v0_3_5")
    fake_llm.script(Reply.text("Yes, Miso."))
    run = nanobot_run("agent", "-m", "my cat?")
    assert run.returncode == 0, run.stderr
    assert "continuing your nanobot session cli:direct (2 messages)" in run.stderr


def test_an_older_0_1_session_beside_our_own_files_is_imported_with_a_receipt(
    isolated_home, fake_llm, monkeypatch
):
    shutil.copytree(FIXTURES / "v0_1_4_post6" / ".nanobot", isolated_home)
    monkeypatch.setenv("NANOBOT_PROVIDERS__CUSTOM__API_BASE", fake_llm.openai_base_url)
    legacy = isolated_home / "sessions" / "cli_direct.jsonl"
    legacy.parent.mkdir()
    (isolated_home / "workspace" / "sessions" / "cli_direct.jsonl").rename(
        legacy
    )  # where 0.1.0-0.1.3 kept it
    original = legacy.read_bytes()
    fake_llm.script(Reply.text("Still teal."))
    notes, outcome, messages = continue_session("colour?")
    assert notes[0] == "continuing your nanobot session cli:direct (6 messages)"
    assert len(messages) == 8 and legacy.read_bytes() == original
    assert [r.source for r in read_receipts()] == [str(legacy)]
    assert [info.key for info in SessionStore().infos()] == ["cli:direct"]  # listed once, not twice
