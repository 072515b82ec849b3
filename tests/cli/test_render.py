"""The renderer of a turn's events, on a piped console and on a terminal's screen."""

from __future__ import annotations

import io
import threading
import time

import pyte
from nanobot.agent.events import Notice, TextDelta, ToolStarted, TurnDone, TurnOutcome
from nanobot.cli.consoles import stdout_console
from nanobot.cli.render import Renderer
from rich.console import Console


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


class _SlowMainThreadConsole(Console):
    """A terminal console whose main thread renders slowly (a loaded machine): the spinner's
    refresh thread then draws its first frame while a line printed over it is being rendered."""

    def render(self, renderable, options=None):
        if threading.current_thread() is threading.main_thread():
            time.sleep(0.05)
        yield from super().render(renderable, options)


def test_a_notice_in_the_spinners_first_tick_is_a_line_of_its_own():
    # CI showed "⠋ thinking…the model returned an empty answer; try rephrasin" / "g or ask": a frame
    # drawn while the notice was rendered stayed in front of it and the terminal cut the word
    out = io.StringIO()
    console = _SlowMainThreadConsole(
        file=out, force_terminal=True, force_interactive=True, width=60, color_system=None
    )
    renderer = Renderer(console, markdown=False)
    renderer.thinking()
    renderer(Notice("the model returned an empty answer; try rephrasing or ask again", "warning"))
    time.sleep(0.2)  # the spinner is back, and draws
    renderer(TurnDone(TurnOutcome(content="")))
    screen = pyte.Screen(60, 10)
    pyte.Stream(screen).feed(out.getvalue().replace("\n", "\r\n"))  # as a pty's onlcr does
    lines = [line.rstrip() for line in screen.display if line.strip()]
    assert lines == ["the model returned an empty answer; try rephrasing or ask", "again"], lines
    assert out.getvalue().count("thinking…") >= 2  # it came back after the notice
