"""The load index: a long session is read from its consolidation pointer on, and a stale or wrong
index never changes what a load returns (it only makes it slower, by reading the whole file)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from nanobot.errors import StorageError
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.index import PrefixList
from nanobot.session.store import INDEX_WORTH_BYTES, SessionStore

KEY = "cli:direct"


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "sessions")


def turn(i: int) -> list[dict]:
    return [
        user(f"question {i}"),
        assistant(None, [tool_call(f"c{i}", "read_file", {"path": f"{i}.md"})]),
        tool_result(f"c{i}", "read_file", f"content of file {i} " * 5),
        assistant(f"answer {i}"),
    ]


def consolidated_session(store: SessionStore, turns: int = 30, pointer_turn: int = 25) -> Path:
    """A session with decisions and metadata on both sides of its pointer, consolidated once."""
    session = store.open(KEY)
    for i in range(turns):
        store.append(session, turn(i))
        if i % 7 == 3:
            store.record_decision(
                session, kind="exec", summary=f"decision {i}", allowed=True, by="user"
            )
        if i == 10:
            store.set_pointer(session, 8)
            store.set_metadata(session, title="first")
    store.set_pointer(session, 4 * pointer_turn)
    store.set_metadata(session, title="second")
    store.close(session)
    return store.path_for(KEY)


def meta_lines(path: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in path.read_bytes().splitlines()
        if b'"_type": "metadata"' in line
    ]


def full_read(store: SessionStore, path: Path, tmp_path: Path) -> dict:
    """What a load returns for this file with every index removed (the whole file parsed)."""
    other = SessionStore(tmp_path / "without-index")
    other.directory.mkdir(exist_ok=True)
    out = []
    for line in path.read_bytes().split(b"\n"):
        try:
            record = json.loads(line)
        except ValueError:
            out.append(line)
            continue
        if isinstance(record, dict) and "index" in record:
            record.pop("index")
            line = json.dumps(record, ensure_ascii=False).encode()
        out.append(line)
    other.path_for(KEY).write_bytes(b"\n".join(out))
    return snapshot(other.load(KEY))


def snapshot(session) -> dict:
    return {
        "messages": list(session.messages),
        "pointer": session.last_consolidated,
        "decisions": list(session.decisions),
        "metadata": session.metadata,
        "created": session.created_at,
        "updated": session.updated_at,
        "history": session.get_history(),
        "warnings": [w.replace(str(session.path), "P") for w in session.warnings],
    }


def test_a_consolidated_session_loads_from_its_pointer_and_equals_a_full_read(store, tmp_path):
    path = consolidated_session(store)
    assert "index" in meta_lines(path)[-1]
    session = store.load(KEY)
    assert isinstance(session.messages, PrefixList) and not session.messages.loaded
    assert len(session.messages) == 120 and session.last_consolidated == 100
    # what a turn reads comes from the tail alone; the consolidated part is still on disk
    assert [m["content"] for m in session.get_history() if m["role"] == "user"] == [
        f"question {i}" for i in range(25, 30)
    ]
    assert not session.messages.loaded
    assert snapshot(session) == full_read(store, path, tmp_path)  # now read in full, on demand
    assert session.messages[0]["content"] == "question 0" and session.messages.loaded


def test_open_appends_after_an_indexed_load_and_the_next_load_sees_everything(store, tmp_path):
    path = consolidated_session(store)
    session = store.open(KEY)
    assert not session.messages.loaded
    store.append(session, turn(30))
    store.set_pointer(session, 108)
    store.close(session)
    assert (
        not session.messages.loaded
    )  # the new index was worked out from the lines after the old one
    loaded = store.load(KEY)
    assert (
        not loaded.messages.loaded
        and loaded.last_consolidated == 108
        and len(loaded.messages) == 124
    )
    assert snapshot(loaded) == full_read(store, path, tmp_path)


def _corrupt_index(path: Path, **changes) -> None:
    lines = path.read_bytes().split(b"\n")
    last = max(i for i, line in enumerate(lines) if b'"_type": "metadata"' in line)
    record = json.loads(lines[last])
    record["index"].update(changes)
    lines[last] = json.dumps(record).encode()
    path.write_bytes(b"\n".join(lines))


def _edit_lines(path: Path, edit) -> None:
    lines = path.read_bytes().split(b"\n")
    edit(lines)
    path.write_bytes(b"\n".join(lines))


def _message_line(lines: list[bytes], content: str) -> int:
    return next(i for i, line in enumerate(lines) if f'"content": "{content}"'.encode() in line)


STALE = {
    "offset past the end": lambda p: _corrupt_index(p, offset=p.stat().st_size + 10),
    "offset mid-line": lambda p: _corrupt_index(
        p, offset=json.loads(p.read_text().splitlines()[-1])["index"]["offset"] + 7
    ),
    "offset at another line": lambda p: _corrupt_index(
        p, offset=len(p.read_bytes().split(b"\n")[0]) + 1
    ),
    "wrong message count": lambda p: _corrupt_index(p, messages=99),
    "a consolidated message deleted by hand": lambda p: _edit_lines(
        p, lambda ls: ls.pop(_message_line(ls, "answer 3"))
    ),
    "a consolidated message edited in place": lambda p: _edit_lines(
        p,
        lambda ls: ls.__setitem__(
            _message_line(ls, "answer 3"),
            ls[_message_line(ls, "answer 3")].replace(b"answer 3", b"answer X"),
        ),
    ),
    "a message line inserted by hand": lambda p: _edit_lines(
        p,
        lambda ls: ls.insert(
            _message_line(ls, "question 5"), json.dumps(user("inserted")).encode()
        ),
    ),
    "a consolidated line damaged": lambda p: _edit_lines(
        p, lambda ls: ls.__setitem__(_message_line(ls, "answer 3"), b'{"role": "assis')
    ),
    "the first line edited": lambda p: _edit_lines(
        p, lambda ls: ls.__setitem__(0, ls[0].replace(b'"metadata": {}', b'"metadata": {"x": 1}'))
    ),
    "the last metadata record written by another program": lambda p: p.write_bytes(
        p.read_bytes() + b'{"_type":"metadata","key":"cli:direct","last_consolidated":40}\n'
    ),
    "rewritten by another program keeping the last line": lambda p: p.write_bytes(
        b"\n".join(
            p.read_bytes().split(b"\n")[:1]
            + [json.dumps(m).encode() for m in turn(99)]
            + p.read_bytes().split(b"\n")[-2:]
        )
    ),
}


@pytest.mark.parametrize("damage", list(STALE))
def test_a_stale_or_wrong_index_falls_back_to_the_full_read(store, tmp_path, damage):
    path = consolidated_session(store)
    STALE[damage](path)
    expected = full_read(store, path, tmp_path)
    loaded = store.load(KEY)
    assert snapshot(loaded) == expected
    opened = store.open(KEY)  # and opening (which may repair the file and move damage aside) agrees
    assert [m["content"] for m in opened.messages] == [
        m["content"] for m in expected["messages"]
    ] or expected["warnings"]
    assert opened.last_consolidated <= len(opened.messages)
    store.close(opened)
    again = store.load(KEY)
    assert (
        list(again.messages) == list(opened.messages)
        and again.last_consolidated == opened.last_consolidated
    )


def test_a_torn_tail_line_is_tolerated_moved_aside_and_the_index_kept(store, tmp_path):
    path = consolidated_session(store)
    with path.open("ab") as fh:
        fh.write(b'{"role": "user", "content": "torn')
    expected = full_read(store, path, tmp_path)
    loaded = store.load(KEY)
    assert not loaded.messages.loaded and snapshot(loaded) == expected
    assert "damaged line" in loaded.warnings[0]
    opened = store.open(KEY)
    store.close(opened)
    assert b"torn" not in path.read_bytes() and b"torn" in Path(str(path) + ".corrupt").read_bytes()
    after = store.load(KEY)
    assert not after.messages.loaded and after.warnings == [] and len(after.messages) == 120


def test_repair_and_rewrite_leave_a_true_index(store, tmp_path):
    path = consolidated_session(store)
    _edit_lines(path, lambda ls: ls.insert(_message_line(ls, "question 27"), b"{not json"))
    report = store.repair(KEY)
    assert report.changed and report.damaged_lines == 1
    loaded = store.load(KEY)
    assert not loaded.messages.loaded  # the rewritten first line carries an index that holds
    assert snapshot(loaded) == full_read(store, path, tmp_path)
    session = store.open(KEY)
    store.clear(session)
    store.append(session, turn(1))
    store.close(session)
    assert [m["content"] for m in store.load(KEY).messages][0] == "question 1"


def test_an_older_large_file_gets_its_index_when_opened(store, tmp_path):
    store.directory.mkdir(parents=True)
    path = store.path_for(KEY)
    meta = {
        "_type": "metadata",
        "key": KEY,
        "created_at": "2026-01-01T10:00:00",
        "updated_at": "2026-01-01T10:00:00",
        "metadata": {},
        "last_consolidated": 4000,
    }
    body = "".join(
        json.dumps({**m, "timestamp": "2026-01-01T10:00:00"}) + "\n"
        for i in range(2000)
        for m in turn(i)
    )
    path.write_text(json.dumps(meta) + "\n" + body)
    assert path.stat().st_size >= INDEX_WORTH_BYTES
    assert isinstance(store.load(KEY).messages, list)  # no index yet: read in full
    store.close(store.open(KEY))
    loaded = store.load(KEY)
    assert not loaded.messages.loaded and loaded.last_consolidated == 4000
    assert snapshot(loaded) == full_read(store, path, tmp_path)


def test_a_prefix_changed_while_open_is_an_error_not_wrong_messages(store):
    path = consolidated_session(store)
    session = store.open(KEY)
    _edit_lines(path, lambda ls: ls.pop(_message_line(ls, "answer 3")))
    with pytest.raises(StorageError, match="changed by another program"):
        session.messages[0]
    store.close(session)


def test_session_list_counts_from_the_index(store):
    consolidated_session(store)
    [info] = store.infos()
    assert info.message_count == 120 and info.last_consolidated == 100


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_and_damage_load_the_same_through_the_index(tmp_path, seed):
    rng = random.Random(seed)
    store = SessionStore(tmp_path / f"s{seed}")
    session = store.open(KEY)
    for i in range(rng.randint(5, 40)):
        store.append(session, turn(i)[: rng.randint(1, 4)])
        if rng.random() < 0.3:
            store.set_pointer(session, rng.randint(0, len(session.messages)))
        if rng.random() < 0.1:
            store.record_decision(session, kind="exec", summary=f"d{i}", allowed=False, by="user")
    store.close(session)
    path = store.path_for(KEY)
    lines = path.read_bytes().split(b"\n")
    for _ in range(rng.randint(0, 3)):
        k = rng.randrange(len(lines))
        action = rng.choice(["drop", "cut", "dup", "garble"])
        if action == "drop":
            lines.pop(k)
        elif action == "cut":
            lines[k] = lines[k][: rng.randint(0, len(lines[k]))]
        elif action == "dup":
            lines.insert(k, lines[k])
        else:
            lines[k] = lines[k].replace(b"question", b'qu"stion', 1)
    path.write_bytes(b"\n".join(lines))
    assert snapshot(store.load(KEY)) == full_read(store, path, tmp_path)


def test_every_rewrite_leaves_an_index_that_holds_whatever_its_numbers(store):
    """The first line's length depends on the offset and seal it holds; no prefix may leave it wrong."""
    session = store.open(KEY)
    store.append(session, turn(0) + turn(1))
    for n in range(120):  # different prefixes: different CRCs and seals, of every width
        session.messages[0] = user(f"question {n} " + "x" * (n % 17))
        session.last_consolidated = 4
        store.rewrite(session)
        assert not store.load(KEY).messages.loaded, n  # read from the index, not in full
    store.close(session)
