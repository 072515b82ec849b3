"""MEMORY.md versions and update policy; HISTORY.md appends."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

import pytest
from nanobot import messages as m
from nanobot.memory import history as history_log
from nanobot.memory.store import MemoryStore, MemoryUpdateRefused, VersionNotFound

FACTS = """# Long-term Memory

## User
- Name: Dana
- Lives in Lisbon
- Prefers short answers
- Works on a Rust compiler project
- Uses neovim and tmux

## Preferences
- Dark mode everywhere
- Meetings only in the morning
"""

KEY = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789-_abcdefgh"


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "workspace")


def test_missing_memory_reads_empty_and_info_says_so(store):
    assert store.read_memory() == ""
    info = store.memory_info()
    assert not info.exists and info.tokens == 0 and info.versions == 0


def test_each_write_keeps_the_previous_text_as_a_version(store):
    store.write_memory("one\n", reason="a")
    store.write_memory("two\n", reason="b")
    store.write_memory("three\n", reason="c")
    assert store.read_memory() == "three\n"
    versions = store.versions()
    assert [store.read_version(v.number) for v in versions] == ["two\n", "one\n"]
    assert versions[0].reason == "c"
    names = [p.name for p in sorted(store.versions_dir.glob("MEMORY-*.md"))]
    assert all(re.fullmatch(r"MEMORY-\d{8}T\d{6}\.\d{6}Z\.md", n) for n in names)
    assert store.memory_info().versions == 2


def test_version_names_sort_in_save_order_even_when_written_fast(store):
    for i in range(30):
        store.write_memory(f"text {i}\n", reason="loop")
    contents = [p.read_text() for p in sorted(store.versions_dir.glob("MEMORY-*.md"))]
    assert contents == [f"text {i}\n" for i in range(29)]


def test_restore_is_undoable(store):
    store.write_memory("original\n", reason="a")
    store.write_memory("replacement\n", reason="b")
    store.restore(1)
    assert store.read_memory() == "original\n"
    assert store.read_version(1) == "replacement\n"  # the replaced text became version 1
    store.restore(1)
    assert store.read_memory() == "replacement\n"


def test_restore_of_a_missing_version_is_a_usage_error(store):
    with pytest.raises(VersionNotFound) as err:
        store.restore(3)
    assert err.value.exit_code == 2


def test_write_is_atomic_no_temp_files_left(store):
    store.write_memory(FACTS, reason="x")
    leftovers = [p.name for p in store.dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []
    assert store.memory_file.read_text() == FACTS


def test_a_failed_write_leaves_the_old_file(store, monkeypatch):
    store.write_memory(FACTS, reason="x")
    import nanobot.memory.store as memory_mod

    real = memory_mod.atomic_write

    def boom(path, data, **kw):
        if Path(path).name == "MEMORY.md":
            raise OSError("disk full")
        return real(path, data, **kw)

    monkeypatch.setattr(memory_mod, "atomic_write", boom)
    with pytest.raises(OSError):
        store.write_memory("new facts\n", reason="y")
    assert store.read_memory() == FACTS


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty_write_is_refused(store, text):
    store.write_memory(FACTS, reason="x")
    with pytest.raises(MemoryUpdateRefused):
        store.write_memory(text, reason="y")
    assert store.read_memory() == FACTS


def test_update_empty_or_truncated_is_refused(store):
    store.write_memory(FACTS, reason="x")
    assert store.apply_update("", truncated=False).status == "refused"
    assert store.apply_update(None, truncated=False).status == "refused"
    outcome = store.apply_update(FACTS + "- New fact\n", truncated=True)
    assert outcome.status == "refused" and "cut off" in outcome.message
    assert store.read_memory() == FACTS
    assert store.versions() == []


def test_normal_update_is_written_with_a_version(store):
    store.write_memory(FACTS, reason="x")
    updated = (
        FACTS.replace("- Lives in Lisbon", "- Lives in Porto (moved March 2026)") + "- Likes tea\n"
    )
    outcome = store.apply_update(updated, truncated=False)
    assert outcome.status == "written"
    assert store.read_memory() == updated
    assert store.read_version(1) == FACTS


def test_first_update_of_an_empty_memory_is_written(store):
    outcome = store.apply_update("# Memory\n- Name: Dana\n", truncated=False)
    assert outcome.status == "written"
    assert store.versions() == []


def test_update_dropping_most_facts_is_held_back(store):
    store.write_memory(FACTS, reason="x")
    shrunk = "# Long-term Memory\n- Name: Dana\n- Has a cat called Miso\n"
    outcome = store.apply_update(shrunk, truncated=False)
    assert outcome.status == "held_back"
    assert "6 of 7" in outcome.message and "review" in outcome.message
    text = store.read_memory()
    assert text.startswith(FACTS.rstrip("\n"))  # every old fact is still there
    section = text[len(FACTS.rstrip("\n")) :]
    assert re.search(
        r"## Held back update \(\d{4}-\d{2}-\d{2} \d{2}:\d{2}\) — review and merge", section
    )
    assert "- Has a cat called Miso" in section
    assert "Name: Dana" not in section  # only the new lines are appended
    assert store.read_version(1) == FACTS


def test_held_back_update_with_nothing_new_leaves_the_file(store):
    store.write_memory(FACTS, reason="x")
    outcome = store.apply_update("# Long-term Memory\n- Name: Dana\n", truncated=False)
    assert outcome.status == "held_back"
    assert store.read_memory() == FACTS


def test_a_small_memory_is_protected_too(store):
    store.write_memory(
        "- The user is Ana, a nurse in Porto.\n- Two kids.\n- Prefers short answers.\n", reason="x"
    )
    outcome = store.apply_update(
        "- User asked about Kubernetes ingress timeouts.\n", truncated=False
    )
    assert outcome.status == "held_back" and "dropped 3 of 3" in outcome.message
    text = store.read_memory()
    assert (
        "The user is Ana" in text and "Kubernetes ingress" in text
    )  # old facts kept, new one for review


def test_an_update_that_keeps_the_facts_of_a_small_memory_is_written(store):
    store.write_memory("- The user is Ana.\n", reason="x")
    outcome = store.apply_update("- The user is Ana.\n- Lives in Porto.\n", truncated=False)
    assert outcome.status == "written"


def test_reformatted_facts_count_as_kept(store):
    store.write_memory(FACTS, reason="x")
    reformatted = FACTS.replace("- ", "* ").replace("Lisbon", "Lisbon.")
    assert store.apply_update(reformatted, truncated=False).status == "written"


def test_secrets_are_masked_in_memory_and_history(store):
    store.apply_update(f"# Memory\n- Anthropic key: {KEY}\n", truncated=False)
    store.write_memory(f"- key {KEY}\n", reason="edit")
    store.append_history(f"User pasted their key {KEY} by mistake; password=hunter2")
    for path in (store.memory_file, store.history_file, *store.versions_dir.glob("*.md")):
        assert KEY not in path.read_text(), path
    assert "hunter2" not in store.history_file.read_text()


def test_history_entries_are_stamped_and_separated(store):
    first = store.append_history("User asked about the weather.", when=datetime(2026, 3, 1, 9, 30))
    assert first == "[2026-03-01 09:30] User asked about the weather."
    store.append_history("[2026-03-02 10:00] Already stamped entry.\nSecond line.")
    assert store.append_history("  \n") == ""
    assert store.history_file.read_text() == (
        "[2026-03-01 09:30] User asked about the weather.\n\n"
        "[2026-03-02 10:00] Already stamped entry.\nSecond line.\n\n"
    )


def test_history_append_fsyncs(store, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    store.append_history("entry")
    assert synced


def test_nanobot_written_files_work_unchanged(store):
    """Files as HKUDS/nanobot writes them: MEMORY.md free-form, HISTORY.md blank-line separated."""
    store.dir.mkdir(parents=True)
    store.memory_file.write_text(FACTS)
    store.history_file.write_text(
        "[2026-02-10 14:22] User set up nanobot on a Raspberry Pi and asked about cron.\n\n"
        "[2026-02-11 08:05] Discussed the Rust compiler project; user wants borrow-checker notes.\n\n"
    )
    assert store.read_memory() == FACTS
    store.append_history("[2026-02-12 09:00] New entry.")
    entries = list(history_log.iter_entries(store.history_file))
    assert [e.stamp for e in entries] == [
        datetime(2026, 2, 10, 14, 22),
        datetime(2026, 2, 11, 8, 5),
        datetime(2026, 2, 12, 9, 0),
    ]
    assert store.apply_update(FACTS + "- Has a Raspberry Pi\n", truncated=False).status == "written"


def test_history_append_repairs_a_missing_separator(store):
    store.dir.mkdir(parents=True)
    store.history_file.write_text("[2026-02-10 14:22] hand-edited, no newline")
    store.append_history("[2026-02-11 10:00] next")
    assert (
        store.history_file.read_text()
        == "[2026-02-10 14:22] hand-edited, no newline\n\n[2026-02-11 10:00] next\n\n"
    )


def test_raw_archive_keeps_every_message_readably(store):
    msgs = [
        {
            **m.user("Please rename\n[2026-01-01 00:00] this file"),
            "timestamp": "2026-03-01T10:15:00+00:00",
        },
        m.assistant("On it.", [m.tool_call("c1", "exec", {"command": "mv a b"})]),
        m.tool_result("c1", "exec", "ok"),
        {**m.assistant(f"Done. Your key {KEY} is safe."), "timestamp": "2026-03-01T10:16:00+00:00"},
    ]
    first = store.append_raw_archive(msgs, "summariser failed 3 times")
    assert "RAW" in first and "4 message(s)" in first and "summariser failed 3 times" in first
    text = store.history_file.read_text()
    assert "USER: Please rename" in text
    assert (
        "ASSISTANT called exec(" in text and "mv a b" in text
    )  # as consolidation's transcript says it
    assert "TOOL RESULT (exec): ok" in text
    assert KEY not in text
    entries = list(history_log.iter_entries(store.history_file))
    assert len(entries) == 1  # message text that looks like a stamp does not split the entry
    assert entries[0].text.splitlines()[0] == first


def test_template_text_is_not_a_fact_so_the_first_update_is_written(store):
    from nanobot.paths import bundled_dir

    store.write_memory(
        (bundled_dir("workspace") / "memory" / "MEMORY.md").read_text(), reason="template"
    )
    assert (
        store.apply_update("# Long-term memory\n\n## User\n\n- Name: Ana\n", truncated=False).status
        == "written"
    )
    store.write_memory(
        "# Memory\n\n## User Information\n\n(Important facts about the user)\n", reason="nanobot"
    )
    assert (
        store.apply_update("## User Information\n\n- Name: Ana\n", truncated=False).status
        == "written"
    )
