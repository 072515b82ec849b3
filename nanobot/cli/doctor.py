"""`nanobot doctor`: print each check of nanobot.doctor, with the fix under every failure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from nanobot.cli.approval_prompt import visible
from nanobot.doctor import run_checks

_MARK = {"ok": Text("✓", "green"), "warn": Text("!", "yellow"), "fail": Text("✗", "bold red")}


def run_doctor(config_path: Path | None, *, offline: bool, forget_correction: bool = False) -> int:
    """0 when nothing failed (warnings allowed), 1 otherwise."""
    console = Console(highlight=False)
    if forget_correction:
        from nanobot.calibration_file import calibration_path, forget_calibration

        models = forget_calibration()
        console.print(
            f"forgot the token correction learned for {', '.join(models)} ({calibration_path()} "
            "removed); nanobot learns it again from the next answer"
            if models
            else "no token correction was learned: nothing to forget",
            markup=False,
        )
    # a damaged MEMORY.md or a server's error may hold escape sequences: shown, never run by the terminal
    checks = [
        replace(c, detail=visible(c.detail), hint=visible(c.hint))
        for c in run_checks(config_path, offline=offline)
    ]
    if console.is_terminal:
        table = Table.grid(padding=(0, 1))  # wrapped details stay in their column
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column()
        for check in checks:
            detail = Text(check.detail)
            if check.hint and check.status != "ok":
                detail.append("\nhint: ", "dim").append(check.hint)
            table.add_row(_MARK[check.status], check.name, detail)
        console.print(table)
    else:  # piped: one line per check (and one per hint), for grep and scripts
        width = max(len(c.name) for c in checks)
        for check in checks:
            print(f"{_MARK[check.status].plain} {check.name:<{width}}  {check.detail}")
            if check.hint and check.status != "ok":
                print(f"  {'':<{width}}  hint: {check.hint}")
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        console.print(f"[bold red]{len(failed)} check(s) failed:[/bold red] {', '.join(failed)}")
        return 1
    console.print("[green]all checks passed[/green]")
    return 0
