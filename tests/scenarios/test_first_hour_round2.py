"""The first hour, second round (issue 34): what a new user still hit, through the real command."""

from __future__ import annotations

import json
import sys

from nanobot.fakellm import Reply
from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.store import SessionStore
from tests.cli.terminal import Terminal


def _session(key: str, messages: list[dict], pointer: int = 0) -> None:
    store = SessionStore()
    session = store.open(key)
    store.append(session, messages)
    if pointer:
        store.set_pointer(session, pointer)
    store.close(session)


def test_session_show_json_prints_a_consolidated_session(nanobot_run, configure):
    configure()
    _session(
        "cli:direct",
        [
            user("old question"),
            assistant("old answer"),
            user("new question"),
            assistant("new answer"),
        ],
        pointer=2,
    )
    shown = nanobot_run("session", "show", "cli:direct", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    assert [m["content"] for m in json.loads(shown.stdout)["messages"]] == [
        "old question",
        "old answer",
        "new question",
        "new answer",
    ]


def test_no_key_error_points_at_the_demo_which_answers_without_one(nanobot_run, isolated_home):
    missing = nanobot_run("agent", "-m", "hi")
    assert missing.returncode != 0 and "no API key" in missing.stderr
    assert "`nanobot demo`" in missing.stderr
    demo = nanobot_run("demo", "-m", "hello there")
    assert demo.returncode == 0, demo.stderr
    assert "(scripted demo)" in demo.stdout and '"hello there"' in demo.stdout
    assert "scripted demo" in demo.stderr and "not from a model" in demo.stderr
    assert (
        not (isolated_home / "sessions").exists() and not (isolated_home / "config.json").exists()
    )


def test_demo_chat_in_a_terminal_runs_a_tool_and_leaves_the_home_alone(isolated_home):
    term = Terminal("demo", columns=100)
    try:
        term.wait_for("scripted demo: answers come from")
        term.wait_for("you ›")
        term.send("list my files")
        term.wait_for("list_dir")
        term.wait_for("AGENTS.md")
        term.send("/quit")
        assert term.finish() == 0
    finally:
        term.close()
    assert "(scripted demo)" in term.text()
    assert not isolated_home.exists() or not any(isolated_home.iterdir())


def _tool_messages(request) -> list[dict]:
    return [m for m in request.messages if m["role"] == "tool"]


def test_a_result_after_assistant_text_is_sent_as_the_real_result(nanobot_run, fake_llm, configure):
    configure()
    _session(
        "cli:direct",
        [
            user("deploy it"),
            assistant(None, [tool_call("c1", "exec", {"command": "make deploy"})]),
            assistant("Deploying now, this takes a minute."),  # as nanobot 0.3.x files have it
            tool_result("c1", "exec", "deployed v42"),
            assistant("Deployed v42."),
        ],
    )
    fake_llm.script(Reply.text("ok"))
    result = nanobot_run("agent", "-m", "is it live?")
    assert result.returncode == 0, result.stderr
    sent = fake_llm.requests[0].messages
    call_at = next(i for i, m in enumerate(sent) if m.get("tool_calls"))
    assert sent[call_at + 1]["role"] == "tool" and sent[call_at + 1]["content"] == "deployed v42"
    assert "interrupted" not in json.dumps(sent)
    assert "Deploying now" in json.dumps(sent)  # the text is kept, after the result
    assert fake_llm.violations() == []


def test_an_empty_list_tool_result_goes_to_openai_servers_as_short_text(
    nanobot_run, fake_llm, configure
):
    configure()
    _session(
        "cli:direct",
        [
            user("touch it"),
            assistant(None, [tool_call("c1", "exec", {"command": "touch a"})]),
            {"role": "tool", "tool_call_id": "c1", "name": "exec", "content": []},
            assistant("Done."),
        ],
    )
    fake_llm.script(Reply.text("ok"))
    assert nanobot_run("agent", "-m", "next").returncode == 0
    [result] = _tool_messages(fake_llm.requests[0])
    assert result["content"] == "(no output)"


def _deepseek(home, base: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(
        json.dumps(
            {
                "agents": {
                    "defaults": {"model": "deepseek/deepseek-v4-pro", "reasoningEffort": "high"}
                },
                "providers": {"deepseek": {"apiKey": "sk-deepseek-test-123456", "apiBase": base}},
            }
        )
    )
    (home / "config.json").chmod(0o600)


def test_deepseek_thinking_gets_its_reasoning_back_with_each_tool_call(
    nanobot_run, fake_llm, isolated_home
):
    _deepseek(isolated_home, fake_llm.openai_base_url)
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})], reasoning="I should look at the files."),
        Reply.text("Two files.", reasoning="Counted them."),
        Reply.text("Still two."),
    )
    assert nanobot_run("agent", "-m", "what is here?").returncode == 0
    assert nanobot_run("agent", "-m", "and now?").returncode == 0
    for request in fake_llm.requests[1:]:  # within the turn, and in the next turn
        [call] = [m for m in request.messages if m.get("tool_calls")]
        assert call["reasoning_content"] == "I should look at the files."
        assert all(
            "reasoning_content" not in m for m in request.messages if not m.get("tool_calls")
        )
    assert fake_llm.requests[0].body["thinking"] == {"type": "enabled"}


