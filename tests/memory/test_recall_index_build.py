"""A large build: session files parsed and masked in a helper process give the same index as one
process alone, configured secrets masked too."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nanobot import secrets_mask
from nanobot.memory import recall_index
from nanobot.memory.recall_index import RecallIndex
from nanobot.paths import nanobot_home, sessions_dir
from nanobot.session.store import SessionStore

SECRET = "zq-configured-value-7f3a9c1e55"


def write(key: str, texts: list[str], day: int) -> None:
    store = SessionStore()
    session = store.open(key)
    try:
        store.append(
            session,
            [
                {"role": "user", "content": text, "timestamp": f"2026-02-{day:02d}T09:{i:02d}:00"}
                for i, text in enumerate(texts)
            ],
        )
        store.set_pointer(session, 1)
    finally:
        store.close(session)


def build(name: str) -> tuple[RecallIndex, Path]:
    path = nanobot_home() / name
    idx = RecallIndex(path, sessions=sessions_dir(), history=None)
    assert idx.refresh().complete
    return idx, path


def contents(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    db = sqlite3.connect(path)
    try:
        sources = db.execute(
            "SELECT path, kind, session, inode, done, fingerprint, seq, n, pointer, last_when "
            "FROM sources ORDER BY path"
        ).fetchall()
        units = db.execute(
            "SELECT s.path, u.n, u.seq, u.part, u.ts, u.role, u.pos, u.len FROM units u "
            "JOIN sources s ON s.id = u.src ORDER BY s.path, u.n"
        ).fetchall()
        return sources, units
    finally:
        db.close()


def test_a_build_with_the_helper_process_is_the_one_without_it(monkeypatch):
    monkeypatch.setattr(secrets_mask, "_known", set())
    monkeypatch.setattr(secrets_mask, "_known_re", None)
    secrets_mask.remember_secrets([SECRET])  # a configured key: the helper must mask it too
    long_line = "a long message about the quarry " + "filler words here " * 200
    for i in range(8):
        write(
            f"cli:s{i}",
            [f"session {i} mentions the heron", long_line, f"my key is {SECRET} ok", "北京烤鸭"],
            i + 1,
        )
    alone, alone_path = build("alone.sqlite3")
    monkeypatch.setattr(recall_index, "_AHEAD_MIN_FILES", 1)
    monkeypatch.setattr(recall_index, "_AHEAD_MIN_BYTES", 0)
    taken: list[bool] = []
    take = recall_index._ParsedAhead.take

    def counted(self: recall_index._ParsedAhead, src: recall_index._Source) -> object:
        parsed = take(self, src)
        taken.append(parsed is not None)
        return parsed

    monkeypatch.setattr(recall_index._ParsedAhead, "take", counted)
    helped, helped_path = build("helped.sqlite3")
    assert taken.count(True) == 8  # every session file came from the helper
    assert contents(helped_path) == contents(alone_path)
    for query in ("heron", "quarry filler", "my key", "北京"):
        assert [(h.unit.ref, h.unit.part, h.unit.text) for h in helped.search(query, limit=20)] == [
            (h.unit.ref, h.unit.part, h.unit.text) for h in alone.search(query, limit=20)
        ]
    assert SECRET not in "".join(h.unit.text for h in helped.search("my key", limit=20))
    for path in (helped_path, alone_path):
        stored = b"".join(
            Path(f"{path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{path}{s}").exists()
        )
        assert b"7f3a9c1e55" not in stored  # (the tokenizer splits at the dashes)
    # the index is of that session file as read: one message more is read on from there
    store = SessionStore()
    session = store.open("cli:s3")
    store.append(session, [{"role": "user", "content": "and then an ibis"}])
    store.close(session)
    assert 0 < helped.refresh().bytes_done < 200
    assert [h.unit.text for h in helped.search("ibis")] == ["and then an ibis"]


@pytest.mark.parametrize("start", ["helper cannot start", "helper fails"])
def test_without_a_working_helper_the_build_reads_every_file_itself(monkeypatch, start):
    for i in range(4):
        write(f"cli:s{i}", [f"session {i} mentions the heron"], i + 1)
    monkeypatch.setattr(recall_index, "_AHEAD_MIN_FILES", 1)
    monkeypatch.setattr(recall_index, "_AHEAD_MIN_BYTES", 0)
    if start == "helper cannot start":
        monkeypatch.setattr(recall_index._ParsedAhead, "start", classmethod(lambda cls: None))
    else:
        monkeypatch.setattr(recall_index, "_parse_whole", _fails)
    idx, _ = build("index.sqlite3")
    assert sorted(h.unit.text for h in idx.search("heron", limit=10)) == [
        f"session {i} mentions the heron" for i in range(4)
    ]


def _fails(path: str) -> None:
    raise OSError("the helper could not read it")


def test_the_helper_process_ends_when_the_build_is_killed(tmp_path):
    code = (
        "import sys, time\n"
        "from nanobot.memory.recall_index import _ParsedAhead, _Source\n"
        "ahead = _ParsedAhead.start()\n"
        "ahead.feed([_Source(sys.argv[1], 'session', '')])\n"
        "ahead.take(_Source(sys.argv[1], 'session', ''))\n"
        "print(*[p.pid for p in ahead.pool._processes.values()], flush=True)\n"
        "time.sleep(60)\n"
    )
    session = tmp_path / "s.jsonl"
    session.write_text('{"role": "user", "content": "hello"}\n')
    parent = subprocess.Popen(
        [sys.executable, "-c", code, str(session)], stdout=subprocess.PIPE, text=True
    )
    try:
        helpers = [int(pid) for pid in parent.stdout.readline().split()]  # type: ignore[union-attr]
        assert helpers and all(_alive(pid) for pid in helpers)
    finally:
        parent.kill()  # kill -9: no shutdown runs
        parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in helpers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in helpers)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_kill_9_during_a_build_with_the_helper_loses_nothing(monkeypatch):
    for i in range(60):
        write(f"cli:s{i}", [f"session {i} line {j} about the heron " * 20 for j in range(30)], 1)
    code = (
        "import sys\n"
        "from nanobot.memory import recall_index as r\n"
        "r._AHEAD_MIN_FILES, r._AHEAD_MIN_BYTES = 1, 0\n"
        "idx = r.RecallIndex(r.default_index_path(), sessions=r.sessions_dir(), history=None)\n"
        "idx.refresh(progress=lambda done, total: print(done, total, flush=True))\n"
        "print('complete', flush=True)\n"
    ).replace("r.sessions_dir()", "__import__('nanobot.paths').paths.sessions_dir()")
    build_proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        first = build_proc.stdout.readline()  # type: ignore[union-attr]
        assert first.split()[0].isdigit(), first
    finally:
        build_proc.kill()
        build_proc.wait()
    db = sqlite3.connect(nanobot_home() / "recall.sqlite3")
    try:
        indexed = db.execute("SELECT count(*) FROM sources").fetchone()[0]
    finally:
        db.close()
    if indexed >= 60:
        pytest.skip("the build finished before the kill (a very fast machine)")
    _, killed_path = build("recall.sqlite3")  # the default index: what the kill left, then repaired
    _, clean_path = build("clean.sqlite3")
    killed, clean = contents(killed_path), contents(clean_path)
    assert [row[1:] for row in killed[0]] == [row[1:] for row in clean[0]]
    assert killed[1] == clean[1]
