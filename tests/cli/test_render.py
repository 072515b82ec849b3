"""The renderer of a turn's events, on a plain (piped) console."""

from __future__ import annotations

import io

from nanobot.agent.events import Notice, TextDelta, ToolStarted, TurnDone, TurnOutcome
from nanobot.cli.consoles import stdout_console
from nanobot.cli.render import Renderer


def test_a_notice_that_comes_while_an_answer_streams_waits_for_its_end():
    # a helper finishing mid-answer cut the answer's line in two around its notice
    out = io.StringIO()
    renderer = Renderer(stdout_console(out), markdown=False)
    for event in (
        TextDelta("The schema diff "),
        Notice("subagent 'res0' (sa-1) completed after 1 step"),
        TextDelta("is ready."),
        ToolStarted("c1", "exec", 'exec("ls")'),
        TextDelta("Done."),
        TurnDone(TurnOutcome(content="Done.")),
    ):
        renderer(event)
    assert out.getvalue().splitlines() == [
        "The schema diff is ready.",
        "subagent 'res0' (sa-1) completed after 1 step",
        '  ↳ exec("ls")',
        "Done.",
    ]


def test_a_notice_between_answers_is_shown_at_once():
    out = io.StringIO()
    renderer = Renderer(stdout_console(out), markdown=False)
    renderer(Notice("compacting 4 messages into memory…"))
    assert out.getvalue() == "compacting 4 messages into memory…\n"
