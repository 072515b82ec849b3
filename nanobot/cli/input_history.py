"""The chat's input history (Up arrow), which must never be the reason a message is lost."""

from __future__ import annotations

from prompt_toolkit.history import FileHistory


class InputHistory(FileHistory):
    """FileHistory that keeps working in memory when its file cannot be written (disk full, read-only)."""

    def __init__(self, filename: str) -> None:
        super().__init__(filename)
        self.write_failed = False

    def store_string(self, string: str) -> None:
        try:
            super().store_string(string)
        except OSError:
            self.write_failed = True  # the session file is what keeps the message; it reports its own errors
