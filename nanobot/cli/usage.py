"""Usage lines in the usual convention: `nanobot session show [OPTIONS] KEY`, not `{key}`."""

from __future__ import annotations

from typing import Any

from typer.core import TyperCommand


class Command(TyperCommand):
    """Pass as `cls=` to commands with arguments; typer puts braces around required ones."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = super().collect_usage_pieces(ctx)
        return [
            piece[1:-1].upper() if piece.startswith("{") and piece.endswith("}") else piece
            for piece in pieces
        ]
