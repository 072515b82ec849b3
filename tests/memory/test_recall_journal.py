"""The recall journal: a search catches up only the session files written since it last looked, and
falls back to a full scan of the folder whenever the journal cannot vouch for the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nanobot.memory import recall_journal
from nanobot.memory.recall_index import RecallIndex, default_index_path
from nanobot.memory.recall_journal import JOURNAL_NAME
from nanobot.paths import sessions_dir
from nanobot.session.store import SessionStore


def write(key: str, text: str) -> Path:
    store = SessionStore()
    session = store.open(key)
    try:
        store.append(session, [{"role": "user", "content": text}])
    finally:
        store.close(session)
    return session.path


def by_hand(path: Path, text: str) -> None:
    """An append that does not write the journal (an editor, an older nanobot)."""
    with open(path, "a") as fh:
        fh.write(json.dumps({"role": "user", "content": text}) + "\n")


def settle() -> None:
    """The folder as it is after a while: its mtime no longer in the clock tick of its last change
    (this changes the mtime too: the next search scans the folder once more)."""
    past = time.time() - 3600
    os.utime(sessions_dir(), (past, past))


def index() -> RecallIndex:
    return RecallIndex(default_index_path(), sessions=sessions_dir(), history=None)


def found(idx: RecallIndex, query: str) -> list[str]:
    return sorted(h.unit.text for h in idx.search(query, limit=20))


@pytest.fixture
def ready() -> RecallIndex:
    """Three sessions, indexed by a full scan, the folder settled and the journal's end noted."""
    for i in range(3):
        write(f"cli:s{i}", f"session {i} talks about the garden")
    settle()
    idx = index()
    assert idx.refresh().full_scan
    return idx


def test_a_message_appended_in_another_process_is_found_without_a_full_scan(ready):
    code = (
        "from nanobot.session.store import SessionStore\n"
        "s = SessionStore(); x = s.open('cli:s1')\n"
        "s.append(x, [{'role': 'user', 'content': 'the walrus ate the tomatoes'}]); s.close(x)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ.copy())
    report = ready.refresh()
    assert not report.full_scan and report.complete and 0 < report.bytes_done < 300
    assert found(ready, "walrus") == ["the walrus ate the tomatoes"]
    again = ready.refresh()  # nothing new: nothing read, still no scan
    assert again.bytes_done == 0 and not again.full_scan


def test_an_edit_by_hand_in_place_is_picked_up_by_the_next_full_scan(ready, monkeypatch):
    by_hand(SessionStore().path_for("cli:s2"), "a heron by the pond")
    assert not ready.refresh().full_scan  # the journal cannot see it, the folder did not change
    assert found(ready, "heron") == []
    monkeypatch.setattr(recall_journal, "FULL_SCAN_SECONDS", -1)  # the bound has passed
    assert ready.refresh().full_scan
    assert found(ready, "heron") == ["a heron by the pond"]


def test_files_created_replaced_or_deleted_are_picked_up_at_once(ready):
    write("cli:new", "a brand new badger")
    report = ready.refresh()
    assert report.full_scan and found(ready, "badger") == ["a brand new badger"]
    settle()
    ready.refresh()
    path = SessionStore().path_for("cli:s0")
    replacement = path.with_name("editor-save.tmp")
    replacement.write_text(
        path.read_text().replace("session 0 talks about the garden", "session 0 saw an otter")
    )
    os.replace(replacement, path)  # an editor's save: a new file under the old name
    assert ready.refresh().full_scan
    assert found(ready, "otter") == ["session 0 saw an otter"]
    assert found(ready, "garden") == [
        "session 1 talks about the garden",
        "session 2 talks about the garden",
    ]
    settle()
    ready.refresh()
    SessionStore().path_for("cli:s1").unlink()
    ready.refresh()
    assert found(ready, "garden") == ["session 2 talks about the garden"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda j: j.unlink(),
        lambda j: j.write_bytes(b"\x00\xffnot a name\n"),
        lambda j: j.write_bytes(b""),  # shorter than where the index read to
        lambda j: j.open("ab").write(b"../../etc/passwd\n"),
        lambda j: j.open("ab").write(b"\xff\xfe.jsonl\n"),
    ],
    ids=["deleted", "garbage", "truncated", "a path", "not utf-8"],
)
def test_a_missing_or_damaged_journal_means_a_full_scan_and_the_right_answer(ready, damage):
    write("cli:s1", "one more line to move the journal on")
    ready.refresh()
    by_hand(SessionStore().path_for("cli:s2"), "a heron by the pond")
    damage(sessions_dir() / JOURNAL_NAME)
    report = ready.refresh()
    assert report.full_scan and found(ready, "heron") == ["a heron by the pond"]


def test_a_journal_that_cannot_be_written_never_fails_a_turn_and_is_not_trusted(ready):
    journal = sessions_dir() / JOURNAL_NAME
    journal.unlink()
    journal.mkdir()  # no file can be opened there now
    write("cli:s1", "a kingfisher on the wire")  # the turn's append succeeds
    assert SessionStore().load("cli:s1").messages[-1]["content"] == "a kingfisher on the wire"
    assert found_after_refresh(ready, "kingfisher") == ["a kingfisher on the wire"]


def found_after_refresh(idx: RecallIndex, query: str) -> list[str]:
    idx.refresh()
    return found(idx, query)


def test_a_catch_up_cut_short_reads_the_same_news_again(ready):
    for i in range(3):
        write(f"cli:s{i}", f"news {i} about a lynx")
    cut = ready.refresh(budget_seconds=0)  # stopped before it read anything (as a kill would)
    assert not cut.complete and not cut.full_scan and cut.bytes_left > 0
    assert found(ready, "lynx") == []
    report = ready.refresh()
    assert report.complete and not report.full_scan
    assert found(ready, "lynx") == [f"news {i} about a lynx" for i in range(3)]


def test_the_journal_is_started_afresh_when_long(ready, monkeypatch):
    journal = sessions_dir() / JOURNAL_NAME
    monkeypatch.setattr(recall_journal, "ROTATE_BYTES", 10)
    write("cli:s1", "a long journal now")
    assert journal.stat().st_size > 10
    monkeypatch.setattr(recall_journal, "FULL_SCAN_SECONDS", -1)
    assert ready.refresh().full_scan
    assert journal.stat().st_size == 0
    monkeypatch.setattr(recall_journal, "FULL_SCAN_SECONDS", 300)
    settle()
    ready.refresh()
    write("cli:s2", "after the new journal, a stoat")
    report = ready.refresh()
    assert not report.full_scan and found(ready, "stoat") == ["after the new journal, a stoat"]
