"""Streaming in a real terminal against the fake LLM server: an answer stopped by Ctrl-C is kept,
a stream dropped mid-answer is marked and retried on a fresh line, long lines wrap at words."""

from __future__ import annotations

import re

import pytest
from nanobot.agent.loop import INTERRUPTED_MARK
from nanobot.fakellm import Reply
from nanobot.messages import text_of
from nanobot.session.store import SessionStore
from tests.cli.terminal import Terminal

RETRY_FAST = {"NANOBOT_RETRY_BASE_DELAY": "0.01"}


def _words(count: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(count))


def test_ctrl_c_mid_answer_keeps_what_was_shown_marked_as_interrupted(configure, fake_llm):
    configure()
    slow = _words(40, "w")
    fake_llm.script(Reply.text(slow, chunks=40, pace=0.25), Reply.text("second answer"))
    term = Terminal("agent", env=RETRY_FAST)
    try:
        term.wait_for("you ›")
        term.send("tell me a long story")
        term.wait_for("w6")
        term.child.send("\x03")
        term.wait_for("cancelled (the part shown is saved, marked as interrupted)")
        term.wait_for_count("you ›", 2)
        term.send("and then?")
        term.wait_for("second answer")
        term.wait_for_count("you ›", 3)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    screen_words = set(re.findall(r"\bw\d+\b", term.text()))
    # on disk: user, the interrupted answer (exactly the words the user saw, then the marker), user, answer
    messages = SessionStore().load("cli:direct").messages
    roles = [m["role"] for m in messages]
    assert roles == ["user", "assistant", "user", "assistant"], roles
    kept = text_of(messages[1]["content"])
    assert kept.endswith(INTERRUPTED_MARK)
    kept_words = re.findall(r"\bw\d+\b", kept)
    assert kept_words and set(kept_words) == screen_words
    assert len(kept_words) < 40  # the rest never arrived
    # the next request carries it, between the two user messages, and is valid
    sent = fake_llm.requests[-1].messages
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert INTERRUPTED_MARK in text_of(sent[2]["content"])
    fake_llm.assert_all_valid()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_stream_dropped_mid_answer_is_marked_and_retried_on_a_fresh_line(
    configure, fake_llm, protocol
):
    configure(protocol)
    fake_llm.script(
        Reply.cut_stream(
            "The stream dies in the mid", chunks=["The stream ", "dies in the ", "mid"]
        ),
        Reply.text("Full answer arrives."),
    )
    term = Terminal("agent", env=RETRY_FAST)
    try:
        term.wait_for("you ›")
        term.send("hello")
        term.wait_for("Full answer arrives.")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    lines = term.lines()
    text = "\n".join(lines)
    assert "midFull" not in text
    assert "could not connect" not in text  # the connection was made, then dropped
    at = next(i for i, line in enumerate(lines) if "dies in the" in line)
    after = "\n".join(lines[at + 1 :])
    # the half answer is followed by a marker, then the honest retry line, then the new answer on its own line
    assert lines[at].rstrip().endswith("mid")
    assert (
        after.index("cut off here")
        < after.index("the connection dropped mid-answer")
        < after.index("retrying")
        < after.index("Full answer arrives.")
    )
    assert any(line.strip() == "Full answer arrives." for line in lines)
    messages = SessionStore().load("cli:direct").messages
    assert [text_of(m["content"]) for m in messages if m["role"] == "assistant"] == [
        "Full answer arrives."
    ]


def _joined(lines: list[str]) -> str:
    """The screen's words in order: a word the terminal cut at its edge reads as two here."""
    return " ".join(" ".join(lines).split())


def test_system_lines_wrap_between_words_at_60_columns(configure, fake_llm):
    configure()
    refusal = (
        "the request was refused because the conversation mentions MEMORY.md and "
        "HEARTBEAT.md together with unusually_long_identifiers_that_do_not_fit"
    )
    fake_llm.script(
        Reply.cut_stream("Half of", chunks=["Half ", "of"]),
        Reply.text("Whole."),
        Reply.error(400, message=refusal),
        Reply.text(""),
    )
    term = Terminal("agent", columns=60, env=RETRY_FAST)
    try:
        term.wait_for("you ›")
        term.send("first")
        term.wait_for("Whole.")
        term.wait_for_count("you ›", 2)
        term.send("second")
        term.wait_for("hint")
        term.wait_for_count("you ›", 3)
        term.send("third")
        term.wait_for("rephrasing")
        term.wait_for_count("you ›", 4)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    joined = _joined(term.lines())
    for said in (
        "the answer above was cut off here",
        "the connection dropped mid-answer (peer closed connection without sending complete message body",
        "retrying in 0s (attempt 2)",
        refusal,
        "The provider rejected the request as malformed; this is a bug in nanobot if it repeats",
        "the model returned an empty answer; try rephrasing or ask again",
    ):
        assert said in joined, said


