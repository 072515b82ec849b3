"""The session store: what ends up on disk, and what survives damage and concurrent use."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nanobot.errors import SessionInUseError, UnknownSessionError
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.store import SessionStore
from nanobot.session.validity import INTERRUPTED_RESULT


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "sessions")


def records(path: Path) -> list[dict]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def write_session(store: SessionStore, key: str, messages: list[dict], pointer: int = 0) -> Path:
    store.directory.mkdir(parents=True, exist_ok=True)
    path = store.path_for(key)
    meta = {
        "_type": "metadata",
        "key": key,
        "created_at": "2026-03-01T10:00:00",
        "updated_at": "2026-03-01T10:00:00",
        "metadata": {},
        "last_consolidated": pointer,
    }
    lines = [json.dumps(meta)] + [
        json.dumps({**m, "timestamp": m.get("timestamp", "2026-03-01T10:00:00")}) for m in messages
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def turn(i: int) -> list[dict]:
    return [user(f"question {i}"), assistant(f"answer {i}")]


# -- round trip and format ----------------------------------------------------------------------


def test_round_trip_keeps_messages_pointer_and_metadata(store):
    session = store.open("cli:direct")
    store.append(session, turn(1) + turn(2))
    store.set_pointer(session, 2)
    store.set_metadata(session, title="greetings")
    store.close(session)

    loaded = store.load("cli:direct")
    assert [m["content"] for m in loaded.messages] == [
        "question 1",
        "answer 1",
        "question 2",
        "answer 2",
    ]
    assert all("timestamp" in m for m in loaded.messages)
    assert loaded.last_consolidated == 2
    assert loaded.metadata == {"title": "greetings"}
    assert loaded.warnings == []
    assert loaded.get_history() == [user("question 2"), assistant("answer 2")]


def test_file_starts_with_a_v01_metadata_record(store):
    session = store.open("cli:direct")
    store.append(session, turn(1))
    store.close(session)
    first = records(store.path_for("cli:direct"))[0]
    assert (
        first["_type"] == "metadata"
        and first["key"] == "cli:direct"
        and first["last_consolidated"] == 0
    )
    assert {"created_at", "updated_at", "metadata"} <= set(first)


V01_FILE = (
    "\n".join(
        [
            '{"_type": "metadata", "key": "telegram:42", "created_at": "2026-02-20T09:15:02.123456", '
            '"updated_at": "2026-02-21T18:00:00.000001", "metadata": {}, "last_consolidated": 2}',
            '{"role": "user", "content": "hi", "timestamp": "2026-02-20T09:15:02.123456"}',
            '{"role": "assistant", "content": "hello!", "timestamp": "2026-02-20T09:15:04.000001", "tools_used": []}',
            '{"role": "user", "content": "list files", "timestamp": "2026-02-21T17:59:00.000001"}',
            '{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": '
            '{"name": "list_dir", "arguments": "{\\"path\\": \\".\\"}"}}], "timestamp": "2026-02-21T17:59:01.000001"}',
            '{"role": "tool", "tool_call_id": "call_1", "name": "list_dir", "content": "a.txt", '
            '"timestamp": "2026-02-21T17:59:02.000001"}',
            '{"role": "assistant", "content": "One file: a.txt", "timestamp": "2026-02-21T18:00:00.000001"}',
        ]
    )
    + "\n"
)


def test_nanobot_v01_file_loads_unchanged(store):
    path = store.path_for("telegram:42")
    path.parent.mkdir(parents=True)
    path.write_text(V01_FILE, encoding="utf-8")
    session = store.open("telegram:42")
    store.close(session)
    assert path.read_text(encoding="utf-8") == V01_FILE
    assert len(session.messages) == 6 and session.last_consolidated == 2 and session.warnings == []
    assert session.created_at == "2026-02-20T09:15:02.123456"
    history = session.get_history()
    assert history[0] == user("list files")
    assert "tools_used" not in json.dumps(history) and "timestamp" not in json.dumps(history)


def test_a_line_only_the_lenient_json_reader_accepts_still_loads(store):
    # orjson (the fast path) refuses NaN; the line is valid for Python's json, so it must not be
    # treated as damage (moved aside) just because the fast parser is stricter
    path = store.path_for("k")
    path.parent.mkdir(parents=True)
    lines = [
        '{"_type": "metadata", "key": "k", "created_at": "2026-03-01T10:00:00", "last_consolidated": 0}',
        '{"role": "user", "content": "score?", "score": NaN, "timestamp": "2026-03-01T10:00:00"}',
        '{"role": "assistant", "content": "no idea", "timestamp": "2026-03-01T10:00:01"}',
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = path.read_bytes()
    session = store.open("k")
    store.close(session)
    assert [m["content"] for m in session.messages] == ["score?", "no idea"]
    assert session.warnings == [] and path.read_bytes() == before
    assert not Path(str(path) + ".corrupt").exists()


def test_repair_writes_back_integers_past_64_bits_exactly(store):
    big = 123456789012345678901234567890
    path = write_session(
        store,
        "k",
        [{"role": "user", "content": "n?", "n": big}, assistant("ok"), assistant("again")],
    )  # consecutive assistants: repair rewrites
    assert store.repair("k").changed
    assert [r.get("n") for r in records(path) if r.get("content") == "n?"] == [big]


def test_v01_file_under_its_old_name_is_imported_and_left_in_place(store):
    legacy = store.directory / "telegram_42.jsonl"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(V01_FILE, encoding="utf-8")
    assert store.load("telegram:42").last_consolidated == 2
    session = store.open("telegram:42")
    store.append(session, turn(9))
    store.close(session)
    assert legacy.read_text(encoding="utf-8") == V01_FILE
    assert len(store.load("telegram:42").messages) == 8
    assert [info.key for info in store.infos()] == ["telegram:42"]


# -- durability of the per-turn path ------------------------------------------------------------


def test_append_never_rewrites(store):
    session = store.open("k")
    store.append(session, turn(1))
    path = store.path_for("k")
    before_inode, before = path.stat().st_ino, path.read_bytes()
    store.append(session, turn(2))
    store.set_pointer(session, 2)
    store.append(session, [tool_result("x", "f", "r")])
    after = path.read_bytes()
    assert path.stat().st_ino == before_inode
    assert after.startswith(before) and len(after) > len(before)
    store.close(session)


def test_pointer_records_are_appended_and_the_last_wins(store):
    session = store.open("k")
    store.append(session, turn(1) + turn(2) + turn(3))
    for pointer in (2, 4, 6):
        store.set_pointer(session, pointer)
    store.close(session)
    metas = [r for r in records(store.path_for("k")) if r.get("_type") == "metadata"]
    assert [m["last_consolidated"] for m in metas] == [0, 2, 4, 6]
    assert store.load("k").last_consolidated == 6


def test_set_pointer_rejects_out_of_range(store):
    session = store.open("k")
    store.append(session, turn(1))
    with pytest.raises(ValueError):
        store.set_pointer(session, 3)
    store.close(session)


def test_writing_requires_an_open_session(store):
    write_session(store, "k", turn(1))
    snapshot = store.load("k")
    with pytest.raises(RuntimeError):
        store.append(snapshot, turn(2))


@pytest.mark.parametrize("pointer", [-3, 99, "7", None, True, 2.0])
def test_pointer_that_cannot_be_right_falls_back_to_the_start_with_warning(store, pointer):
    # no HISTORY.md receipts are known to this store, so nothing proves a later position
    write_session(store, "k", turn(1) + turn(2), pointer=pointer)
    session = store.open("k")
    assert session.last_consolidated == 0
    assert any("pointer" in w for w in session.warnings)
    store.close(session)
    assert store.open("k").warnings == []  # the clamped value was recorded once


def test_rewrite_and_clear_are_atomic_and_reset(store):
    session = store.open("k")
    store.append(session, turn(1))
    store.set_pointer(session, 2)
    store.clear(session)
    store.close(session)
    loaded = store.load("k")
    assert loaded.messages == [] and loaded.last_consolidated == 0
    assert len(records(store.path_for("k"))) == 1
    assert [p.name for p in store.directory.iterdir() if p.name.endswith(".tmp")] == []


# -- damage -------------------------------------------------------------------------------------


def test_corrupt_middle_line_goes_to_side_file_with_warning(store):
    path = write_session(store, "k", turn(1) + turn(2))
    lines = path.read_bytes().split(b"\n")
    lines[2] = b'{"role": "assistant", "cont\x00\xff garbage'
    path.write_bytes(b"\n".join(lines))
    session = store.open("k")
    assert [m["content"] for m in session.messages] == ["question 1", "question 2", "answer 2"]
    side = Path(str(path) + ".corrupt")
    assert side.read_bytes() == b'{"role": "assistant", "cont\x00\xff garbage\n'
    assert len(session.warnings) == 1 and str(side) in session.warnings[0]
    store.close(session)
    # Reported once: the readable lines were kept, the damaged one moved aside.
    again = store.open("k")
    assert again.warnings == [] and len(again.messages) == 3
    assert side.read_bytes().count(b"garbage") == 1


def test_snapshot_load_of_damaged_file_warns_without_writing(store):
    path = write_session(store, "k", turn(1))
    path.write_bytes(path.read_bytes() + b"{not json\n")
    before = path.read_bytes()
    session = store.load("k")
    assert len(session.messages) == 2 and "damaged" in session.warnings[0]
    assert path.read_bytes() == before and not Path(str(path) + ".corrupt").exists()


def test_torn_last_line_at_every_byte_offset_loses_only_that_line(store):
    path = write_session(
        store, "k", turn(1) + [assistant(None, [tool_call("c1", "exec", {"cmd": "ls"})])]
    )
    full = path.read_bytes()
    last_start = full.rstrip(b"\n").rfind(b"\n") + 1
    for cut in range(last_start, len(full) + 1):
        path.write_bytes(full[:cut])
        session = store.open("k")
        complete = cut >= len(full) - 1  # the whole line is there, with or without its newline
        assert len(session.messages) == (3 if complete else 2), cut
        assert [m["content"] for m in session.messages[:2]] == ["question 1", "answer 1"]
        store.append(session, turn(2))
        store.close(session)
        reloaded = store.load("k")
        assert reloaded.warnings == [], cut
        assert [m.get("content") for m in reloaded.messages][-2:] == ["question 2", "answer 2"]
        assert len(reloaded.messages) == len(session.messages)
        Path(str(path) + ".corrupt").unlink(missing_ok=True)


def test_file_without_trailing_newline_gets_one_before_the_next_append(store):
    path = write_session(store, "k", turn(1))
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    inode = path.stat().st_ino
    session = store.open("k")
    store.append(session, turn(2))
    store.close(session)
    assert path.stat().st_ino == inode
    assert len(store.load("k").messages) == 4


# -- locking and naming -------------------------------------------------------------------------


def test_second_process_gets_session_in_use(store):
    session = store.open("cli:direct")
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from nanobot.errors import SessionInUseError
        from nanobot.session.store import SessionStore
        try:
            SessionStore(Path({str(store.directory)!r})).open("cli:direct")
        except SessionInUseError as exc:
            print(exc.message); sys.exit(exc.exit_code)
        sys.exit(0)
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "session cli:direct is in use by another nanobot process" in proc.stdout
    store.close(session)
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_second_store_in_same_process_gets_session_in_use(store):
    session = store.open("k")
    with pytest.raises(SessionInUseError) as err:
        SessionStore(store.directory).open("k")
    assert err.value.exit_code == 2 and err.value.hint
    store.close(session)
    store.close(SessionStore(store.directory).open("k"))


def test_file_names_are_collision_free_and_safe(store):
    keys = [
        "cli:direct",
        "cli_direct",
        "CLI:direct",
        "cli:direct ",
        "cli/direct",
        "../../etc/passwd",
        "telegram:12345",
        "",
        "ключ:日本",
        "a" * 300,
    ]
    paths = {store.path_for(k) for k in keys}
    assert len(paths) == len(keys)
    assert len({p.name.lower() for p in paths}) == len(keys)  # also on case-insensitive disks
    for path in paths:
        assert path.parent == store.directory
        assert len(path.name) < 100 and path.name.isascii() and "/" not in path.name
    assert store.path_for("cli:direct").name.startswith("cli_direct-")


def test_list_reports_every_session_without_locking(store):
    a = store.open("a")
    store.append(a, turn(1))
    store.set_pointer(a, 2)
    write_session(store, "b", turn(1) + turn(2) + turn(3))
    infos = {info.key: info for info in store.infos()}  # `a` is still locked: list must not care
    assert infos["a"].message_count == 2 and infos["a"].last_consolidated == 2
    assert infos["b"].message_count == 6 and infos["b"].updated_at == "2026-03-01T10:00:00"
    store.close(a)


def test_load_unknown_key_names_known_keys(store):
    write_session(store, "cli:direct", turn(1))
    with pytest.raises(UnknownSessionError) as err:
        store.load("nope")
    assert err.value.exit_code == 2 and "cli:direct" in str(err.value)


# -- get_history --------------------------------------------------------------------------------


def test_get_history_never_changes_file_or_messages(store):
    messages = [
        assistant("stray"),
        user("q"),
        assistant(None, [tool_call("A", "f", {}), tool_call("B", "g", {})]),
        tool_result("A", "f", "r"),
        assistant("x"),
        assistant("y"),
    ]
    path = write_session(store, "k", messages)
    session = store.open("k")
    before_file, before_messages = path.read_bytes(), json.dumps(session.messages)
    history = session.get_history()
    assert path.read_bytes() == before_file and json.dumps(session.messages) == before_messages
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert history[3]["content"] == INTERRUPTED_RESULT and history[4]["content"] == "x\n\ny"
    assert all("timestamp" not in m for m in history)
    store.close(session)


def test_get_history_last_n_starts_at_a_user_turn(store):
    messages = [
        user("q1"),
        assistant(None, [tool_call("A", "f", {})]),
        tool_result("A", "f", "r"),
        assistant("a1"),
        user("q2"),
        assistant("a2"),
    ]
    write_session(store, "k", messages)
    session = store.load("k")
    assert session.get_history(max_messages=3) == [user("q2"), assistant("a2")]
    assert session.get_history(max_messages=0) == []


# -- repair -------------------------------------------------------------------------------------


def test_repair_fixes_structure_keeps_backup_and_maps_pointer(store):
    messages = [
        user("q1"),
        assistant("a"),
        assistant("b"),
        user("q2"),
        assistant(None, [tool_call("A", "f", {}), tool_call("B", "g", {})]),
        tool_result("A", "f", "r"),
        tool_result("Z", "f", "orphan"),
        assistant("done"),
    ]
    path = write_session(store, "k", messages, pointer=3)
    path.write_bytes(path.read_bytes() + b'{"role": "us')
    original = path.read_bytes()
    report = store.repair("k")
    assert report.backup is not None and report.backup.read_bytes() == original
    assert report.damaged_lines == 1 and report.corrupt_file.read_bytes() == b'{"role": "us\n'
    assert (
        report.fixes.merged_assistants,
        report.fixes.backfilled,
        report.fixes.dropped_orphans,
    ) == (1, 1, 1)
    assert report.pointer_before == 3 and report.pointer_after == 2
    repaired = store.load("k")
    assert repaired.warnings == [] and repaired.last_consolidated == 2
    assert [m["role"] for m in repaired.messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    assert repaired.messages[1]["content"] == "a\n\nb"
    assert all("timestamp" in m for m in repaired.messages)
    assert store.repair("k").backup is None  # nothing left to fix


def test_repair_refuses_a_session_in_use(store):
    session = store.open("k")
    with pytest.raises(SessionInUseError):
        store.repair("k")
    store.close(session)


def test_empty_file_from_a_crash_at_creation_gets_a_metadata_record(store):
    store.directory.mkdir(parents=True)
    store.path_for("k").touch()
    session = store.open("k")
    store.append(session, turn(1))
    store.close(session)
    assert records(store.path_for("k"))[0]["_type"] == "metadata"
    assert len(store.load("k").messages) == 2


def test_damage_before_the_pointer_moves_it_back_so_no_unsummarised_message_is_skipped(tmp_path):
    from nanobot.session.store import SessionStore

    store = SessionStore(tmp_path)
    path = store.path_for("k")
    lines = [
        json.dumps({"_type": "metadata", "key": "k", "last_consolidated": 2}),
        '{"role": "user", "content": "u0 summari',  # damaged, before the pointer
        json.dumps({"role": "assistant", "content": "a0 summarised"}),
        json.dumps({"role": "user", "content": "u1 not yet summarised"}),
        json.dumps({"role": "assistant", "content": "a1 not yet summarised"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    session = store.open("k")
    try:
        assert [m["content"] for m in session.get_history()] == [
            "u1 not yet summarised",
            "a1 not yet summarised",
        ]
        assert any("moved it back" in w for w in session.warnings)
    finally:
        store.close(session)
    again = store.open("k")
    try:
        assert again.warnings == [] and again.last_consolidated == 1
    finally:
        store.close(again)


def test_a_torn_last_line_does_not_move_the_pointer(tmp_path):
    from nanobot.session.store import SessionStore

    store = SessionStore(tmp_path)
    path = store.path_for("k")
    lines = [
        json.dumps({"_type": "metadata", "key": "k", "last_consolidated": 2}),
        json.dumps({"role": "user", "content": "u0"}),
        json.dumps({"role": "assistant", "content": "a0"}),
        json.dumps({"role": "user", "content": "u1"}),
    ]
    path.write_text("\n".join(lines) + '\n{"role": "assistant", "content": "a1 cut')
    session = store.open("k")
    try:
        assert session.last_consolidated == 2
        assert not any("moved it back" in w for w in session.warnings)
    finally:
        store.close(session)


# -- /new: the old conversation is kept whole, as an archived one --------------------------------


class Crash(BaseException):
    """The process dies here (nothing after this line of /new runs)."""


def start_conversation(store: SessionStore, key: str = "cli:direct"):
    session = store.open(key)
    store.append(session, [user("Question: do we need a maintenance window?"), assistant("Yes.")])
    log = store.working_state_log(session)
    log.add_version("Goal: plan the maintenance window", archived=2)
    log.close_for_new()  # /new closes the state before the store keeps the conversation
    return session


def said(store: SessionStore) -> list[tuple[str, str]]:
    """Every message on disk, in the live files and the archives: (where, text)."""
    found = [(i.key, m["content"]) for i in store.infos() for m in store.load(i.key).messages]
    found += [(a.key, m["content"]) for a in store.archives() for m in store.load(a.key).messages]
    return found


def test_new_keeps_the_conversation_whole_in_an_archive_and_the_key_starts_afresh(store):
    session = start_conversation(store)
    before = session.path.read_bytes()
    name = store.clear(session)
    store.append(session, [user("a fresh start")])
    store.close(session)
    assert name is not None and name.startswith("cli:direct@")
    archive = store.archive_path(name)
    assert archive is not None and archive.parent == store.directory
    assert archive.read_bytes() == before  # moved, byte for byte
    assert [m["content"] for m in records(store.path_for("cli:direct")) if "role" in m] == [
        "a fresh start"
    ]
    assert [(i.key, i.message_count) for i in store.infos()] == [("cli:direct", 1)]  # not cluttered
    assert [(a.key, a.message_count) for a in store.archives()] == [(name, 2)]
    assert [a.key for a in store.archives("cli:direct")] == [name] and store.archives("cli") == []
    shown = store.load(name)
    assert shown.key == name and [m["content"] for m in shown.messages][0].startswith("Question")
    state = store.working_state_for(name).read()  # the working state went with it, closed
    assert [v.text for v in state.archived] == ["Goal: plan the maintenance window"]
    assert store.working_state_for("cli:direct").read().versions == []
    assert not store.exists(name)


def test_two_news_in_the_same_second_keep_two_archives(store, monkeypatch):
    from datetime import UTC, datetime

    import nanobot.session.store as module

    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2026, 12, 4, 2, 15, 7, tzinfo=UTC)

    monkeypatch.setattr(module, "datetime", Frozen)
    session = start_conversation(store)
    first = store.clear(session)
    store.append(session, [user("second conversation")])
    second = store.clear(session)
    store.close(session)
    assert (first, second) == ("cli:direct@20261204T021507Z", "cli:direct@20261204T021507Z-2")
    assert [a.key for a in store.archives()] == [second, first]  # newest first
    assert [m["content"] for m in store.load(second).messages] == ["second conversation"]
    assert store.load(first).messages[0]["content"].startswith("Question")


@pytest.mark.parametrize(
    "where, patched, calls",
    [
        ("before the move", "ensure_private_dir", 1),
        ("after the session file moved", "fsync_dir", 1),
        ("after the working state moved", "fsync_dir", 2),
        ("before the fresh file is written", "atomic_write", 1),
    ],
)
def test_a_crash_at_any_step_of_new_leaves_the_conversation_in_the_live_file_or_the_archive(
    store, monkeypatch, where, patched, calls
):
    import nanobot.session.store as module

    real = getattr(module, patched)
    seen = []

    def dies(*args, **kwargs):
        seen.append(args)
        if len(seen) == calls:
            raise Crash(where)
        return real(*args, **kwargs)

    session = start_conversation(store)
    monkeypatch.setattr(module, patched, dies)
    with pytest.raises(Crash):
        store.clear(session)
    store.close(session)  # the process is gone: so is its lock
    monkeypatch.undo()
    after = SessionStore(store.directory)
    texts = [text for _, text in said(after)]
    assert texts == ["Question: do we need a maintenance window?", "Yes."]  # once, never lost
    # the key opens (afresh or as it was) with no warning, and a later /new keeps everything
    session = after.open("cli:direct")
    assert session.warnings == [] and session.working_state == ""
    if session.messages:
        after.working_state_log(session).close_for_new()
        after.clear(session)
    after.append(session, [user("next")])
    after.close(session)
    assert sorted(text for _, text in said(after)) == sorted([*texts, "next"])
    assert all(a.message_count == 2 for a in after.archives())


def test_an_archived_conversation_is_read_only(store):
    from nanobot.errors import UsageError

    session = start_conversation(store)
    name = store.clear(session)
    store.close(session)
    assert name is not None
    for attempt in (store.open, store.repair):
        with pytest.raises(UsageError) as caught:
            attempt(name)
        assert "archived" in caught.value.message and "session show" in (caught.value.hint or "")
    with pytest.raises(UsageError):  # no live key may take an archive's shape
        store.open("work@20300101T000000Z")
    assert (
        not store.path_for(name).exists() and not store.path_for("work@20300101T000000Z").exists()
    )


def test_nanobots_import_never_takes_an_archive_for_a_session_of_its_own(store, tmp_path):
    from nanobot.session.importer import find_sessions

    session = start_conversation(store)
    store.clear(session)
    store.close(session)
    assert find_sessions(tmp_path / "home", tmp_path / "workspace", store) == []
