"""`nanobot session list|show|repair`, driven through typer's runner with a throwaway home."""

from __future__ import annotations

import json
import re

import pytest
from nanobot.cli.session_cmd import SHOWN_ARCHIVES, session_app
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.store import SessionStore
from typer.testing import CliRunner

runner = CliRunner()


@pytest.fixture
def store() -> SessionStore:
    return SessionStore()  # sessions_dir() under the test's NANOBOT_HOME


def make(store: SessionStore, key: str, messages: list[dict], pointer: int = 0) -> None:
    session = store.open(key)
    store.append(session, messages)
    if pointer:
        store.set_pointer(session, pointer)
    store.close(session)


def test_list_shows_each_session(store):
    make(store, "cli:direct", [user("hi"), assistant("hello")], pointer=2)
    make(store, "telegram:7", [user("yo")])
    result = runner.invoke(session_app, ["list"])
    assert result.exit_code == 0, result.output
    assert "cli:direct" in result.output and "telegram:7" in result.output
    row = next(line for line in result.output.splitlines() if "cli:direct" in line)
    assert " 2 " in row


def test_list_with_no_sessions():
    result = runner.invoke(session_app, ["list"])
    assert result.exit_code == 0 and "No saved sessions" in result.output


def test_show_prints_roles_tool_calls_and_shortened_results(store):
    make(
        store,
        "cli:direct",
        [
            user("list files"),
            assistant(None, [tool_call("c1", "list_dir", {"path": "."})]),
            tool_result("c1", "list_dir", "f" * 5000),
            assistant("Many files."),
        ],
    )
    result = runner.invoke(session_app, ["show", "cli:direct"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "user" in out and "list files" in out and "list_dir" in out and "Many files." in out
    assert "f" * 5000 not in out and "4600 more characters" in out


def test_show_json_prints_the_stored_messages(store):
    make(store, "k", [user("q"), assistant("a")])
    result = runner.invoke(session_app, ["show", "k", "--json"])
    assert result.exit_code == 0
    shown = json.loads(result.stdout)
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [
        ("user", "q"),
        ("assistant", "a"),
    ]
    assert shown["working_state"] == {"current": None, "versions": [], "last_compaction": None}


def test_show_unknown_key_exits_2_and_lists_known_keys(store):
    make(store, "cli:direct", [user("q")])
    result = runner.invoke(session_app, ["show", "nope"])
    assert result.exit_code == 2
    assert "nope" in result.output and "cli:direct" in result.output


def test_repair_reports_fixes_and_backup(store):
    make(store, "k", [user("q"), assistant("a"), assistant("b")])
    path = store.path_for("k")
    path.write_bytes(path.read_bytes() + b"{torn")
    result = runner.invoke(session_app, ["repair", "k"])
    assert result.exit_code == 0, result.output
    assert "1 damaged lines moved to" in result.output
    assert "1 consecutive assistant messages merged" in result.output
    backups = list(path.parent.glob(path.name + ".bak-*"))
    assert len(backups) == 1 and str(backups[0]) in result.output.replace("\n", "")
    again = runner.invoke(session_app, ["repair", "k"])
    assert again.exit_code == 0 and "needs no repair" in again.output


def test_repair_unknown_key_exits_2():
    result = runner.invoke(session_app, ["repair", "ghost"])
    assert result.exit_code == 2 and "no saved sessions" in result.output


def test_repair_of_session_in_use_exits_2(store):
    session = store.open("k")
    store.append(session, [user("q")])
    result = runner.invoke(session_app, ["repair", "k"])
    assert result.exit_code == 2 and "in use" in result.output
    store.close(session)


def test_list_show_and_repair_take_a_bad_pointer_back_to_what_history_md_proves(
    store, isolated_home
):
    msgs = []
    for i in range(3):
        msgs += [
            {"role": "user", "content": f"q{i}", "timestamp": f"2026-01-05T10:0{i}:00"},
            {"role": "assistant", "content": f"a{i}", "timestamp": f"2026-01-05T10:0{i}:30"},
        ]
    meta = {"_type": "metadata", "key": "k", "created_at": "2026-01-05T10:00:00"}
    lines = [
        dict(meta, last_consolidated=0),
        *msgs[:2],
        dict(meta, last_consolidated=2),
        *msgs[2:],
        dict(meta, last_consolidated="four"),
    ]
    store.directory.mkdir(parents=True, exist_ok=True)
    store.path_for("k").write_text("".join(json.dumps(x) + "\n" for x in lines))
    history = isolated_home / "workspace" / "memory" / "HISTORY.md"
    history.parent.mkdir(parents=True)
    history.write_text(
        "[2026-01-05 10:00] The user asked q0; answered a0.\n"
    )  # the first chunk was archived

    listing = runner.invoke(session_app, ["list"])
    assert " 2 " in next(
        line for line in listing.output.splitlines() if " 6 " in line
    )  # 6 messages, 2 archived
    shown = runner.invoke(session_app, ["show", "k"])
    assert "6 messages, 2 consolidated" in shown.output
    repaired = runner.invoke(session_app, ["repair", "k"])
    assert repaired.exit_code == 0, repaired.output
    again = SessionStore().load("k")  # a store with no HISTORY.md at hand reads what repair wrote
    assert (
        again.last_consolidated == 2 and again.warnings == []
    )  # not 0: HISTORY.md proved the first chunk
    assert len(again.messages) == 6


def test_show_says_which_tool_call_has_no_result(store):
    # Ctrl-C mid-tool: the call is saved, its result never was
    make(
        store,
        "cli:direct",
        [
            user("wait a bit"),
            assistant(None, [tool_call("c1", "exec", {"command": "sleep 20"})]),
            user("what happened?"),
            assistant("It was stopped."),
        ],
    )
    result = runner.invoke(session_app, ["show", "cli:direct"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "sleep 20" in out and "no result recorded: stopped before it finished" in out
    make(
        store,
        "cli:whole",
        [user("go"), assistant(None, [tool_call("c2", "exec", {"command": "ls"})])]
        + [tool_result("c2", "exec", "a.txt"), assistant("One file.")],
    )
    whole = runner.invoke(session_app, ["show", "cli:whole"])
    assert "no result recorded" not in whole.output


def test_show_counts_a_one_item_checkpoint_as_one_item(store):
    make(store, "cli:direct", [user("the ticket is BILL-4821"), assistant("Noted.")])
    log = store.working_state_for("cli:direct")
    log.add_version("Goal: none\nIdentifiers:\n- BILL-4821", archived=2)
    log.add_version("Goal: ship BILL-4821\nIdentifiers:\n- BILL-4821", archived=2)
    out = runner.invoke(session_app, ["show", "cli:direct"]).output
    assert "(version 2, 2 items," in out and "· 1 item ·" in out and "1 items" not in out


def test_list_shows_the_newest_archived_conversations_apart_and_show_reads_one(store):
    session = store.open("cli:direct")
    kept = []
    for i in range(SHOWN_ARCHIVES + 2):  # seven /news (several in one second: -2, -3, ...)
        store.append(session, [user(f"conversation {i}"), assistant(f"answer {i}")])
        kept.append(store.clear(session))
    store.append(session, [user("the live one")])
    store.close(session)
    listed = runner.invoke(session_app, ["list"])
    assert listed.exit_code == 0, listed.output
    live, _, archived = listed.output.partition("archived by /new (7;")
    assert "cli:direct" in live and "@" not in live  # the live list is not cluttered
    names = re.findall(r"cli:direct@[0-9TZ-]+", archived)
    assert names == kept[::-1][:SHOWN_ARCHIVES]  # newest first
    assert "2 older archived conversation(s) not shown" in archived
    everything = runner.invoke(session_app, ["list", "--archived"]).output
    assert re.findall(r"cli:direct@[0-9TZ-]+", everything) == kept[::-1]
    assert "not shown" not in everything
    shown = runner.invoke(session_app, ["show", kept[0], "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    assert data["archived"] is True and [m["content"] for m in data["messages"]] == [
        "conversation 0",
        "answer 0",
    ]
    live_show = json.loads(runner.invoke(session_app, ["show", "cli:direct", "--json"]).output)
    assert live_show["archived"] is False and len(live_show["messages"]) == 1
