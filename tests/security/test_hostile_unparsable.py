"""Issue 32: a command line nanobot's parser cannot read (nanobot/policy/commands.py) escapes the
deny rules and the accident list, which judge the commands it runs; so it needs approval by itself.
The line below is one dash runs in part (its first line) although the parser refuses the whole:
judged by whether that first line ran."""

from __future__ import annotations

import json

import pytest
from nanobot.fakellm import Reply
from nanobot.sandbox import choose
from test_hostile_protected import No

from canaries import by_mechanism, confinement_or_skip
from cli_runner import run_cli
from hostile_env import hostile, yes  # noqa: F401  (fixtures, tests/hostile_env.py)

LINE = 'touch ran\necho "unterminated'


def _exec_config(hostile, **exec_cfg) -> None:
    data = json.loads(hostile.config.read_text())
    data["tools"]["exec"] = exec_cfg
    hostile.config.write_text(json.dumps(data))


@pytest.mark.parametrize("mechanism", by_mechanism(["bwrap", "landlock"]))
def test_one_shot_refuses_an_unreadable_line_naming_the_flag_and_the_flag_allows_it(
    hostile, mechanism
):
    confinement_or_skip(mechanism)
    _exec_config(hostile, confinement=mechanism)
    ran = hostile.workspace / "ran"
    hostile.fake.script(Reply.tool_calls([("exec", {"command": LINE})]), Reply.text("ok"))
    first = run_cli("agent", "-m", "run it", env={"COLUMNS": "300"})
    assert first.returncode == 0 and not ran.exists()
    refusal = next(m for m in hostile.fake.requests[1].messages if m.get("role") == "tool")[
        "content"
    ]
    assert "--approve exec-unparsable" in refusal
    assert (
        "unterminated double quote" in first.stderr and "--approve exec-unparsable" in first.stderr
    )  # the user too
    hostile.fake.script(Reply.tool_calls([("exec", {"command": LINE})]), Reply.text("ok"))
    assert run_cli("agent", "-m", "run it", "--approve", "exec-unparsable").returncode == 0
    assert ran.exists()


def test_the_chat_asks_once_with_the_reason(hostile, yes):
    if not choose("auto").confined:
        pytest.skip("no sandbox: every command is asked about as exec-unconfined")
    ran = hostile.workspace / "ran"
    said_no = No()
    hostile.run(
        [("exec", {"command": LINE}), ("exec", {"command": "echo fine > fine.txt"})], ask=said_no
    )
    assert not ran.exists() and (hostile.workspace / "fine.txt").exists()
    assert [r.kind for r in said_no.requests] == ["exec-unparsable"]
    assert "cannot read this command line (unterminated double quote" in said_no.requests[0].summary
    said_yes = yes()
    hostile.run([("exec", {"command": LINE})], ask=said_yes)
    assert ran.exists() and [r.kind for r in said_yes.requests] == ["exec-unparsable"]


def test_without_a_sandbox_by_choice_nothing_is_asked(hostile):
    _exec_config(hostile, confinement="none")  # the user chose: commands run as they are, unasked
    said_no = No()
    hostile.run([("exec", {"command": LINE})], ask=said_no)
    assert said_no.requests == [] and (hostile.workspace / "ran").exists()
