"""Rules that used to live in two or more places now have one home; the users agree with it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from nanobot.agent.budget import shrink_text
from nanobot.agent.consolidation import render_transcript
from nanobot.app import tool_context
from nanobot.config import Config, MCPServerConfig
from nanobot.memory import history as history_log
from nanobot.memory import store as memory
from nanobot.messages import (
    assistant,
    cut_middle,
    parse_iso,
    parse_timestamp,
    tool_call,
    tool_result,
    user,
)
from nanobot.provider_table import PROVIDERS, scrubbed_env_names, secret_env_names
from nanobot.secrets_mask import secret_env_values
from nanobot.tools.shell import child_env


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


# -- a twin coming back is caught: each rule's telltale is spelled in its home only ---------------

ROOT = Path(__file__).resolve().parent.parent


def _spelled(needle: str, *, under: tuple[str, ...] = ("nanobot", "scripts", "tests")) -> list[str]:
    """The source files (relative to the repo) that contain `needle`, this file left out."""
    found = []
    for folder in under:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path != Path(__file__).resolve() and needle in path.read_text(encoding="utf-8"):
                found.append(str(path.relative_to(ROOT)))
    return found


def test_the_entry_stamp_pattern_is_written_once():
    assert _spelled(r"\[(\d{4})-(\d{2})") == ["nanobot/memory/history_format.py"]


def test_iso_times_are_parsed_in_one_place():
    assert _spelled("fromisoformat(", under=("nanobot",)) == ["nanobot/messages.py"]
    assert parse_iso("2026-03-01T10:30Z") == datetime(2026, 3, 1, 10, 30, tzinfo=UTC)
    assert parse_iso("  ") is None and parse_iso(7) is None
    assert history_log.parse_when("2026-03-01", end_of_day=True) == datetime(
        2026, 3, 1, 23, 59, 59, 999999
    )
    assert history_log.parse_when("2026-03-01T10:00") == datetime(2026, 3, 1, 10, 0)


def test_one_head_and_tail_cut_serves_the_budget_transcripts_and_pastes():
    assert _spelled("* 2 // 3", under=("nanobot",)) == ["nanobot/messages.py"]
    text = "a" * 600 + "b" * 400
    assert cut_middle(text, 90, lambda n: f"<{n}>") == "a" * 60 + "<910>" + "b" * 30
    assert cut_middle("short", 90, lambda n: "<cut>") == "short"
    shrunk = shrink_text(text, 90)
    assert shrunk.startswith("a" * 60 + "\n\n[... 910 characters cut") and shrunk.endswith(
        "]\n\n" + "b" * 30
    )
    line = render_transcript([tool_result("c1", "exec", text)], tool_chars=90)
    assert line == "TOOL RESULT (exec): " + "a" * 60 + " …[910 characters cut]… " + "b" * 30


def test_consolidation_and_the_raw_archive_render_a_message_the_same_way(tmp_path):
    chunk = [
        {**user("rename it\nplease"), "timestamp": "2026-03-01T10:15:00"},
        assistant(None, [tool_call("c1", "exec", {"command": "mv a b"})]),
        tool_result("c1", "exec", "ok"),
        assistant("Done."),
    ]
    transcript = [
        re.sub(r"^\[[^\]]+\] ", "", line) for line in render_transcript(chunk).splitlines()
    ]
    store = memory.MemoryStore(tmp_path / "ws")
    store.append_raw_archive(chunk, "test")
    archived = (
        store.history_file.read_text().split("\n", 1)[1].replace("\n  ", "\n").strip().splitlines()
    )
    assert (
        archived
        == transcript
        == [
            "USER: rename it",
            "please",
            'ASSISTANT called exec({"command": "mv a b"})',
            "TOOL RESULT (exec): ok",
            "ASSISTANT: Done.",
        ]
    )


def test_one_list_of_secret_variable_names(tmp_path):
    names = secret_env_names()
    assert {spec.env_key for spec in PROVIDERS if spec.env_key} | {
        "BRAVE_API_KEY",
        "NANOBOT_API_KEY",
    } == names
    assert names <= scrubbed_env_names({})  # what tests and benchmarks strip
    assert (
        names <= tool_context(Config(), tmp_path).secret_env_names
    )  # what exec keeps from its children
    # the scrub test exports it to prove the fixture strips it
    assert _spelled('"NANOBOT_API_KEY"') == [
        "nanobot/provider_table.py",
        "tests/test_env_scrub.py",
    ]
    assert _spelled('endswith("_API_KEY")') == [
        "tests/test_env_scrub.py"
    ]  # its probe looks for leaks


def test_one_scanner_finds_host_processes():
    assert _spelled('os.listdir("/proc")', under=("tests",)) == ["tests/host_procs.py"]


def test_the_runtime_context_block_is_written_in_one_place():
    writers = _spelled("with_runtime_context(", under=("nanobot",))
    assert writers == ["nanobot/session/runtime_context.py", "nanobot/session/save_policy.py"]
    assert _spelled('"[Runtime Context]"', under=("nanobot",)) == [
        "nanobot/session/runtime_context.py"
    ]


def test_one_rule_says_which_variable_names_hold_a_secret():
    assert _spelled('"CREDENTIALS"', under=("nanobot",)) == ["nanobot/secrets_mask.py"]
    environ = {
        "PGPASSWORD": "pg-pass-0123456",
        "GITLAB_PAT": "glpat-0123456789",
        "SSH_AUTH_SOCK": "/tmp/agent.1",
        "TOKENIZERS_PARALLELISM": "false-ish-value",
    }
    # exec's children, the masker and the config's MCP secrets agree on every name
    assert set(child_env(environ)) == {"SSH_AUTH_SOCK", "TOKENIZERS_PARALLELISM"}
    assert set(secret_env_values(environ)) == {"pg-pass-0123456", "glpat-0123456789"}
    cfg = Config()
    cfg.tools.mcp_servers["db"] = MCPServerConfig(command="db-mcp", env=environ)
    assert {"pg-pass-0123456", "glpat-0123456789"} <= set(cfg.secret_values())
    assert not {"/tmp/agent.1", "false-ish-value"} & set(cfg.secret_values())
