"""Approvals outside the chat: one-shot refusals name what allows them, --approve and
tools.autoApprove allow a kind, and every decision is recorded in the session, never sent."""

from __future__ import annotations

import asyncio
import json

import pytest
from nanobot.approvals import SessionApprover
from nanobot.errors import UsageError
from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore
from nanobot.tools.approval import ApprovalRequest, Decision

from cli_runner import run_cli
from hostile_env import hostile, yes  # noqa: F401  (fixtures, tests/hostile_env.py)


def _cli(*args):
    return run_cli(*args, env={"COLUMNS": "300"})


def test_one_shot_refuses_with_the_flag_that_allows_it_then_the_flag_allows_it(hostile):
    target = hostile.home / "outside.txt"
    hostile.fake.script(
        Reply.tool_calls([("write_file", {"path": str(target), "content": "hi"})]), Reply.text("ok")
    )
    first = _cli("agent", "-m", "write it")
    assert first.returncode == 0
    assert not target.exists()
    refusal = next(m for m in hostile.fake.requests[1].messages if m.get("role") == "tool")[
        "content"
    ]
    if hostile.restricted:
        assert "restrictToWorkspace" in refusal
        return
    assert "--approve file-outside" in refusal and "tools.autoApprove" in refusal
    # the person running the command is told too, after the answer
    assert "1 risky action(s) refused" in first.stderr and "--approve file-outside" in first.stderr

    hostile.fake.script(
        Reply.tool_calls([("write_file", {"path": str(target), "content": "hi"})]), Reply.text("ok")
    )
    assert _cli("agent", "-m", "write it", "--approve", "file-outside").returncode == 0
    assert target.read_text() == "hi"
    shown = _cli("session", "show", "cli:direct").stdout
    assert "refused (file-outside, by nobody to ask (one-shot mode))" in shown
    assert "allowed (file-outside, by --approve / tools.autoApprove)" in shown


def test_auto_approve_in_the_config_allows_only_its_kind(hostile):
    data = json.loads(hostile.config.read_text())
    data["tools"]["autoApprove"] = ["memory-edit"]
    hostile.config.write_text(json.dumps(data))
    hostile.run(
        [
            ("write_file", {"path": "memory/MEMORY.md", "content": "- likes tea\n"}),
            ("write_file", {"path": ".git/hooks/post-merge", "content": "evil\n"}),
        ]
    )
    assert (hostile.workspace / "memory" / "MEMORY.md").read_text() == "- likes tea\n"
    assert not (hostile.workspace / ".git" / "hooks" / "post-merge").exists()


def test_unknown_kind_is_a_clear_usage_error(hostile):
    result = _cli("agent", "-m", "x", "--approve", "everything")
    assert result.returncode == 2 and "unknown approval kind 'everything'" in result.stderr
    assert "file-outside" in result.stderr


def test_decisions_are_recorded_kept_on_rewrite_and_never_sent(isolated_home):
    store = SessionStore()
    session = store.open("cli:direct")
    store.append(
        session, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    )
    asked = []

    class Ask:
        async def approve(self, request):
            asked.append(request)
            return Decision(True, always=True)

    approver = SessionApprover(Ask(), record=lambda **f: store.record_decision(session, **f))
    request = ApprovalRequest(
        "persistence", "write_file wants to write ~/.bashrc", always_key="persistence:x"
    )

    async def twice():
        return await asyncio.gather(approver.approve(request), approver.approve(request))

    assert all(d.allowed for d in asyncio.run(twice()))
    assert len(asked) == 1  # the second, concurrent request waited and was covered by "always"
    store.rewrite(session)
    store.close(session)
    loaded = store.load("cli:direct")
    assert [d["by"] for d in loaded.decisions] == [
        "the user (always for this session)",
        "an earlier 'always' in this session",
    ]
    assert [m["content"] for m in loaded.get_history()] == ["hi", "hello"]


def test_check_kinds_rejects_typos():
    from nanobot.approvals import check_kinds

    assert check_kinds(["file-outside", "all"], "x") == {"file-outside", "all"}
    with pytest.raises(UsageError):
        check_kinds(["file-outsid"], "--approve")
