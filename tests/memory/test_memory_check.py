"""check_memory findings and `nanobot memory check` exit codes."""

from __future__ import annotations

from pathlib import Path

from nanobot.agent.budget import memory_share
from nanobot.cli.memory_cmd import memory_app
from nanobot.memory.check import check_memory
from nanobot.memory.store import MemoryStore
from typer.testing import CliRunner

FACTS = "# Memory\n\n- Name: Dana\n- Lives in Lisbon\n- Likes tea\n"


def codes(store: MemoryStore, **kw) -> set[str]:
    return {f.code for f in check_memory(store, **kw) if f.severity == "problem"}


def test_a_healthy_memory_has_no_problems_and_exits_0(tmp_path: Path):
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")
    store.append_history("[2026-01-01 10:00] hello")
    assert codes(store, share_of=lambda tokens: memory_share(tokens, 65536)) == set()
    result = CliRunner().invoke(memory_app, ["check", "-w", str(tmp_path / "ws")])
    assert result.exit_code == 0 and "memory looks healthy" in result.stdout
    assert "of the 65,536-token context window" in result.stdout


def test_each_problem_is_found_with_its_fix(tmp_path: Path):
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")
    store.write_memory(
        "# Memory\n\n- Name: Dana\n- name: dana.\n- token = ghp_" + "a1" * 20 + "\n", reason="t"
    )
    store.append_history("[2026-01-05 10:00] one")
    store.append_history("[2026-01-01 10:00] two, dated before the one above")
    assert codes(store) == {"facts_missing", "duplicate_facts", "history_out_of_order"}
    store.memory_file.write_text("# Memory\n\n- password: hunter22x\n")
    store.history_file.write_bytes(store.history_file.read_bytes()[:10])
    found = check_memory(store, share_of=lambda tokens: memory_share(tokens, 20))
    problems = {f.code: f for f in found if f.severity == "problem"}
    assert {"secret_in_memory", "history_shrank", "memory_share", "history_torn"} <= set(problems)
    assert "restores the lost part" in problems["history_shrank"].fix
    result = CliRunner().invoke(memory_app, ["check", "-w", str(tmp_path / "ws"), "--window", "20"])
    assert result.exit_code == 1 and "fix: " in result.stdout


def test_damaged_memory_is_a_problem_with_restore_as_the_fix(tmp_path: Path):
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")
    store.memory_file.write_bytes(b"")
    [damaged] = [f for f in check_memory(store) if f.code == "memory_damaged"]
    assert "empty" in damaged.message and "memory edit" in damaged.fix  # no version to restore
    store.memory_file.write_bytes(b"- caf\xe9\n")
    [damaged] = [f for f in check_memory(store) if f.code == "memory_damaged"]
    assert "not valid UTF-8" in damaged.message


def test_history_changed_outside_nanobot_and_bad_bytes_are_problems(tmp_path: Path):
    store = MemoryStore(tmp_path / "ws")
    store.write_memory(FACTS, reason="setup")
    store.append_history("[2026-01-01 10:00] hello")
    with open(store.history_file, "ab") as fh:
        fh.write(b"[2026-01-02 10:00] appended by a command \xff\n\n")
    assert {"history_changed", "history_damaged"} <= codes(store)
    store.startup_check()  # puts the journal's text back
    assert codes(store) == set()
