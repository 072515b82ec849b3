"""The prompt files' door: AGENTS.md, SOUL.md, USER.md, TOOLS.md and HEARTBEAT.md.

They are data the user curates, and they steer every turn, so a change by the assistant comes
through here (after the user approved the diff): every replaced text is kept as a version and
can be restored, and a ledger records who wrote each file last, which the system prompt shows
beside each section. A file whose text is not the one the ledger recorded was changed outside
nanobot, by the user (the assistant's commands cannot write these files: they are read-only in
the sandbox, and a change found after a command is put back unless approved).

HEARTBEAT.md's tasks run later with nobody watching: tasks the assistant added without a person
seeing the change (approved by a flag, the config or an earlier "always") are kept pending here
until the user approves them (`nanobot cron approve heartbeat`); the heartbeat skips them.

Everything lives in the nanobot home (`prompt-files/<workspace id>/`), which commands never see.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanobot.cron.heartbeat import heartbeat_tasks, pending_path, read_pending, waiting_tasks
from nanobot.errors import VersionNotFound
from nanobot.fsio import ExclusiveLock, atomic_write
from nanobot.paths import nanobot_home
from nanobot.policy.protected import PROMPT_FILES

__all__ = ["PromptFiles", "PromptVersion", "Authorship", "PROMPT_FILES"]


_STAMP = "%Y%m%dT%H%M%S.%fZ"


@dataclass(frozen=True)
class PromptVersion:
    number: int  # 1 = the most recently replaced text
    path: Path
    saved_at: datetime  # UTC, when it was replaced
    author: str  # who had written the replaced text: "user" | "assistant"


@dataclass(frozen=True)
class Authorship:
    author: str  # "user" | "assistant"
    at: str  # ISO time of the assistant's write ("" for the user: nanobot does not see hand edits happen)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class PromptFiles:
    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace).expanduser().resolve()
        key = hashlib.sha256(str(self.workspace).encode()).hexdigest()[:16]
        self.dir = nanobot_home() / "prompt-files" / key
        self.ledger_path = self.dir / "authors.json"
        self.pending_path = pending_path(self.workspace)

    # -- reading ----------------------------------------------------------------------------

    def path(self, name: str) -> Path:
        if name not in PROMPT_FILES:
            raise ValueError(f"{name} is not a prompt file ({', '.join(PROMPT_FILES)})")
        return self.workspace / name

    def authorship(self, name: str, text: str) -> Authorship:
        """Who wrote `text` (the file's current text): the ledger's author when it recorded this very
        text, else the user (a hand edit, the template, or a file from before this ledger)."""
        entry = self._ledger().get(name)
        if (
            isinstance(entry, dict)
            and entry.get("sha256") == _sha(text)
            and entry.get("author") == "assistant"
        ):
            return Authorship("assistant", str(entry.get("at") or ""))
        return Authorship("user", "")

    def versions(self, name: str) -> list[PromptVersion]:
        folder = self.dir / "versions" / self.path(name).name
        found = []
        for path in folder.glob("*.md") if folder.is_dir() else []:
            stamp, _, author = path.stem.partition(".by-")
            try:
                saved = datetime.strptime(stamp, _STAMP).replace(tzinfo=UTC)
            except ValueError:
                continue
            found.append((saved, path, author or "user"))
        found.sort(key=lambda item: item[0], reverse=True)
        return [
            PromptVersion(i + 1, path, saved, author)
            for i, (saved, path, author) in enumerate(found)
        ]

    # -- writing ----------------------------------------------------------------------------

    def write(
        self,
        name: str,
        text: str,
        *,
        author: str,
        seen_by_user: bool = True,
        replaced: str | None = None,
    ) -> Path | None:
        """Replace `name` with `text`; the replaced text becomes a version (returned). `seen_by_user`:
        a person approved this very change (else new HEARTBEAT.md tasks wait for approval).
        `replaced`: the text before, when the file already holds `text` (a command's approved change)."""
        target = self.path(name)
        with self._locked():
            before = _read(target) if replaced is None else replaced
            version = None
            if before and before != text:
                version = self._save_version(name, before, self.authorship(name, before).author)
            atomic_write(target, text)
            ledger = self._ledger()
            ledger[name] = {
                "sha256": _sha(text),
                "author": author,
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            atomic_write(self.ledger_path, json.dumps(ledger, indent=1) + "\n", mode=0o600)
            if name == "HEARTBEAT.md":
                added = [t for t in heartbeat_tasks(text) if t not in heartbeat_tasks(before or "")]
                pending = [t for t in self._pending() if not (seen_by_user and t in added)]
                if author == "assistant" and not seen_by_user:
                    pending += [t for t in added if t not in pending]
                self._save_pending(pending)
        return version

    def restore(self, name: str, n: int) -> Path | None:
        """Put version `n` back (written by the user's hand: they chose it); the current text is kept."""
        versions = self.versions(name)
        if not 1 <= n <= len(versions):
            raise VersionNotFound(
                f"{name} has no version {n} (it has {len(versions)})",
                hint=f"`nanobot prompt versions {name}` lists them.",
            )
        chosen = versions[n - 1]
        return self.write(name, chosen.path.read_text(encoding="utf-8"), author="user")

    # -- HEARTBEAT.md tasks waiting for the user ----------------------------------------------

    def pending_tasks(self) -> list[str]:
        """Open HEARTBEAT.md tasks the assistant added that nobody approved yet."""
        return waiting_tasks(self.workspace)

    def approve_heartbeat(self) -> list[str]:
        """The user approves every pending task; returns them."""
        with self._locked():
            approved = self.pending_tasks()
            self._save_pending([])
        return approved

    # -- files --------------------------------------------------------------------------------

    def _save_version(self, name: str, text: str, author: str) -> Path:
        folder = self.dir / "versions" / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{datetime.now(UTC).strftime(_STAMP)}.by-{author}.md"
        atomic_write(path, text, mode=0o600)
        return path

    def _ledger(self) -> dict[str, Any]:
        try:
            data = json.loads(self.ledger_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _pending(self) -> list[str]:
        return read_pending(self.workspace)

    def _save_pending(self, tasks: list[str]) -> None:
        atomic_write(
            self.pending_path, json.dumps(tasks, indent=1, ensure_ascii=False) + "\n", mode=0o600
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = ExclusiveLock(self.ledger_path, timeout=10.0)
        lock.acquire()
        try:
            yield
        finally:
            lock.release()


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return None
