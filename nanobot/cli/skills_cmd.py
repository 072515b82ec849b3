"""`nanobot skills ...`: see which skills the agent has and which need setup."""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from nanobot.cli.consoles import stderr_console, stdout_console
from nanobot.cli.errors import print_error
from nanobot.cli.usage import ConfigOpt
from nanobot.skills import SkillApprovals, SkillSet

skills_app = typer.Typer(
    help="Skills: instructions the agent reads for specific tasks.", no_args_is_help=True
)


def _configured_workspace(config: Path | None) -> Path:
    """The workspace the agent uses: agents.defaults.workspace from the config, else the default."""
    from nanobot.cli.config_load import load

    return load(config).workspace_path()


@skills_app.callback()
def _skills() -> None:
    """Skills: instructions the agent reads for specific tasks."""


@skills_app.command("list")
def list_skills(
    workspace: Path | None = typer.Option(
        None,
        "--workspace",
        "-w",
        help="Workspace folder (default: the configured one, else ~/.nanobot/workspace).",
    ),
    config: Path | None = ConfigOpt,
) -> None:
    """List bundled and workspace skills and whether each is ready to use."""
    skills = SkillSet.discover(workspace or _configured_workspace(config))
    err = stderr_console()
    for warning in skills.warnings:
        err.print(
            f"[yellow]warning:[/yellow] {warning}", markup=True, highlight=False, soft_wrap=True
        )
    if not skills.listed():
        typer.echo("No skills found.")
        return
    table = Table("name", "source", "state", "status", "description", box=None, pad_edge=False)
    for s in skills.listed():
        status = "available" if s.available else "missing " + ", ".join(s.missing)
        name = f"{s.name} (always)" if s.always else s.name
        state = s.state if not s.gate or s.active else f"{s.state}: {s.gate}"
        # Text(), not str: a '[' in a description must not be read as rich markup.
        table.add_row(Text(name), Text(s.source), Text(state), Text(status), Text(s.description))
    stdout_console().print(table, highlight=False)
    if skills.held:
        names = " ".join(s.name for s in skills.held)
        err.print(
            f"{len(skills.held)} workspace skill(s) are off until you approve them (read them first): "
            f"nanobot skills approve {names}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


@skills_app.command("approve")
def approve_skill(
    names: list[str] = typer.Argument(
        ..., help="The skills to approve, one or more (see `nanobot skills list`)."
    ),
    workspace: Path | None = typer.Option(
        None,
        "--workspace",
        "-w",
        help="Workspace folder (default: the configured one, else ~/.nanobot/workspace).",
    ),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Approve without showing the skill and asking."
    ),
    config: Path | None = ConfigOpt,
) -> None:
    """Turn on workspace skills that ask to be always on or shadow a bundled one, as they are now.
    Each is shown and asked about in turn; exit 0 when all were approved (or already active)."""
    skills = SkillSet.discover(workspace or _configured_workspace(config))
    codes = [_approve_one(skills, name, yes) for name in dict.fromkeys(names)]
    if any(codes):
        raise typer.Exit(max(codes))


def _approve_one(skills: SkillSet, name: str, yes: bool) -> int:
    """Show one held skill, ask, and approve it; 0 approved or already active, 1 declined, 2 unknown."""
    skill = next((s for s in skills.held if s.name == name), None)
    if skill is None:
        active = skills.get(name)
        if active is not None:
            typer.echo(
                f"{name} is already active ({active.source}, {active.state}); nothing to approve."
            )
            return 0
        print_error(
            f"no workspace skill named {name!r} is waiting for approval",
            "`nanobot skills list` shows every skill and its state.",
        )
        return 2
    if not yes:
        out = stdout_console()
        out.print(f"{skill.name} ({skill.path}) {skill.gate}. Its SKILL.md:", markup=False)
        out.print(
            skill.path.read_text(encoding="utf-8", errors="replace"), markup=False, emoji=False
        )
        others = sorted(
            p.relative_to(skill.path.parent)
            for p in skill.path.parent.rglob("*")
            if p.is_file() and p != skill.path
        )
        if others:  # the approval covers them too: any change to them turns the skill off again
            out.print(
                "Other files in its folder (approved with it): " + ", ".join(map(str, others)),
                markup=False,
            )
        if not typer.confirm(f"Approve {skill.name} as it is now?", default=False):
            typer.echo(f"Not approved; {skill.name} stays off.")
            return 1
    SkillApprovals().approve(skill)
    typer.echo(
        f"Approved {skill.name}: it is active from the next chat on. If its folder changes, "
        "it is off again until you approve it again."
    )
    return 0
