"""Usage lines in the usual convention (`nanobot session show [OPTIONS] KEY`, not `{key}`), and
the option every command that reads the config spells the same way."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperCommand

# `--config/-c` for every command that reads the config (tests/cli/test_config_option.py checks them all)
ConfigOpt = typer.Option(
    None, "--config", "-c", help="Config file (default: ~/.nanobot/config.json)."
)


class Command(TyperCommand):
    """Pass as `cls=` to commands with arguments; typer puts braces around required ones."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [
            piece[1:-1].upper() if piece.startswith("{") and piece.endswith("}") else piece
            for piece in pieces
        ]
