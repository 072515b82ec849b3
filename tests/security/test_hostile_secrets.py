"""Secrets never leave: a pasted key, a key echoed in an error body, keys in tool output,
and the modes of everything nanobot keeps under its home."""

from __future__ import annotations

import json
import stat

from nanobot.fakellm import Reply

from cli_runner import run_cli
from hostile_env import hostile, yes  # noqa: F401  (fixtures, tests/hostile_env.py)

PASTED = "sk-proj-PASTEDpasted0123456789abcdefghijKLMNOP"


def test_a_pasted_key_reaches_neither_the_provider_nor_the_disk(hostile):
    outcome = hostile.run(
        [("read_file", {"path": "notes.md"})],
        message=f"remember my key {PASTED} and write it to notes.md",
    )
    assert outcome.content == "done"
    sent = hostile.requests_text()
    assert PASTED not in sent and "remember my key sk-proj-[REDACTED]" in sent
    assert PASTED not in hostile.saved_text()


def test_the_user_is_told_once_that_a_key_was_masked(hostile):
    from nanobot.agent.events import Notice

    seen = []
    hostile.fake.script(Reply.text("ok"))

    async def go():
        from nanobot.app import open_assistant
        from nanobot.config import load_config

        assistant = open_assistant(load_config(hostile.config), "cli:direct", stream=False)
        try:
            await assistant.conversation.send(f"my key: {PASTED}", emit=seen.append)
        finally:
            await assistant.aclose()

    import asyncio

    asyncio.run(go())
    notices = [e.text for e in seen if isinstance(e, Notice) and "REDACTED" in e.text]
    assert len(notices) == 1 and "config" in notices[0] and PASTED not in notices[0]


def test_keys_in_tool_output_are_masked_exactly_and_by_shape(hostile):
    KEY = hostile.key
    (hostile.workspace / "dump.txt").write_text(
        f"configured={KEY}\nother: ghp_0123456789abcdefghijABCDEFGHIJklmnop\n"
    )
    hostile.run([("read_file", {"path": "dump.txt"})])
    sent = hostile.requests_text()
    assert KEY not in sent and "ghp_0123456789" not in sent and "configured=[REDACTED]" in sent
    assert KEY not in hostile.saved_text()


def _run_cli(args, env_extra=None, input_text=None):
    return run_cli(*args, env=env_extra, input=input_text)


def test_a_key_echoed_in_a_401_body_is_not_printed_or_saved(hostile):
    KEY = hostile.key
    hostile.fake.script(
        Reply.error(401, message=f"Incorrect API key provided: {KEY}. Also {PASTED}.")
    )
    result = _run_cli(["agent", "-m", "hello"])
    assert result.returncode == 1
    assert "401" in result.stderr  # the user still learns what happened
    assert KEY not in result.stdout + result.stderr and PASTED not in result.stdout + result.stderr
    assert KEY not in hostile.saved_text() and PASTED not in hostile.saved_text()


def test_json_output_masks_tool_call_arguments(hostile):
    hostile.fake.script(
        Reply.tool_calls([("write_file", {"path": "k.txt", "content": PASTED})]), Reply.text("ok")
    )
    result = _run_cli(["agent", "-m", "go", "--json"])
    assert result.returncode == 0, result.stderr
    assert (
        PASTED not in result.stdout
        and json.loads(result.stdout)["tool_calls"][0]["name"] == "write_file"
    )


def test_home_is_0700_and_everything_kept_in_it_0600(hostile):
    # a home left 0755/0644 by an older version is tightened on the next run
    hostile.nanobot_home.chmod(0o755)
    hostile.config.chmod(0o644)
    hostile.run([("list_dir", {"path": "."})], message=f"a turn with a key {PASTED}")
    from nanobot.cli.input_history import MaskedFileHistory

    MaskedFileHistory(hostile.nanobot_home / "input_history").append_string(f"typed {PASTED}")
    assert PASTED not in (hostile.nanobot_home / "input_history").read_text()
    checked = 0
    for path in [hostile.nanobot_home, *hostile.nanobot_home.rglob("*")]:
        if path.is_relative_to(hostile.workspace):
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path} is {oct(mode)}"
        checked += 1
    names = {p.name for p in hostile.nanobot_home.rglob("*")}
    assert "input_history" in names and any(n.endswith(".jsonl") for n in names)
    assert any(n.endswith(".lock") for n in names) and checked >= 5


def test_keys_in_exec_output_are_masked(hostile):
    (hostile.workspace / ".env").write_text(
        f"OPENAI_API_KEY={PASTED}\nSTRIPE=sk_live_4eC39HqLyjWDarjtT1zdp7dc\n"
    )
    hostile.run(
        [("exec", {"command": "cat .env; printf 'ghp_%s\\n' 0123456789abcdefghijABCDEFGHIJklmnop"})]
    )
    sent, saved = hostile.requests_text(), hostile.saved_text()
    for secret in (PASTED, "4eC39HqLyjWDarjtT1zdp7dc", "ghp_0123456789abcdefghij"):
        assert secret not in sent and secret not in saved
    assert "sk_live_[REDACTED]" in sent  # the command ran; only the secrets were hidden


def test_session_show_masks_keys_saved_by_an_older_version(hostile):
    sessions = hostile.nanobot_home / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    from nanobot.session.store import SessionStore

    path = SessionStore().path_for("old:one")
    path.write_text(
        json.dumps({"_type": "metadata", "key": "old:one", "last_consolidated": 0})
        + "\n"
        + json.dumps({"role": "user", "content": f"key {PASTED}"})
        + "\n"
    )
    for args in (["session", "show", "old:one"], ["session", "show", "old:one", "--json"]):
        result = _run_cli(args)
        assert result.returncode == 0, result.stderr
        assert PASTED not in result.stdout and "sk-proj-[REDACTED]" in result.stdout


def test_keys_in_the_workspace_bootstrap_files_and_a_hand_edited_memory_are_not_sent(hostile):
    (hostile.workspace / "USER.md").write_text(f"My OpenAI key: {PASTED}\n")
    (hostile.workspace / "memory").mkdir()
    (hostile.workspace / "memory" / "MEMORY.md").write_text(
        "- deploy token: ghp_0123456789abcdefghijABCDEFGHIJklmnop\n"
    )
    hostile.run([("list_dir", {"path": "."})])
    sent = hostile.requests_text()
    assert (
        PASTED not in sent
        and "ghp_0123456789" not in sent
        and "My OpenAI key: sk-proj-[REDACTED]" in sent
    )


def test_a_hand_made_config_in_a_private_home_is_tightened_and_the_workspace_left_alone(hostile):
    from nanobot.paths import secure_home

    hostile.nanobot_home.chmod(0o700)
    hostile.config.chmod(0o644)
    (hostile.workspace / "script.sh").write_text("#!/bin/sh\n")
    (hostile.workspace / "script.sh").chmod(0o755)
    secure_home(keep_open=hostile.workspace)
    assert stat.S_IMODE(hostile.config.stat().st_mode) == 0o600
    assert stat.S_IMODE((hostile.workspace / "script.sh").stat().st_mode) == 0o755
