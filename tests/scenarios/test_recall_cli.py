"""Recall through the real CLI and the fake LLM server: a fact from another session a month ago,
an index damaged, deleted or killed mid-build, `history search` and `memory tidy`."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from nanobot.fakellm import Reply
from nanobot.memory.recall_index import RecallIndex, default_index_path
from nanobot.memory.store import MemoryStore
from nanobot.paths import sessions_dir
from nanobot.session.store import SessionStore

FACT = "my sister's support group meets at the LGBTQ center on Thursdays"


def tool_results(request) -> list[str]:
    return [
        m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"))
        for m in request.messages
        if m.get("role") == "tool"
    ]


def write_session(key: str, messages: list[tuple[str, str]], start: datetime) -> None:
    store = SessionStore()
    session = store.open(key)
    try:
        store.append(
            session,
            [
                {
                    "role": role,
                    "content": text,
                    "timestamp": (start + timedelta(minutes=i)).isoformat(),
                }
                for i, (role, text) in enumerate(messages)
            ],
        )
    finally:
        store.close(session)


@pytest.fixture
def month_old_session(configure) -> datetime:
    """Session A, a month ago: the fact said once, in passing, among other talk."""
    configure()
    # at noon, so its 32 messages (a minute apart) stay on one day whenever the test runs
    when = (datetime.now() - timedelta(days=31)).replace(hour=12, minute=0, second=0, microsecond=0)
    chatter = [
        ("user", "what should I cook tonight? something with lentils"),
        ("assistant", "Try a dal."),
    ]
    write_session(
        "cli:a",
        chatter * 10
        + [
            ("user", f"unrelated: {FACT}, anyway, back to dinner"),
            ("assistant", "Good to know. For dinner, a risotto?"),
        ]
        + chatter * 5,
        when,
    )
    return when


def ask_from_b(fake_llm, nanobot_run, query: str = "sister support group meets") -> str:
    """One turn in session B where the model calls search_history; the tool result the provider received."""
    fake_llm.reset()
    fake_llm.script(
        Reply.tool_calls([("search_history", {"query": query})]), Reply.text("On Thursdays.")
    )
    result = nanobot_run("agent", "-s", "cli:b", "-m", "when does my sister's group meet again?")
    assert result.returncode == 0, result.stderr
    assert "On Thursdays." in result.stdout
    results = tool_results(fake_llm.requests[1])
    fake_llm.assert_all_valid()
    return results[-1]  # this turn's (earlier turns of B are in the history before it)


def test_a_fact_said_in_another_session_a_month_ago_is_found(
    month_old_session, fake_llm, nanobot_run
):
    result = ask_from_b(fake_llm, nanobot_run)
    said = month_old_session + timedelta(minutes=20)
    assert FACT in result
    assert (
        f"{said:%Y-%m-%d %H:%M} · session cli:a (another session) · user · ref cli:a#20" in result
    )
    assert "<untrusted-data" in result and "lentils" not in result.split(FACT)[0].split("[1]")[-1]
    # the model reads on around the hit
    fake_llm.reset()
    fake_llm.script(
        Reply.tool_calls([("read_history", {"ref": "cli:a#20", "before": 1, "after": 1})]),
        Reply.text("ok"),
    )
    assert nanobot_run("agent", "-s", "cli:b", "-m", "and what did you say then?").returncode == 0
    around = tool_results(fake_llm.requests[1])[0]
    assert "Try a dal." in around and FACT in around and "a risotto?" in around


def test_a_damaged_or_deleted_index_is_rebuilt_and_the_answer_is_the_same(
    month_old_session, fake_llm, nanobot_run
):
    first = ask_from_b(fake_llm, nanobot_run)
    index = default_index_path()
    assert index.exists()
    with open(index, "r+b") as fh:
        fh.seek(0)
        fh.write(b"\0garbage" * 1024)
    assert ask_from_b(fake_llm, nanobot_run) == first
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    assert ask_from_b(fake_llm, nanobot_run) == first


def _big_archive(sessions: int, messages: int) -> None:
    rng = random.Random(7)
    words = [
        "harbor",
        "lantern",
        "violet",
        "meadow",
        "copper",
        "willow",
        "ember",
        "quartz",
        "saddle",
        "orchid",
        "pepper",
        "ribbon",
        "glacier",
        "thimble",
        "falcon",
        "juniper",
        "marble",
        "nectar",
        "pebble",
        "tundra",
    ]
    start = datetime(2026, 1, 1, 9, 0)
    for s in range(sessions):
        lines = [
            (
                "user" if i % 2 == 0 else "assistant",
                " ".join(rng.choice(words) for _ in range(rng.randint(20, 200))) + f" token{s}x{i}",
            )
            for i in range(messages)
        ]
        write_session(f"cli:bulk{s}", lines, start + timedelta(days=s))


def test_kill_9_while_indexing_loses_nothing_and_the_next_start_repairs_it(
    configure, nanobot_cmd, nanobot_run, tmp_path
):
    configure()
    _big_archive(sessions=40, messages=100)
    proc = subprocess.Popen(
        [*nanobot_cmd, "history", "search", "token22x7", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    index = default_index_path()
    deadline = time.monotonic() + 60
    while not Path(f"{index}-wal").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    if proc.returncode != -signal.SIGKILL:
        pytest.skip("the search finished before the kill (a very fast machine)")
    reference = RecallIndex(tmp_path / "reference.sqlite3", sessions=sessions_dir(), history=None)
    reference.refresh()
    for probe in ("token22x7", "token0x0", "token39x99", "harbor glacier"):
        after_kill = nanobot_run("history", "search", probe, "--json", "-n", "20")
        assert after_kill.returncode == 0, after_kill.stderr
        hits = [(h["ref"], h["part"], h["text"]) for h in json.loads(after_kill.stdout)]
        assert hits == [
            (h.unit.ref, h.unit.part, h.unit.text) for h in reference.search(probe, limit=20)
        ]
    assert (
        nanobot_run("history", "search", "token22x7", "--json").stdout.count(
            '"ref": "cli:bulk22#7"'
        )
        == 1
    )


def test_history_search_filters_and_json(month_old_session, nanobot_run, isolated_home):
    MemoryStore(isolated_home / "workspace").append_history(
        "[2026-01-06 10:00] Talked about the support group's new venue."
    )
    out = nanobot_run("history", "search", "support group")
    assert out.returncode == 0 and FACT in out.stdout and "new venue" in out.stdout
    hits = json.loads(
        nanobot_run("history", "search", "support group", "--json", "--session", "cli:a").stdout
    )
    assert [h["ref"] for h in hits] == ["cli:a#20"] and hits[0]["role"] == "user"
    assert hits[0]["before"]["text"] == "Try a dal." and hits[0]["after"]["text"].startswith(
        "Good to know."
    )
    hits = json.loads(
        nanobot_run("history", "search", "support group", "--json", "--until", "2026-01-31").stdout
    )
    assert [h["session"] for h in hits] == ["memory/HISTORY.md"]
    since = (month_old_session + timedelta(days=1)).strftime("%Y-%m-%d")
    none = nanobot_run("history", "search", "support group", "--since", since, "--session", "cli:a")
    assert none.returncode == 1 and none.stdout == ""
    grep = nanobot_run("history", "grep", "venue")  # exact grep, unchanged: HISTORY.md only
    assert grep.stdout == "[2026-01-06 10:00] Talked about the support group's new venue.\n\n"
    bad = nanobot_run("history", "search", "((( ***")
    assert bad.returncode == 2 and "no word" in bad.stderr


TIDY_BEFORE = """# Facts
- The user lives in Porto.
- The user lives in Porto.
- The user has a dentist appointment tomorrow.
- The user's cat is called Miso.
- The user lives in Porto
"""
TIDY_AFTER = """# Facts
- The user lives in Lisbon (moved 2026-03-02).
- The user had a dentist appointment on 2026-03-03.
- The user's cat is called Miso.
"""


@pytest.fixture
def untidy(configure, isolated_home) -> MemoryStore:
    configure()
    store = MemoryStore(isolated_home / "workspace")
    store.write_memory(TIDY_BEFORE, reason="setup")
    store.append_history("[2026-03-02 18:00] Dentist tomorrow; the user moved to Lisbon.")
    return store


def test_memory_tidy_shows_the_diff_and_refuses_without_yes_when_not_interactive(
    untidy, fake_llm, nanobot_run
):
    fake_llm.script(Reply.text(TIDY_AFTER))
    result = nanobot_run("memory", "tidy")
    assert result.returncode == 1 and "--yes" in result.stderr
    assert (
        "\n-- The user lives in Porto.\n" in result.stdout
        and "\n-- The user has a dentist appointment tomorrow.\n" in result.stdout
    )
    assert "+- The user lives in Lisbon (moved 2026-03-02)." in result.stdout
    assert untidy.read_memory() == TIDY_BEFORE  # unchanged
    sent = fake_llm.requests[0]
    user = json.dumps(sent.messages)
    assert (
        "The user has a dentist appointment tomorrow." in user
        and "[2026-03-02 18:00] Dentist tomorrow" in user
    )


def test_memory_tidy_yes_applies_through_the_versioned_door(untidy, fake_llm, nanobot_run):
    fake_llm.script(Reply.text("```markdown\n" + TIDY_AFTER + "```"))
    result = nanobot_run("memory", "tidy", "--yes")
    assert result.returncode == 0, result.stderr
    assert untidy.read_memory() == TIDY_AFTER
    versions = nanobot_run("memory", "versions").stdout
    assert "tidied by the model" in versions
    assert nanobot_run("memory", "restore", "1").returncode == 0
    assert untidy.read_memory() == TIDY_BEFORE


def test_memory_tidy_refuses_a_cut_off_reply(untidy, fake_llm, nanobot_run):
    fake_llm.script(Reply.text(TIDY_AFTER[:20], finish_reason="length"))
    result = nanobot_run("memory", "tidy", "--yes")
    assert result.returncode != 0
    assert untidy.read_memory() == TIDY_BEFORE


def test_scope_session_in_the_config_keeps_session_a_out_of_session_b(
    month_old_session, fake_llm, nanobot_run, isolated_home
):
    path = isolated_home / "config.json"
    data = json.loads(path.read_text())
    data["tools"] = {"recall": {"scope": "session"}}
    path.write_text(json.dumps(data))
    result = ask_from_b(fake_llm, nanobot_run)
    assert FACT not in result and "Nothing archived matches" in result
    data["tools"] = {"recall": {"scope": "everything"}}
    path.write_text(json.dumps(data))
    bad = nanobot_run("agent", "-s", "cli:b", "-m", "hi")
    assert bad.returncode != 0 and "tools.recall.scope" in bad.stderr


@pytest.mark.parametrize("as_json", [True, False])
def test_search_into_a_reader_that_stops_early_exits_0_quietly(
    configure, nanobot_cmd, isolated_home, as_json
):
    # `nanobot history search ... | head`: the reader closes the pipe before the hits are written;
    # the status still says that something matched, and no "could not access" error is printed
    store = MemoryStore(isolated_home / "workspace")
    for day in range(1, 29):
        store.append_history(f"[2026-01-{day:02d} 10:00] lisbon trains " + "y" * 3000)
    args = ["history", "search", "lisbon", "-n", "100"] + (["--json"] if as_json else [])
    proc = subprocess.Popen(
        [*nanobot_cmd, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert b"lisbon" in proc.stdout.read(2000)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""


def test_new_keeps_the_old_conversation_and_history_search_and_grep_find_its_words(
    configure, fake_llm, nanobot_run, isolated_home
):
    configure()
    fake_llm.script(
        Reply.text("Let me look at the calendar."),
        Reply.tool_calls(  # /new's summary does not repeat the words: only the kept messages can
            [
                (
                    "save_memory",
                    {
                        "history_entry": "[2026-12-04 02:00] Talked about scheduling server work.",
                        "memory_update": "# Memory\n\n- The user runs servers.",
                    },
                )
            ]
        ),
        Reply.text("Hello again."),
    )
    question = "Question: do we need a maintenance window?"
    assert nanobot_run("agent", "-m", question).returncode == 0
    new = nanobot_run("agent", "-m", "/new")
    assert new.returncode == 0, new.stderr
    (kept,) = SessionStore().archives()
    assert f"the previous one is kept as {kept.key}" in new.stdout
    assert nanobot_run("agent", "-m", "hello again").returncode == 0
    # on disk: the archive holds the old conversation, the live file only the new one
    said = [
        json.loads(line).get("content")
        for line in kept.path.read_text().splitlines()
        if "role" in json.loads(line)
    ]
    assert said == [question, "Let me look at the calendar."]
    live = SessionStore().path_for("cli:direct").read_text()
    assert "hello again" in live and "maintenance" not in live
    assert "Talked about scheduling" in (isolated_home / "workspace/memory/HISTORY.md").read_text()
    search = nanobot_run("history", "search", "maintenance window")
    assert search.returncode == 0, search.stderr
    assert f"session {kept.key} · user · ref {kept.key}#0" in search.stdout
    assert question in search.stdout
    grep = nanobot_run("history", "grep", "maintenance")
    assert grep.returncode == 0, grep.stderr
    assert f"{kept.key}#0 user: {question}" in grep.stdout
    as_json = json.loads(nanobot_run("history", "grep", "maintenance", "--json").stdout)
    assert [e.get("ref") for e in as_json] == [f"{kept.key}#0"]
    mine = nanobot_run("history", "search", "maintenance", "--session", "cli:direct")
    assert mine.returncode == 0 and f"ref {kept.key}#0" in mine.stdout  # a key covers its archives
    listed = nanobot_run("session", "list")
    assert "archived by /new (1;" in listed.stdout and kept.key in listed.stdout
    shown = nanobot_run("session", "show", kept.key)
    assert (
        shown.returncode == 0 and question in shown.stdout and "archived by /new at" in shown.stdout
    )
    refused = nanobot_run("agent", "-s", kept.key, "-m", "go on")
    assert refused.returncode != 0 and "cannot be continued" in refused.stderr
    assert len(SessionStore().archives()) == 1 and len(fake_llm.requests) == 3
