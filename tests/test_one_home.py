"""Rules that used to live in two or more places now have one home; the users agree with it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from nanobot.memory import history as history_log
from nanobot.memory import store as memory
from nanobot.messages import parse_timestamp


def test_message_timestamps_parse_to_local_naive_time():
    assert parse_timestamp("2026-03-01 09:30") == datetime(2026, 3, 1, 9, 30)
    assert parse_timestamp("2026-03-01T09:30:15") == datetime(2026, 3, 1, 9, 30, 15)
    aware = datetime(2026, 3, 1, 9, 30, tzinfo=timezone(timedelta(hours=5)))
    assert parse_timestamp(aware.isoformat()) == aware.astimezone().replace(tzinfo=None)
    assert parse_timestamp("yesterday") is None
    assert parse_timestamp("") is None
    assert parse_timestamp(None) is None


def test_memory_and_history_log_share_one_entry_stamp():
    assert memory.STAMP_RE is history_log.STAMP_RE
    assert memory.STAMP_RE.match("[2026-03-01 09:30] note")
    assert memory.STAMP_RE.match("[2026-03-01T09:30:15] note")
    assert not memory.STAMP_RE.match("note [2026-03-01 09:30]")


def test_an_imported_history_entry_keeps_its_minutes(isolated_home, tmp_path):
    # The old importer's strptime list missed "YYYY-MM-DDTHH:MM" and read the entry as "now".
    store = memory.MemoryStore(tmp_path / "ws")
    store.append_history("moved to Lisbon", when=parse_timestamp("2026-02-03T04:05"))
    assert "[2026-02-03 04:05] moved to Lisbon" in store.history_file.read_text()
