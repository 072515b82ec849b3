"""tests/cli/terminal.py's screen shows what pyte's HistoryScreen shows: the scrollback and the
screen, line for line, however the output is split into reads."""

from __future__ import annotations

import pyte
from tests.cli.terminal import Terminal

SPINNER = "|/-\\"

# what the chat writes: wrapped prose, colours, a spinner drawn over itself, a scroll region,
# wide characters, erased lines and screens, the scrollback cleared, and enough lines to scroll
OUTPUT = (
    "".join(f"line {i} \x1b[1mbold\x1b[0m {'word ' * (i % 23)}\r\n" for i in range(120))
    + "".join(f"\r\x1b[2K{SPINNER[i % 4]} thinking" for i in range(40))
    + "\r\x1b[2K答えは\x1b[32m緑\x1b[0mです\r\n"
    + "\x1b[5;20r\x1b[20;1H"
    + "".join(f"in the region {i}\r\n" for i in range(30))
    + "\x1b[r\x1b[24;1H"
    + "\x1b[3J"
    + "".join(f"after the clear {i}\r\n" for i in range(40))
    + "\x1b[2J\x1b[Hon a cleared screen\r\n"
    + "x" * 300
    + "\r\nend"
).encode()


def _history_screen_lines(screen: pyte.HistoryScreen, columns: int, rows: int) -> list[str]:
    def row(line) -> str:
        return "".join(line[x].data for x in range(columns)).rstrip()

    lines = [row(line) for line in screen.history.top]
    lines += [row(screen.buffer[y]) for y in range(rows)]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def test_the_scrollback_screen_shows_what_pytes_history_screen_shows():
    columns, rows = 80, 24
    reference = pyte.HistoryScreen(columns, rows, history=100_000, ratio=0.001)
    feed_reference = pyte.ByteStream(reference).feed
    term = Terminal.__new__(Terminal)  # its screen and rendering, with no process behind it
    term._start_screen(columns, rows)
    start, reads = 0, 0
    while start < len(OUTPUT):
        chunk = OUTPUT[start : start + 1 + (reads * 37) % 500]
        start, reads = start + len(chunk), reads + 1
        feed_reference(chunk)
        term._feed(chunk)  # as a read does
        expected = _history_screen_lines(reference, columns, rows)
        assert term.lines() == expected
        assert term.text() == "\n".join(expected)
    assert reads > 20 and "end" in term.text() and "line 0 bold" not in term.text()
    shown = term.text()  # \x1b[3J emptied the scrollback; what scrolled off after it is there
    assert "line 119" not in shown and "after the clear 0" in shown and "region" not in shown
