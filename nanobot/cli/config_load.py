"""Load the config for a command and tell the user, once, what in it was ignored or is unsafe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nanobot.cli.errors import print_warning
from nanobot.config import Config, load_config


def load(path: Path | None = None, *, overrides: dict[str, Any] | None = None) -> Config:
    cfg = load_config(path, overrides=overrides)
    for warning in cfg.warnings:
        print_warning(warning)
    return cfg
