"""The chat's input history (~/.nanobot/input_history): 0600, secrets masked before saving, and
never the reason a message is lost (a full or read-only disk leaves it in memory only)."""

from __future__ import annotations

import os
from pathlib import Path

from prompt_toolkit.history import FileHistory

from nanobot.paths import PRIVATE_FILE_MODE, ensure_private_dir
from nanobot.secrets_mask import mask_secrets


class MaskedFileHistory(FileHistory):
    """A pasted key must not be kept on disk (or offered again by the up arrow)."""

    def __init__(self, path: Path) -> None:
        self.write_failed = False
        try:
            ensure_private_dir(path.parent)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
        except OSError:
            self.write_failed = True
        super().__init__(str(path))

    def append_string(self, string: str) -> None:
        super().append_string(mask_secrets(string))

    def store_string(self, string: str) -> None:
        try:
            super().store_string(string)
        except OSError:
            self.write_failed = (
                True  # the session file keeps the message and reports its own errors
            )
