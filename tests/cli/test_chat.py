"""One-shot slash commands (nanobot/cli/chat.py): stdout carries the command's result, as it carries a
turn's answer; progress notices, warnings and errors go to stderr, so a script capturing stdout gets
only the result."""

from __future__ import annotations

from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import is_consolidation


def test_compact_prints_its_receipt_on_stdout_and_its_notices_on_stderr(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.summarise = True
    fake_llm.responder = lambda req: Reply.text("sure")
    for text in ("my invoice is BILL-4821", "the deadline is Friday", "thanks"):
        assert nanobot_run("agent", "-m", text).returncode == 0
    result = nanobot_run("agent", "-m", "/compact")
    assert result.returncode == 0, result.stderr
    assert "compacting 4 messages into memory" in result.stderr and "compaction done" in result.stderr
    assert "compacting" not in result.stdout and "compaction done" not in result.stdout
    out = result.stdout.splitlines()
    assert out[0].startswith("archived 4 message(s) in HISTORY.md")  # the receipt, then the checkpoint
    assert out[1].startswith("working state (version 1")
    assert sum(is_consolidation(r) for r in fake_llm.requests) == 1


def test_a_failed_compact_says_so_on_stderr_only(nanobot_run, fake_llm, configure):
    configure()
    fake_llm.responder = lambda req: Reply.text("I would rather not summarise")  # never calls save_memory
    for text in ("first", "second"):
        assert nanobot_run("agent", "-m", text).returncode == 0
    result = nanobot_run("agent", "-m", "/compact")
    assert "memory consolidation failed" in result.stderr
    assert "memory consolidation failed" not in result.stdout and "compacting" not in result.stdout
