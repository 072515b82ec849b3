"""Load the config for a command and tell the user, once, what in it was ignored or is unsafe."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from nanobot.cli.errors import print_warning
from nanobot.config import Config, load_config
from nanobot.paths import default_config_path


def load(path: Path | None = None, *, overrides: dict[str, Any] | None = None) -> Config:
    if path is not None and path != default_config_path() and not path.expanduser().exists():
        # a mistyped --config must not pass unnoticed for the defaults (a missing default file is
        # the normal first run, and the chat's key prompt creates a named one)
        print_warning(
            f"{path} does not exist: using the defaults and the environment "
            f"(`nanobot onboard -c {shlex.quote(str(path))}` creates it)"
        )
    cfg = load_config(path, overrides=overrides)
    for warning in cfg.warnings:
        print_warning(warning)
    return cfg
