"""nanobot.memory.history.search: one entry point for searching what is archived; the request's kind
picks the engine (the recall index, ripgrep or the Python scan, the scan from the end)."""

from __future__ import annotations

from pathlib import Path

import pytest
from nanobot.memory import history as history_log
from nanobot.memory.history import AllWords, Exact, Ranked, search
from nanobot.memory.recall_index import RecallIndex
from nanobot.memory.store import MemoryStore
from nanobot.session.store import SessionStore


@pytest.fixture
def history(tmp_path: Path) -> Path:
    store = MemoryStore(tmp_path / "ws")
    for d in range(1, 8):
        store.append_history(f"[2026-02-{d:02d} 09:00] Day {d}: watered the tomatoes.")
    store.append_history("[2026-02-08 09:00] Booked the FLIGHT to Lisbon.\n  Seat 12A.")
    store.append_history("[2026-02-09 09:00] Moved the Lisbon flight to Friday.")
    return store.history_file


def _rendered(entries) -> bytes:
    return b"".join(e.text.encode() + b"\n\n" for e in entries)


@pytest.mark.parametrize("ripgrep", [True, False])
def test_exact_finds_whole_entries_in_file_order_with_either_engine(history, monkeypatch, ripgrep):
    if not ripgrep:
        monkeypatch.setattr(history_log, "_rg_binary", lambda: None)  # the Python scan
    found = search(Exact("lisbon", ignore_case=True), history=history)
    entries = list(found.entries())
    assert [e.text for e in entries] == [
        "[2026-02-08 09:00] Booked the FLIGHT to Lisbon.\n  Seat 12A.",
        "[2026-02-09 09:00] Moved the Lisbon flight to Friday.",
    ]
    assert [e.line_no for e in entries] == [15, 18]
    pieces = found.printed()
    if ripgrep and history_log._rg_binary() is not None:
        assert pieces is not None and b"".join(chunk for chunk, _ in pieces) == _rendered(entries)
    elif not ripgrep:
        assert pieces is None  # the caller prints the entries itself
    last = list(search(Exact("tomatoes", last=2), history=history).entries())
    assert [e.text[:17] for e in last] == ["[2026-02-06 09:00", "[2026-02-07 09:00"]


def test_all_words_finds_entries_holding_every_word_newest_first(history):
    found = search(AllWords(("lisbon", "flight")), history=history)
    assert [e.text[:17] for e in found] == ["[2026-02-09 09:00", "[2026-02-08 09:00"]
    assert search(AllWords(("lisbon", "tomatoes")), history=history) == []


def test_nothing_archived_yet_is_an_empty_answer_not_an_error(tmp_path):
    missing = tmp_path / "ws" / "memory" / "HISTORY.md"
    assert list(search(Exact("x"), history=missing).entries()) == []
    assert search(AllWords(("x",)), history=missing) == []
    assert search(Ranked("x"), history=missing).hits == []


def test_ranked_searches_sessions_and_history_through_the_index_it_refreshes_first(history):
    store = SessionStore()
    session = store.open("cli:trip")
    store.append(
        session,
        [
            {
                "role": "user",
                "content": "my lisbon hotel is the Alfama",
                "timestamp": "2026-02-10T08:00:00",
            }
        ],
    )
    store.close(session)
    asked: list[RecallIndex] = []

    def refresh(index: RecallIndex) -> bool:
        asked.append(index)
        return index.refresh().complete

    found = search(Ranked("lisbon hotel", limit=3, refresh=refresh), history=history)
    assert len(asked) == 1 and found.complete
    assert found.hits[0].unit.text == "my lisbon hotel is the Alfama"  # both words: ranked first
    assert {h.unit.session for h in found.hits} == {"cli:trip", "memory/HISTORY.md"}
    only_history = search(Ranked("lisbon", session="memory/HISTORY.md"), history=history)
    assert only_history.hits and {h.unit.session for h in only_history.hits} == {
        "memory/HISTORY.md"
    }
    partial = search(Ranked("lisbon", refresh=lambda index: False), history=history)
    assert not partial.complete  # what the refresh said is passed on
