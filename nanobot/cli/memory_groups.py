"""The `nanobot memory` and `nanobot history` command groups and what their commands share.

The commands live in nanobot.cli.memory_cmd (show, versions, grep, tail...) and
nanobot.cli.recall_cmd (history search, memory tidy); both register on the groups here, so
neither imports the other's commands.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import typer

from nanobot.cli.errors import print_error, print_warning

__all__ = [
    "memory_app",
    "history_app",
    "WorkspaceOpt",
    "load_config_once",
    "workspace_dir",
    "err",
    "fail",
    "drop_stdout",
]

memory_app = typer.Typer(
    help="What the assistant remembers (MEMORY.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)
history_app = typer.Typer(
    help="Search the archive of past conversations (sessions and HISTORY.md).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)

WorkspaceOpt = typer.Option(
    None,
    "--workspace",
    "-w",
    help="Workspace folder (default: from config, else ~/.nanobot/workspace).",
)


_config_cache: list[tuple[Path | None, Any]] = []  # (--config, what it loaded)


def load_config_once(path: Path | None = None) -> Any:
    """The config (the file `path`, else the default one), or None when it is invalid (said once,
    on stderr: memory stays readable)."""
    from nanobot.cli.config_load import load as load_config
    from nanobot.errors import ConfigError

    for loaded_from, cfg in _config_cache:
        if loaded_from == path:
            return cfg
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        print_warning(
            f"{exc.message}; using the default workspace and context window until it is fixed"
        )
        cfg = None
    _config_cache.append((path, cfg))
    return cfg


def workspace_dir(option: Path | None, config: Path | None = None) -> Path:
    """The --workspace folder, else the one the config (--config, else the default file) names,
    else the default."""
    if option is not None:
        return option.expanduser()
    cfg = load_config_once(config)
    if cfg is not None:
        path: Path = cfg.workspace_path()
        return path
    from nanobot.paths import default_workspace

    return default_workspace()


def err(message: str) -> None:
    print(message, file=sys.stderr)


def fail(message: str, hint: str | None = None, code: int = 2) -> typer.Exit:
    print_error(message, hint)
    return typer.Exit(code)


def drop_stdout() -> None:
    """Point stdout at /dev/null once its reader is gone (`| head`), so that the exit's flush has
    nowhere to fail."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # no real file behind stdout (a test's capture)
        pass
