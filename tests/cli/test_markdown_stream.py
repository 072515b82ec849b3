"""Where a streamed markdown answer may be cut into finished blocks (printed once) and the live rest."""

from __future__ import annotations

import io

import pyte
from nanobot.cli.markdown_stream import MarkdownStream, split_finished
from rich.console import Console


def test_blocks_finish_at_a_blank_line_followed_by_new_text():
    assert split_finished("para one\n\npara two\n") == ("para one", "para two\n")
    assert split_finished("para one\n\n") == ("", "para one\n\n")  # the next block has not begun
    assert split_finished("para one\n\npara") == ("", "para one\n\npara")  # a half-written line


def test_never_cut_inside_a_code_fence_or_a_list_item():
    fenced = "```\na\n\nb\n```\n\nafter\n"
    assert split_finished(fenced) == ("```\na\n\nb\n```", "after\n")
    assert split_finished("```\na\n\nb\n")[0] == ""  # still open
    listed = "- item\n\n  more of the item\n\nnext\n"
    assert split_finished(listed) == ("- item\n\n  more of the item", "next\n")


def test_streamed_words_print_every_block_once_and_in_order():
    out = io.StringIO()
    console = Console(file=out, width=40, height=10, force_terminal=True, color_system=None)
    answer = "# Title\n\n" + "\n\n".join(f"paragraph {i} " + "word " * 12 for i in range(5)) + "\n"
    stream = MarkdownStream(console)
    for end in range(1, len(answer) + 1, 3):
        stream.update(answer[:end])
    stream.update(answer)
    stream.finish()
    screen = pyte.HistoryScreen(40, 10, history=1000, ratio=0.001)
    pyte.Stream(screen).feed(out.getvalue().replace("\n", "\r\n"))
    rows = [*screen.history.top, *(screen.buffer[y] for y in range(10))]
    shown = "\n".join("".join(row[x].data for x in range(40)) for row in rows)
    assert [shown.count(f"paragraph {i}") for i in range(5)] == [1, 1, 1, 1, 1]
    assert shown.index("paragraph 1") < shown.index("paragraph 4")
