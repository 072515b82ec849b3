"""What the user sees in a real 80-column terminal: long markdown answers are shown in full, once."""

from __future__ import annotations

import re

import pytest
from nanobot.fakellm import Reply
from tests.cli.terminal import Terminal

SECTIONS = 9


def long_answer() -> str:
    """About 200 lines of markdown: long paragraphs, code blocks and tables, each token unique."""
    parts = []
    for i in range(SECTIONS):
        parts.append(f"## Section {i}")
        parts.append(" ".join(f"p{i}w{j}" for j in range(45)))  # ~270 characters on one line
        parts.append("- item " + " ".join(f"l{i}w{j}" for j in range(25)))
        long_code = f"c{i}x8 = 8  # " + "padding " * 14 + f"k{i}e"  # wider than the terminal
        parts.append(
            "```python\n"
            + "\n".join([*(f"c{i}x{k} = {k}  # a code line" for k in range(8)), long_code])
            + "\n```"
        )
        long_cell = " ".join(f"n{i}c{j}" for j in range(20))  # a cell wider than its column
        parts.append(
            "| name | value |\n|---|---|\n"
            + "\n".join(f"| t{i}r{k} | v{k} |" for k in range(4))
            + f"\n| t{i}r4 | {long_cell} |"
        )
    return "\n\n".join(parts) + "\n"


def tokens(text: str) -> list[str]:
    return re.findall(r"\b(?:p\d+w\d+|l\d+w\d+|c\d+x\d+|k\d+e|t\d+r\d+|n\d+c\d+)\b", text)


def assert_whole_answer_visible_once(lines: list[str], answer: str) -> None:
    assert all(len(line) <= 80 for line in lines)
    assert tokens("\n".join(lines)) == tokens(answer)  # every piece, once, in order


@pytest.fixture
def long_reply(configure, fake_llm):
    configure()
    answer = long_answer()
    assert len(answer.splitlines()) >= 200
    fake_llm.script(Reply.text(answer, chunks=120))
    return answer


def test_one_shot_markdown_answer_is_visible_in_full_at_80_columns(long_reply):
    term = Terminal("agent", "-m", "explain everything")
    try:
        assert term.finish() == 0
        assert_whole_answer_visible_once(term.lines(), long_reply)
    finally:
        term.close()


def test_chat_markdown_answer_is_visible_in_full_at_80_columns(long_reply):
    term = Terminal("agent")
    try:
        term.wait_for("you ›")
        term.send("explain everything")
        term.wait_for(f"n{SECTIONS - 1}c19")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        assert term.finish() == 0
        assert_whole_answer_visible_once(term.lines(), long_reply)
    finally:
        term.close()


def test_chat_banner_and_status_wrap_between_words_at_80_columns(configure):
    from nanobot.cli.status_view import exec_line
    from nanobot.config import load_config

    # a small window makes the long "fixed prompt" warning appear at start-up and in /status (at 8192 the
    # fixed prompt is about 50% of the budget, so whether it warned hung on the length of the temp path)
    configure(contextWindowTokens=7168, maxTokens=2048)
    expected = exec_line(load_config(None))
    term = Terminal("agent")
    try:
        term.wait_for("you ›")
        term.send("/status")
        term.wait_for("approvals")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        assert term.finish() == 0
        lines = term.lines()
    finally:
        term.close()
    assert all(len(line) <= 80 for line in lines)
    words = " ".join(line.strip() for line in lines).split()
    joined = " ".join(words)
    # each long line reads whole when its screen lines are joined: no word was cut at the edge
    assert joined.count(" ".join(expected.split())) == 2  # the banner and the /status row
    assert "little room is left for the conversation" in joined
