"""The CLI's consoles: every command prints through one of these two, so a pipe gets whole lines.

Off a terminal rich lays tables out for 80 columns (or for the width of a terminal on another of
the process's streams) and cuts cells to fit: `nanobot cron list | cat` printed `a-long-jo…`. A
pipe or a file has no edge, so there the width is unbounded; COLUMNS, when set, still wins.
"""

from __future__ import annotations

import os
from typing import IO

from rich.console import Console

# Wide enough that no table cell is cut; nothing we print pads a line out to the full width
# (a rule is drawn at RULE_WIDTH, see rule_width below).
PIPE_WIDTH = 10_000
RULE_WIDTH = 80


def stdout_console(file: IO[str] | None = None, *, soft_wrap: bool = True) -> Console:
    # without an explicit file rich writes to whatever sys.stdout is at print time, so
    # prompt_toolkit's patch_stdout can place background output above the prompt
    return _fit(Console(file=file, highlight=False, soft_wrap=soft_wrap))


def stderr_console(*, soft_wrap: bool = True) -> Console:
    return _fit(Console(stderr=True, highlight=False, soft_wrap=soft_wrap))


def rule_width(console: Console) -> int:
    """The width of a horizontal rule: the terminal's, or a fixed one in a pipe."""
    return console.width if console.is_terminal else min(console.width, RULE_WIDTH)


def _fit(console: Console) -> Console:
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console.width = PIPE_WIDTH
    return console
