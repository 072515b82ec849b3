"""FileIndex (nanobot/session/index.py), the one owner of a session file's load index, asked directly:
where message N's line starts, which index a pointer write carries, and a damaged line in between."""

from __future__ import annotations

import zlib

from nanobot.session.index import INDEX_KEY, Checkpoint, FileIndex, read
from nanobot.session.store import SessionStore


def _session_file(messages: int):
    store = SessionStore()
    session = store.open("cli:index")
    store.append(
        session,
        [
            {
                "role": "user" if i % 2 == 0 else "assistant",
                "content": f"message {i}",
                "timestamp": "2026-03-01T10:00:00",
            }
            for i in range(messages)
        ],
    )
    store.close(session)
    return session.path


def test_the_index_at_a_pointer_is_where_that_messages_line_starts_and_seals_the_bytes_before():
    path = _session_file(6)
    index = read(path, checkpoint=True).file
    assert (
        index is not None
        and index.head is not None
        and index.checkpoint == Checkpoint(index.head, 0, 0, 0)
    )
    data = path.read_bytes()
    at = index.at(4)
    assert at is not None and at.messages == 4 and at.decisions == 0
    assert data[at.offset :].startswith(b'{"role": "user", "content": "message 4"')
    assert at.crc == zlib.crc32(data[index.head : at.offset])
    index.pointer_moving(4)
    assert index.record(4) == at.record() and index.stored_pointer == 4 and not index.on_disk
    assert index.record(3) is None  # an index past the pointer is never written beside it
    index.pointer_written()
    assert index.on_disk


def test_no_index_is_claimed_across_a_damaged_line():
    path = _session_file(4)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3]) + b"{not json\n" + b"".join(lines[3:]))
    index = FileIndex(path, len(lines[0]))
    assert index.at(1) is not None  # before the damage: provable
    assert index.at(3) is None


def test_a_pointer_written_through_the_store_lets_the_next_read_skip_the_consolidated_part():
    store = SessionStore()
    path = _session_file(6)
    session = store.open("cli:index")
    store.set_pointer(session, 4)
    store.close(session)
    meta = path.read_bytes().splitlines()[-1]
    assert INDEX_KEY.encode() in meta
    parsed = read(path)
    assert (
        parsed.file is not None
        and parsed.file.read_from is not None
        and parsed.file.read_from.messages == 4
    )
    assert [m["content"] for m in parsed.messages[4:]] == [
        "message 4",
        "message 5",
    ]  # the skipped part unread
    assert parsed.file.skipped_messages()[0]["content"] == "message 0"  # and there when asked for
