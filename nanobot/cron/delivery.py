"""Where a firing goes besides cron/runs.jsonl: a log file (echoed for journald/nohup) and the desktop."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

from nanobot.cron.runner import Firing
from nanobot.cron.store import LOG_LIMIT_BYTES
from nanobot.fsio import append_durably, rotate_when_larger

__all__ = ["LogDelivery", "NotifySendDelivery"]


class LogDelivery:
    """Appends one line per firing to a log file (and echoes it to a stream, for journald/nohup)."""

    def __init__(self, path: Path, echo: Any = None) -> None:
        self.path = path
        self.echo = echo

    def deliver(self, firing: Firing) -> None:
        stamp = (
            datetime.fromtimestamp(firing.at_ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S%z")
        )
        line = f"{stamp} {firing.line()}".replace("\n", " ⏎ ")
        if firing.quiet:
            line = f"{stamp} {firing.title}: nothing to report"
        rotate_when_larger(self.path, LOG_LIMIT_BYTES)
        append_durably(self.path, line + "\n")
        if self.echo is not None:
            print(line, file=self.echo, flush=True)


class NotifySendDelivery:
    """A desktop notification through notify-send, when it exists and a desktop session is there."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary or shutil.which("notify-send")

    @property
    def available(self) -> bool:
        has_desktop = any(
            os.environ.get(v) for v in ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")
        )
        return bool(self.binary) and has_desktop

    def deliver(self, firing: Firing) -> None:
        if firing.quiet or not self.available or self.binary is None:
            return
        body = (firing.error or firing.text or firing.status)[:500]
        subprocess.run(
            [self.binary, "--app-name=nanobot", firing.title, body],
            timeout=10,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