def test_a_long_paragraph_wraps_while_it_streams(configure, fake_llm):
    configure()
    paragraph = _words(40, "z")  # about 150 characters on one line: two screen lines at 80 columns
    fake_llm.script(
        Reply.text(
            paragraph + " tail\n\nNext paragraph.",
            chunks=[paragraph, " tail", "\n\nNext paragraph."],
            pace=2.0,
        )
    )
    term = Terminal("agent", env=RETRY_FAST)
    try:
        term.wait_for("you ›")
        term.send("go")
        term.wait_for(
            "z39"
        )  # the end of the paragraph is on screen while it is still being written
        assert "tail" not in term.drawn()
        lines = [line for line in term.lines() if re.search(r"\bz\d+\b", line)]
        assert len(lines) >= 2 and all(len(line) <= 80 for line in lines)
        term.wait_for("Next paragraph.")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    # once finished, every word once, in order
    assert re.findall(r"\bz\d+\b", term.text()) == paragraph.split()


def test_ctrl_c_under_a_heading_leaves_no_stray_copy_of_it(configure, fake_llm):
    configure()
    answer = "## Plan of attack\n\n" + _words(60, "h")
    fake_llm.script(
        Reply.text(
            answer,
            chunks=["## Plan of attack\n\n", *(f"h{i} " for i in range(59)), "h59"],
            pace=0.2,
        )
    )
    term = Terminal("agent", env=RETRY_FAST)
    try:
        term.wait_for("you ›")
        term.send("plan it")
        term.wait_for("h30")
        term.child.send("\x03")
        term.wait_for("cancelled")
        term.wait_for_count("you ›", 2)
        term.send("/exit")
        term.finish()
    finally:
        term.close()

    assert term.text().count("Plan of attack") == 1
    assert "##" not in term.text()


def test_ctrl_c_mid_answer_in_one_shot_mode_keeps_what_was_shown_too(configure, fake_llm):
    configure()
    fake_llm.script(Reply.text(_words(40, "w"), chunks=40, pace=0.25))
    term = Terminal("agent", "-m", "tell me a long story", env=RETRY_FAST)
    try:
        term.wait_for("w6")
        term.child.send("\x03")
        assert term.finish() == 130
    finally:
        term.close()
    messages = SessionStore().load("cli:direct").messages
    assert [m["role"] for m in messages] == ["user", "assistant"]
    kept = text_of(messages[1]["content"])
    assert kept.endswith(INTERRUPTED_MARK)
    assert set(re.findall(r"\bw\d+\b", kept)) == set(re.findall(r"\bw\d+\b", term.text()))


def test_ctrl_c_during_a_retry_wait_keeps_the_half_answer_marked_as_interrupted(
    configure, fake_llm
):
    configure()
    fake_llm.script(
        Reply.cut_stream(
            "The stream dies in the mid", chunks=["The stream ", "dies in the ", "mid"]
        ),
        Reply.text("second answer"),
    )
    term = Terminal("agent", env={"NANOBOT_RETRY_BASE_DELAY": "20"})  # a long wait before the retry
    try:
        term.wait_for("you ›")
        term.send("hello")
        term.wait_for("retrying in")
        term.child.send("\x03")
        term.wait_for("cancelled (the part shown is saved, marked as interrupted)")
        term.wait_for_count("you ›", 2)
        term.send("and then?")
        term.wait_for("second answer")
        term.wait_for_count("you ›", 3)
        term.send("/exit")
        term.finish()
    finally:
        term.close()
    assert len(fake_llm.requests) == 2  # the retry never went out; the next question did
    messages = SessionStore().load("cli:direct").messages
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert text_of(messages[1]["content"]) == f"The stream dies in the mid\n\n{INTERRUPTED_MARK}"
    sent = fake_llm.requests[-1].messages
    assert [m["role"] for m in sent[1:]] == ["user", "assistant", "user"]
    assert INTERRUPTED_MARK in text_of(sent[2]["content"])
    fake_llm.assert_all_valid()


def test_a_slow_compact_shows_a_spinner_and_ctrl_c_leaves_one_clean_line(configure, fake_llm):
    configure()
    fake_llm.script(
        Reply.text("noted your cat"),
        Reply.text("noted your dog"),
        Reply.tool_calls(
            [("save_memory", {"history_entry": "[2026-01-05 10:00] A cat.", "memory_update": "x"})],
            delay=60,
        ),
    )
    term = Terminal("agent", env=RETRY_FAST)
    try:
        term.wait_for("you ›")
        term.send("I have a cat")
        term.wait_for("noted your cat")
        term.send("and a dog")
        term.wait_for("noted your dog")
        term.send("/compact")
        term.wait_for("(Ctrl-C to stop)")  # the spinner says it is alive, and how to stop it
        term.child.send("\x03")
        term.wait_for("cancelled")
        term.wait_for_count("you ›", 4)
    finally:
        term.close()
    # the spinner's line is gone with the ^C the terminal echoed: "cancelled" stands alone
    assert "cancelled" in term.lines() and "^C" not in term.text()
