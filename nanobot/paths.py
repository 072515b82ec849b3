"""Where nanobot keeps its files. NANOBOT_HOME moves everything under ~/.nanobot."""

from __future__ import annotations

import os
from pathlib import Path


def nanobot_home() -> Path:
    """The root folder (default ~/.nanobot, or $NANOBOT_HOME)."""
    env = os.environ.get("NANOBOT_HOME")
    return Path(env).expanduser() if env else Path.home() / ".nanobot"


def default_config_path() -> Path:
    return nanobot_home() / "config.json"


def default_workspace() -> Path:
    return nanobot_home() / "workspace"


def sessions_dir() -> Path:
    """Session files live outside the workspace so the agent's file tools cannot clobber them."""
    return nanobot_home() / "sessions"


def input_history_path() -> Path:
    return nanobot_home() / "input_history"


def memory_dir(workspace: Path) -> Path:
    return workspace / "memory"


def bundled_dir(name: str) -> Path:
    """A bundled resource folder ("skills" or "workspace").

    In an installed wheel the folders ship as nanobot/_bundled/<name>; in an editable
    install (a git checkout) they are the repo's top-level folders.
    """
    from importlib.resources import files

    packaged = Path(str(files("nanobot"))) / "_bundled" / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / name
