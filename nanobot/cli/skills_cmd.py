"""`nanobot skills ...`: see which skills the agent has and which need setup."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from nanobot.paths import default_workspace
from nanobot.skills import SkillSet

skills_app = typer.Typer(help="Skills: instructions the agent reads for specific tasks.", no_args_is_help=True)


@skills_app.callback()
def _skills() -> None:
    """Skills: instructions the agent reads for specific tasks."""


@skills_app.command("list")
def list_skills(
    workspace: Path | None = typer.Option(
        None, "--workspace", "-w", help="Workspace folder (default: ~/.nanobot/workspace)."
    ),
) -> None:
    """List bundled and workspace skills and whether each is ready to use."""
    skills = SkillSet.discover(workspace or default_workspace())
    err = Console(stderr=True)
    for warning in skills.warnings:
        err.print(f"[yellow]warning:[/yellow] {warning}", markup=True, highlight=False, soft_wrap=True)
    if not skills.skills:
        typer.echo("No skills found.")
        return
    table = Table("name", "source", "status", "description", box=None, pad_edge=False)
    for s in skills.skills:
        status = "available" if s.available else "missing " + ", ".join(s.missing)
        name = f"{s.name} (always)" if s.always else s.name
        # Text(), not str: a '[' in a description must not be read as rich markup.
        table.add_row(Text(name), Text(s.source), Text(status), Text(s.description))
    Console(soft_wrap=True).print(table, highlight=False)
