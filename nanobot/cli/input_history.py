"""The chat's input history (~/.nanobot/input_history): 0600, and secrets masked before saving."""

from __future__ import annotations

import os
from pathlib import Path

from prompt_toolkit.history import FileHistory

from nanobot.paths import PRIVATE_FILE_MODE, ensure_private_dir
from nanobot.secrets_mask import mask_secrets


class MaskedFileHistory(FileHistory):
    """A pasted key must not be kept on disk (or offered again by the up arrow)."""

    def __init__(self, path: Path) -> None:
        ensure_private_dir(path.parent)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
        super().__init__(str(path))

    def append_string(self, string: str) -> None:
        super().append_string(mask_secrets(string))
