"""`nanobot doctor`: print each check of nanobot.doctor, with the fix under every failure."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape

from nanobot.doctor import run_checks

_MARK = {"ok": "[green]✓[/green]", "warn": "[yellow]![/yellow]", "fail": "[bold red]✗[/bold red]"}


def run_doctor(config_path: Path | None, *, offline: bool) -> int:
    """0 when nothing failed (warnings allowed), 1 otherwise."""
    console = Console(highlight=False)
    console.soft_wrap = not console.is_terminal
    checks = run_checks(config_path, offline=offline)
    width = max(len(c.name) for c in checks)
    for check in checks:
        console.print(f"{_MARK[check.status]} {check.name:<{width}}  {escape(check.detail)}")
        if check.hint and check.status != "ok":
            console.print(f"  {'':<{width}}  [dim]hint:[/dim] {escape(check.hint)}")
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        console.print(f"[bold red]{len(failed)} check(s) failed:[/bold red] {', '.join(failed)}")
        return 1
    console.print("[green]all checks passed[/green]")
    return 0