def test_other_compatible_servers_get_no_reasoning_back(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.script(
        Reply.tool_calls([("list_dir", {"path": "."})], reasoning="I should look."),
        Reply.text("ok"),
    )
    assert nanobot_run("agent", "-m", "what is here?").returncode == 0
    assert "reasoning_content" not in json.dumps(fake_llm.requests[1].messages)


def test_a_memory_larger_than_the_window_is_cut_for_the_request_not_refused(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure(contextWindowTokens=8000)
    memory = isolated_home / "workspace" / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    text = "# Memory\n\n" + "".join(
        f"- fact {i}: the user likes project number {i} a lot\n" for i in range(3000)
    )
    memory.write_text(text)
    fake_llm.script(Reply.text("hello"))
    result = nanobot_run("agent", "-m", "hi")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hello"
    said = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(said) == 1 and "MEMORY.md" in said[0] and "`nanobot memory edit`" in said[0], (
        result.stderr
    )
    system = fake_llm.requests[0].messages[0]["content"]
    assert (
        "- fact 0:" in system and "- fact 2999:" not in system and "MEMORY.md is cut here" in system
    )
    assert memory.read_text() == text  # never on disk


def _line(output: str, name: str) -> str:
    return next(line for line in output.splitlines() if line[2:].startswith(name))


def test_memory_health_is_told_as_it_is(nanobot_run, configure, isolated_home):
    configure()
    memory_dir = isolated_home / "workspace" / "memory"
    memory_dir.mkdir(parents=True)
    fresh = nanobot_run("doctor", "--offline")
    assert (
        "nothing remembered yet" in _line(fresh.stdout, "memory") and "healthy" not in fresh.stdout
    )
    (memory_dir / "HISTORY.md").write_text(
        "[2026-01-05 10:00] A summary.\n\n[2026-01-06 10:00] RAW archive of 2 "
        "message(s) — summary failed: no answer from the model\n  user: hi\n"
    )
    failed = nanobot_run("doctor", "--offline")
    assert failed.returncode == 1 and "archived raw" in _line(failed.stdout, "memory")
    assert nanobot_run("memory", "check").returncode == 1


def test_damaged_memory_is_shown_escaped_and_the_hint_works(nanobot_run, configure, isolated_home):
    configure()
    memory = isolated_home / "workspace" / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True)
    memory.write_bytes(b"# Memory\n\n- likes \x1b[31mred\x07 and \xff bytes\x00\n")
    doctor = nanobot_run("doctor", "--offline")
    check = nanobot_run("memory", "check")
    for out in (doctor.stdout, check.stdout):
        assert "\x1b" not in out and "\x07" not in out and "\x00" not in out
        assert "restore 1" not in out  # no version exists: that command would answer "no version 1"
        assert "`nanobot memory edit`" in out
    term = Terminal("memory", "show", columns=100)
    try:
        term.wait_for("likes")
        term.finish()
    finally:
        term.close()
    assert "\\x1b[31mred\\x07" in term.text()
    memory.write_text("# Memory\n\n- a fact\n")
    assert nanobot_run("memory", "restore", "1").returncode != 0  # as said: nothing to restore yet


def test_doctor_checks_the_mcp_servers(nanobot_run, configure, isolated_home, tmp_path):
    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {"mcpServers": {"broken": {"command": str(tmp_path / "no-such-server")}}}
    path.write_text(json.dumps(data))
    result = nanobot_run("doctor", "--offline")
    assert result.returncode == 1
    assert "broken" in _line(result.stdout, "mcp") and "nanobot mcp list" in result.stdout


def test_config_bytes_are_read_kindly(nanobot_run, fake_llm, configure):
    path = configure()
    good = path.read_bytes()
    path.write_bytes(b"\xef\xbb\xbf" + good)  # a BOM, as Notepad writes it
    fake_llm.script(Reply.text("fine"))
    bom = nanobot_run("agent", "-m", "hi")
    assert bom.returncode == 0 and bom.stdout.strip() == "fine", bom.stderr
    path.write_bytes(good.replace(b'"custom/test-model"', b'"custom/test-m\xf6del"', 1))
    for command in (("agent", "-m", "hi"), ("doctor", "--offline"), ("status",)):
        bad = nanobot_run(*command)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr + bad.stdout
        assert (
            "line 1, byte" in bad.stderr + bad.stdout
            and "not UTF-8 (0xF6)" in bad.stderr + bad.stdout
        )


def test_environment_keys_in_any_case_and_a_word_for_the_unknown(nanobot_run, fake_llm, configure):
    configure()
    data_base = fake_llm.openai_base_url
    fake_llm.script(Reply.text("via env"))
    ok = nanobot_run(
        "agent",
        "-m",
        "hi",
        env={
            "NANOBOT_PROVIDERS__CUSTOM__APIBASE": data_base.replace("127.0.0.1", "localhost"),
            "NANOBOT_AGENTS__DEFAULTS__MAXTOKENS": "777",
        },
    )
    assert ok.returncode == 0, ok.stderr
    assert fake_llm.requests[0].body["max_tokens"] == 777
    assert fake_llm.requests[0].headers["host"].startswith("localhost")
    typo = nanobot_run("agent", "-m", "/status", env={"NANOBOT_AGENTS__DEFAULTS__MAX_TOKEN": "5"})
    assert "NANOBOT_AGENTS__DEFAULTS__MAX_TOKEN names no setting" in typo.stderr
    assert "did you mean NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS?" in typo.stderr


def test_a_linked_config_stays_a_link_and_status_says_where_it_points(
    nanobot_run, configure, isolated_home, tmp_path
):
    path = configure()
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "nanobot.json"
    target.write_bytes(path.read_bytes())
    target.chmod(0o600)
    path.unlink()
    path.symlink_to(target)
    status = nanobot_run("status", env={"COLUMNS": "300"})
    assert f"-> {target}" in status.stdout
    assert nanobot_run("onboard").returncode == 0  # completes the file with the missing defaults
    assert path.is_symlink() and "workspace" in target.read_text()


def _session_files(home) -> list[str]:
    return sorted(p.name for p in (home / "sessions").glob("*.jsonl"))


def test_a_damaged_first_line_is_never_imported_as_a_new_session(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure()
    fake_llm.script(*[Reply.text(f"answer {i}") for i in range(6)])
    assert nanobot_run("agent", "-m", "first").returncode == 0
    [name] = _session_files(isolated_home)
    path = isolated_home / "sessions" / name
    good = path.read_bytes()
    first, rest = good.split(b"\n", 1)
    damages = {
        "bom": b"\xef\xbb\xbf" + good,
        "crlf": good.replace(b"\n", b"\r\n"),
        "garbage": b"garbage\n" + rest,
    }
    for what, data in damages.items():
        path.write_bytes(data)
        for _ in range(2):
            listed = nanobot_run("session", "list", env={"COLUMNS": "200"})
            assert listed.returncode == 0, (what, listed.stderr)
            assert "imported" not in listed.stdout, (what, listed.stdout)
            rows = [line for line in listed.stdout.splitlines() if "cli:direct" in line]
            assert len(rows) == 1 and "cli:direct " in rows[0], (what, listed.stdout)
            assert (what == "garbage") == ("damaged" in rows[0]), (what, rows)
        assert _session_files(isolated_home) == [name], what
        fake_llm.reset()
        fake_llm.script(Reply.text("again"))
        again = nanobot_run("agent", "-m", "second")
        assert again.returncode == 0, (what, again.stderr)
        assert "first" in json.dumps(fake_llm.requests[0].messages), (
            what
        )  # the user's own conversation goes on
        assert _session_files(isolated_home) == [name], what
        path.write_bytes(good)


def test_a_folder_where_the_session_file_goes_is_named(nanobot_run, configure, isolated_home):
    configure()
    from nanobot.session.store import SessionStore

    folder = SessionStore().path_for("cli:direct")
    folder.mkdir(parents=True)
    result = nanobot_run("agent", "-m", "hi")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"{folder} is a folder" in result.stderr and "Move that folder" in result.stderr
    assert "could not be imported" not in result.stdout + result.stderr


def test_small_slips_of_the_one_shot_and_read_only_commands(
    nanobot_run, fake_llm, configure, isolated_home
):
    version = nanobot_run("--version")
    assert (
        version.stdout.strip()
        == "nanobot 0.1.0 (terminal assistant; reads nanobot 0.1.4-0.3.5 homes)"
    )
    for command in (("status",), ("memory", "show"), ("cron", "list")):
        nanobot_run(*command)
        assert not isolated_home.exists() or isolated_home.stat().st_mode & 0o777 == 0o700, command
    configure(contextWindowTokens=8192)
    quit_ = nanobot_run("agent", "-m", "/quit")
    assert quit_.returncode == 0 and quit_.stderr == "" and fake_llm.requests == []
    fake_llm.script(Reply.text("one"), Reply.text("two"))
    first, second = nanobot_run("agent", "-m", "a"), nanobot_run("agent", "-m", "b")
    assert first.returncode == second.returncode == 0
    assert (
        "the fixed prompt" in first.stderr and "the fixed prompt" not in second.stderr
    )  # once per config


def test_chat_status_mcp_hint_and_ctrl_c_at_the_question(fake_llm, configure, isolated_home):
    from tests.mcp.test_mcp import SERVER

    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {
        "mcpServers": {
            "notes": {
                "command": sys.executable,
                "args": [SERVER, "stdio"],
                "trusted": True,
                "enabledTools": ["add"],
            }
        }
    }
    path.write_text(json.dumps(data))
    fake_llm.script(
        Reply.tool_calls([("mcp_notes_add", {"a": 2, "b": 3})]),
        Reply.tool_calls([("read_file", {"path": "/etc/hostname"})]),
        Reply.text("never asked for"),
    )
    term = Terminal("agent", columns=120, rows=40)
    try:
        term.wait_for("you ›")
        term.send("/status")
        term.wait_for("none yet in this run")
        term.send("add two and three, then read the hostname")
        term.wait_for("a=2, b=3")  # every argument of an MCP call, not only the first
        term.wait_for("allow? [y/a/n]")
        term.child.send("\x03")
        term.wait_for("cancelled")
        term.wait_for_count("you ›", 3)
        term.send("/status")
        term.wait_for("notes ready (1 tool)")
        term.wait_for_count("you ›", 4)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    assert "prompt 0 ·" not in term.text()
    assert (
        len(fake_llm.requests) == 2
    )  # the turn stopped at the question: the model was not asked again


def test_a_stock_nanobot_035_config_loads_quietly_and_status_lists_what_is_not_used(
    nanobot_run, isolated_home
):
    from pathlib import Path

    stock = (
        Path(__file__).parents[1]
        / "fixtures"
        / "nanobot_homes"
        / "v0_3_5"
        / ".nanobot"
        / "config.json"
    )
    isolated_home.mkdir(parents=True)
    (isolated_home / "config.json").write_bytes(stock.read_bytes())
    (isolated_home / "config.json").chmod(0o600)
    for command in (("memory", "show"), ("session", "list"), ("cron", "list")):
        result = nanobot_run(*command)
        assert "unknown key" not in result.stderr, (command, result.stderr)
    data = json.loads(
        stock.read_text()
    )  # set, as a 0.3.5 user may have them: listed once, still not warned
    data["tools"]["exec"].update(
        sandbox="bwrap", sandboxRoBinds=["/opt"], pathPrepend="/opt/bin", allowedEnvKeys=["LANG"]
    )
    (isolated_home / "config.json").write_text(json.dumps(data))
    status = nanobot_run("status", env={"COLUMNS": "400"})
    assert "unknown key" not in status.stderr
    listed = status.stdout[status.stdout.index("ignored") :]
    for key in (
        "tools.exec.sandbox",
        "tools.exec.sandboxRoBinds",
        "tools.exec.pathPrepend",
        "tools.exec.allowedEnvKeys",
    ):
        assert listed.count(key + ":") + listed.count(key + ",") == 1, (key, listed)


def test_turns_made_in_nanobot_035_after_the_import_come_across_when_safe(
    nanobot_run, fake_llm, isolated_home
):
    import shutil
    from pathlib import Path

    fixture = Path(__file__).parents[1] / "fixtures" / "nanobot_homes" / "v0_3_5" / ".nanobot"
    shutil.copytree(fixture, isolated_home)
    env = {"NANOBOT_PROVIDERS__CUSTOM__API_BASE": fake_llm.openai_base_url}
    [source] = (isolated_home / "sessions").glob("*/*.jsonl")
    first = nanobot_run("session", "import", env=env)
    assert "session cli:direct: 2 messages" in first.stdout, first.stdout

    def nanobot_035_turn(user_text: str, answer: str) -> None:  # 0.3.5 rewrites the whole file
        lines = source.read_text().splitlines()
        meta = json.loads(lines[0])
        meta["updated_at"] = f"2026-12-02T10:{len(lines):02d}:00"
        lines[0] = json.dumps(meta)
        lines += [
            json.dumps({"role": "user", "content": user_text, "timestamp": "2026-12-02T10:00:00"}),
            json.dumps(
                {"role": "assistant", "content": answer, "timestamp": "2026-12-02T10:00:01"}
            ),
        ]
        source.write_text("\n".join(lines) + "\n")

    nanobot_035_turn("Miso is three years old.", "Three, noted.")
    again = nanobot_run("session", "import", env=env)
    assert "session cli:direct: 4 messages" in again.stdout, again.stdout
    shown = json.loads(nanobot_run("session", "show", "cli:direct", "--json").stdout)["messages"]
    assert [m["content"] for m in shown][-2:] == ["Miso is three years old.", "Three, noted."]

    fake_llm.script(Reply.text("Here too."))
    assert nanobot_run("agent", "-m", "hello from here", env=env).returncode == 0
    nanobot_035_turn("And she likes tuna.", "Tuna, noted.")
    apart = nanobot_run("session", "import", env=env)
    assert "kept apart" in apart.stdout and "2 new message(s) there" in apart.stdout, apart.stdout
    assert "kept apart" not in nanobot_run("session", "import", env=env).stdout  # said once
    shown = json.loads(nanobot_run("session", "show", "cli:direct", "--json").stdout)["messages"]
    assert "And she likes tuna." not in json.dumps(shown) and len(shown) == 6


LONG_ANSWER = (
    "**Reminder**: stretch your shoulders, drink some water, and look at something far away for "
    "twenty seconds; extraordinarily uncharacteristically comprehensive instructions follow tomorrow."
)


def test_reminders_render_like_answers_and_cron_speaks_its_flags(nanobot_run, fake_llm, configure):
    import time

    from nanobot.config import load_config
    from nanobot.cron.schedule import parse_schedule
    from nanobot.cron.store import JobStore

    cfg = load_config(configure())
    now = int(time.time() * 1000)
    job = JobStore(cfg.workspace_path()).add(
        parse_schedule(every_seconds=3600, now_ms=now - 3_700_000),
        "Nudge me",
        now_ms=now - 3_700_000,
    )
    listed = nanobot_run("cron", "list", env={"COLUMNS": "60"})
    assert job.id in listed.stdout, listed.stdout  # whole, as run/pause/remove need it
    every = nanobot_run("cron", "add", "-m", "x", "--every", "30")
    assert (
        every.returncode != 0
        and "--every must be" in every.stderr
        and "every_seconds" not in every.stderr
    )
    fake_llm.script(Reply.text(LONG_ANSWER))
    term = Terminal("agent", columns=60)
    try:
        term.wait_for("you ›")
        term.wait_for("far away")
        status = nanobot_run("status", env={"COLUMNS": "200"})
        assert "fired by chat" in status.stdout and "no runner now" not in status.stdout
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    screen = term.text()
    assert "**Reminder**" not in screen  # rendered, not raw markdown
    words = " ".join(screen.split())
    for word in LONG_ANSWER.replace("**", "").split():
        assert word in words.split(), word  # never broken across lines


def test_serve_stopped_by_ctrl_c_exits_130(configure):
    configure()
    term = Terminal("serve")
    try:
        term.wait_for("nanobot serve ·")
        term.child.send("\x03")
        assert term.finish() == 130
    finally:
        term.close()


def test_a_read_only_workspace_is_said_once_with_what_to_do(
    nanobot_run, fake_llm, configure, tmp_path
):
    from tests.cli.disks import remount_read_only, tmpfs

    with tmpfs(tmp_path / "ro-workspace", size="1m") as workspace:
        (workspace / "memory").mkdir()
        configure(workspace=str(workspace))
        remount_read_only(workspace)
        fake_llm.script(*[Reply.text(f"answer {i}") for i in range(4)])
        first, second = nanobot_run("agent", "-m", "one"), nanobot_run("agent", "-m", "two")
        assert first.returncode == second.returncode == 0, first.stderr
        said = [line for line in first.stderr.splitlines() if line.strip()]
        assert (
            len(said) == 1 and "is read-only" in said[0] and "agents.defaults.workspace" in said[0]
        ), said
        assert "Errno" not in first.stderr and second.stderr.strip() == ""
        term = Terminal("agent", columns=200)
        try:
            term.wait_for("you ›")
            for text in ("three", "four"):
                term.send(text)
            term.wait_for("answer 3")
            term.send("/exit")
            term.finish()
        finally:
            term.close()
        assert term.text().count("is read-only") == 1 and "Errno 30" not in term.text()
