"""`nanobot prompt ...`: the prompt files' versions (AGENTS.md, SOUL.md, USER.md, TOOLS.md,
HEARTBEAT.md), who wrote each one last, and restoring one.

Only presentation lives here; the rules are in nanobot.memory.prompt_files.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
from pathlib import Path

import typer

from nanobot.cli.errors import reported
from nanobot.cli.memory_groups import WorkspaceOpt, workspace_dir
from nanobot.cli.usage import Command, ConfigOpt
from nanobot.errors import UsageError

prompt_app = typer.Typer(
    help="The prompt files: who wrote them, their versions, restore one.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)

FileArg = typer.Argument(
    ..., metavar="FILE", help="AGENTS.md, SOUL.md, USER.md, TOOLS.md or HEARTBEAT.md."
)


def _files(workspace: Path | None, config: Path | None):
    from nanobot.memory.prompt_files import PromptFiles

    return PromptFiles(workspace_dir(workspace, config))


def _name(name: str) -> str:
    from nanobot.memory.prompt_files import PROMPT_FILES

    for known in PROMPT_FILES:
        if name.upper() in (known.upper(), known[:-3].upper()):
            return known
    raise UsageError(
        f"{name!r} is not a prompt file", hint=f"Use one of {', '.join(PROMPT_FILES)}."
    )


@prompt_app.command("versions")
def prompt_versions(
    name: str = FileArg, workspace: Path | None = WorkspaceOpt, config: Path | None = ConfigOpt
) -> None:
    """Who wrote FILE last, and its saved versions, newest first (1 = the most recently replaced)."""
    with reported():
        files = _files(workspace, config)
        name = _name(name)
        path = files.path(name)
        text = path.read_text(encoding="utf-8") if path.exists() else None
        if text is None:
            print(f"{path}: does not exist")
        else:
            who = files.authorship(name, text)
            print(f"{path}: last written by the {who.author}" + (f" ({who.at})" if who.at else ""))
        versions = files.versions(name)
        for v in versions:
            print(
                f"{v.number:>3}  {v.saved_at.astimezone():%Y-%m-%d %H:%M:%S}  written by the {v.author}"
            )
        print(
            f"restore one with `nanobot prompt restore {name} N` (the current text is kept as a version)"
            if versions
            else "no saved versions"
        )


@prompt_app.command("restore", cls=Command)
def prompt_restore(
    name: str = FileArg,
    n: int = typer.Argument(
        ..., metavar="N", help="Version number from `nanobot prompt versions`."
    ),
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Make version N of FILE the current text; the current text is saved as a version first."""
    with reported():
        name = _name(name)
        _files(workspace, config).restore(name, n)
        print(
            f"restored version {n} of {name}; the previous text is now version 1 "
            f"(undo with `nanobot prompt restore {name} 1`)"
        )
