"""The workspace's memory files: MEMORY.md (long-term facts) and HISTORY.md (dated log).

Files live in `<workspace>/memory/` in the layout HKUDS/nanobot uses, so an existing workspace
works unchanged. What we add: every replaced MEMORY.md is kept in `memory/versions/` (named by
UTC time with microseconds, so names sort chronologically) and can be restored; updates from
consolidation pass a safety policy (`apply_update`); secrets are masked before either file is
written.

Version numbers count from the newest: version 1 is the most recently replaced MEMORY.md.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator, Literal

from nanobot.errors import NanobotError, UsageError
from nanobot.fsio import ExclusiveLock, Timeout, append_durably, atomic_write
from nanobot.messages import Message, text_of, tool_calls_of
from nanobot.paths import memory_dir
from nanobot.secrets_mask import mask_secrets

__all__ = [
    "MemoryStore", "MemoryInfo", "VersionInfo", "UpdateOutcome", "WriteReceipt",
    "MemoryUpdateRefused", "VersionNotFound", "MemoryBusy", "STAMP_RE",
    "HOLD_BACK_MIN_LINES", "HOLD_BACK_MIN_CHARS", "HOLD_BACK_KEEP_RATIO",
]

# Hold-back policy (see `apply_update`): an update is held back when the current MEMORY.md has
# at least HOLD_BACK_MIN_LINES fact lines and HOLD_BACK_MIN_CHARS characters, and the update
# keeps fewer than HOLD_BACK_KEEP_RATIO of those fact lines.
HOLD_BACK_MIN_LINES = 1  # any remembered fact is worth protecting: young memories are the easiest to wipe
HOLD_BACK_MIN_CHARS = 0
HOLD_BACK_KEEP_RATIO = 0.5

# A HISTORY.md entry starts with this stamp (nanobot's format, local time).
STAMP_RE = re.compile(r"^\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2})?\]")
_VERSION_RE = re.compile(r"^MEMORY-(\d{8}T\d{6}\.\d{6})Z\.md$")
_VERSION_FMT = "%Y%m%dT%H%M%S.%f"
_LOCK_WAIT_SECONDS = 10.0
# Raw archives keep user and assistant text whole; very long tool output is already in the session file.
_RAW_TOOL_RESULT_CHARS = 4000
_RAW_ARGUMENT_CHARS = 500


class MemoryUpdateRefused(NanobotError):
    """A MEMORY.md update was refused (empty or truncated); the file is unchanged."""


class VersionNotFound(UsageError):
    """`restore N` named a version that does not exist."""


class MemoryBusy(NanobotError):
    """Another process kept MEMORY.md locked for too long."""


@dataclass(frozen=True)
class VersionInfo:
    number: int  # 1 = most recent
    path: Path
    saved_at: datetime  # UTC, when this content was replaced
    bytes: int
    reason: str  # why it was replaced ("" if unknown)


@dataclass(frozen=True)
class MemoryInfo:
    path: Path
    exists: bool
    tokens: int
    bytes: int
    modified: datetime | None  # local time
    versions: int


@dataclass(frozen=True)
class WriteReceipt:
    changed: bool
    version: Path | None  # where the replaced content was saved
    masked: bool  # secrets were masked in the new text
    concurrent_change: bool  # the file changed after `base` was read; that content is a version now


@dataclass(frozen=True)
class UpdateOutcome:
    status: Literal["written", "held_back", "refused"]
    message: str
    version: Path | None = None


def _norm(line: str) -> str:
    """A fact line compared loosely: bullets, case, spacing and end punctuation don't matter."""
    s = line.strip()
    s = re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".;,").lower()
    return s


def _fact_lines(text: str) -> list[str]:
    """Non-empty lines that carry facts: headings, rules, HTML comments and wholly parenthesised
    template placeholders ("(Important facts about the user)") are structure, not facts."""
    out = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#") or re.fullmatch(r"[-*_=]{3,}", s):
            continue
        if re.fullmatch(r"<!--.*-->|\(.*\)", s):
            continue
        out.append(s)
    return out


def _local_stamp(when: datetime | None = None) -> str:
    when = when or datetime.now()
    if when.tzinfo is not None:
        when = when.astimezone()
    return when.strftime("[%Y-%m-%d %H:%M]")


class MemoryStore:
    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.dir = memory_dir(self.workspace)
        self.memory_file = self.dir / "MEMORY.md"
        self.history_file = self.dir / "HISTORY.md"
        self.versions_dir = self.dir / "versions"
        self._reasons_file = self.versions_dir / "reasons.jsonl"

    # ---- MEMORY.md -------------------------------------------------------------------------

    def read_memory(self) -> str:
        try:
            return self.memory_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def memory_info(self) -> MemoryInfo:
        from nanobot.tokens import count_text

        text = self.read_memory()
        try:
            st = self.memory_file.stat()
            modified, size, exists = datetime.fromtimestamp(st.st_mtime), st.st_size, True
        except FileNotFoundError:
            modified, size, exists = None, 0, False
        return MemoryInfo(self.memory_file, exists, count_text(text), size, modified,
                          len(self._version_files()))

    def write_memory(self, new_text: str, *, reason: str, base: str | None = None) -> WriteReceipt:
        """Replace MEMORY.md atomically, keeping the current content as a version first.

        Secrets are masked. An empty or whitespace-only text raises MemoryUpdateRefused.
        `base` is the content the caller started from (e.g. before an editor session); if the
        file changed since, the write still happens and the receipt says so.
        """
        if not new_text or not new_text.strip():
            raise MemoryUpdateRefused(
                "refused to replace MEMORY.md with an empty text; the file is unchanged",
                hint="`nanobot memory versions` lists saved versions if something went wrong",
            )
        with self._locked():
            return self._write_locked(new_text, reason=reason, base=base)

    def _write_locked(self, new_text: str, *, reason: str, base: str | None = None) -> WriteReceipt:
        masked = mask_secrets(new_text)
        current = self.read_memory()
        if masked == current:
            return WriteReceipt(False, None, masked != new_text, False)
        version = self._save_version(current, reason) if current.strip() else None
        atomic_write(self.memory_file, masked)
        return WriteReceipt(True, version, masked != new_text, base is not None and base != current)

    def apply_update(self, new_text: str | None, *, truncated: bool) -> UpdateOutcome:
        """Apply a `memory_update` from consolidation under the safety policy.

        - empty or whitespace-only: refused;
        - `truncated` (the reply hit finish_reason == "length"): refused, it is likely cut off;
        - the current file has fact lines (non-empty, not headings) and the update keeps
          < HOLD_BACK_KEEP_RATIO of them (compared ignoring bullets, case, spacing and end
          punctuation): held
          back. The current facts stay; the update's new lines are appended under a
          "## Held back update (date) — review and merge" heading for the user to merge;
        - otherwise: written, with the old content kept as a version.
        """
        if not new_text or not new_text.strip():
            return UpdateOutcome("refused", "memory update was empty; MEMORY.md left unchanged")
        if truncated:
            return UpdateOutcome(
                "refused",
                "memory update was cut off (the reply hit its length limit); MEMORY.md left unchanged",
            )
        new_text = mask_secrets(new_text)
        with self._locked():
            old = self.read_memory()
            old_facts = _fact_lines(old)
            old_keys = {_norm(x) for x in old_facts}
            new_keys = {_norm(x) for x in _fact_lines(new_text)}
            kept = sum(1 for x in old_facts if _norm(x) in new_keys)
            substantial = len(old_facts) >= HOLD_BACK_MIN_LINES and len(old.strip()) >= HOLD_BACK_MIN_CHARS
            if substantial and kept < HOLD_BACK_KEEP_RATIO * len(old_facts):
                return self._hold_back(old, old_keys, new_text, kept, len(old_facts))
            receipt = self._write_locked(new_text, reason="consolidation")
        if not receipt.changed:
            return UpdateOutcome("written", "MEMORY.md already up to date")
        return UpdateOutcome("written", "MEMORY.md updated (previous version kept)", receipt.version)

    def _hold_back(self, old: str, old_keys: set[str], new_text: str, kept: int, total: int) -> UpdateOutcome:
        dropped = total - kept
        seen = old_keys | {_norm(line) for line in old.splitlines() if line.strip()}
        fresh = [line.rstrip() for line in new_text.splitlines()
                 if line.strip() and _norm(line) not in seen]
        if not _fact_lines("\n".join(fresh)):
            fresh = []  # new headings alone are nothing to review
        summary = (f"memory update held back: it would have dropped {dropped} of {total} "
                   f"remembered facts")
        if not fresh:
            return UpdateOutcome("held_back", f"{summary}; it added nothing new, MEMORY.md unchanged")
        heading = f"## Held back update ({datetime.now():%Y-%m-%d %H:%M}) — review and merge"
        body = old.rstrip("\n") + "\n\n" + heading + "\n\n" + "\n".join(fresh) + "\n"
        receipt = self._write_locked(body, reason="held back consolidation update")
        return UpdateOutcome(
            "held_back",
            f"{summary}; its {len(fresh)} new line(s) were appended to MEMORY.md under "
            f"\"Held back update\" — review and merge them (`nanobot memory edit`)",
            receipt.version,
        )

    # ---- versions --------------------------------------------------------------------------

    def versions(self) -> list[VersionInfo]:
        """Saved versions, newest first (number 1 = the most recently replaced content)."""
        reasons = self._reasons()
        out = []
        for i, path in enumerate(reversed(self._version_files()), start=1):
            stamp = _VERSION_RE.match(path.name).group(1)  # type: ignore[union-attr]
            saved = datetime.strptime(stamp, _VERSION_FMT).replace(tzinfo=timezone.utc)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            out.append(VersionInfo(i, path, saved, size, reasons.get(path.name, "")))
        return out

    def read_version(self, n: int) -> str:
        return self._version(n).path.read_text(encoding="utf-8")

    def restore(self, n: int) -> WriteReceipt:
        """Make version `n` the current MEMORY.md; the current file is saved as a version first."""
        version = self._version(n)
        return self.write_memory(version.path.read_text(encoding="utf-8"),
                                 reason=f"restore of the version saved {version.saved_at:%Y-%m-%d %H:%M:%S} UTC")

    def _version(self, n: int) -> VersionInfo:
        all_versions = self.versions()
        if not 1 <= n <= len(all_versions):
            have = f"1..{len(all_versions)}" if all_versions else "none saved yet"
            raise VersionNotFound(f"no MEMORY.md version {n} (versions: {have})",
                                  hint="`nanobot memory versions` lists them")
        return all_versions[n - 1]

    def _version_files(self) -> list[Path]:
        """Oldest first: the names are UTC timestamps, so name order is time order."""
        try:
            names = [p for p in self.versions_dir.iterdir() if _VERSION_RE.match(p.name)]
        except FileNotFoundError:
            return []
        return sorted(names, key=lambda p: p.name)

    def _save_version(self, content: str, reason: str) -> Path:
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        files = self._version_files()
        if files:
            # Names must keep sorting in save order even if the clock steps back or repeats.
            latest = datetime.strptime(_VERSION_RE.match(files[-1].name).group(1), _VERSION_FMT)  # type: ignore[union-attr]
            now = max(now, latest + timedelta(microseconds=1))
        path = self.versions_dir / f"MEMORY-{now.strftime(_VERSION_FMT)}Z.md"
        atomic_write(path, content)
        line = json.dumps({"version": path.name, "reason": reason}, ensure_ascii=False)
        append_durably(self._reasons_file, line + "\n")
        return path

    def _reasons(self) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            lines = self._reasons_file.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return out
        for line in lines:
            try:
                rec = json.loads(line)
                out[str(rec["version"])] = str(rec.get("reason", ""))
            except (ValueError, KeyError, TypeError):
                continue  # a torn line only loses a reason, never a version
        return out

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Consolidation (background) and `memory edit` (another process) may write at once;
        # the lock keeps "save version, then replace" a single step.
        lock = ExclusiveLock(self.memory_file)
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        while True:
            try:
                lock.acquire()
                break
            except Timeout:
                if time.monotonic() > deadline:
                    raise MemoryBusy(f"MEMORY.md is locked by another process ({lock.path})",
                                     hint="wait for it to finish, then try again") from None
                time.sleep(0.05)
        try:
            yield
        finally:
            lock.release()

    # ---- HISTORY.md ------------------------------------------------------------------------

    def append_history(self, entry: str, *, when: datetime | None = None) -> str:
        """Append a dated entry (masked, stamped if needed) durably; returns its first line.

        An empty entry writes nothing and returns "".
        """
        text = mask_secrets(entry).strip("\n").rstrip()
        if not text.strip():
            return ""
        if not STAMP_RE.match(text):
            text = f"{_local_stamp(when)} {text.lstrip()}"
        append_durably(self.history_file, self._separator() + text + "\n\n")
        return text.splitlines()[0]

    def append_raw_archive(self, messages: list[Message], reason: str) -> str:
        """Archive messages the summariser failed on as a RAW entry; returns its first line."""
        stamps = [s for s in (_parse_iso(m.get("timestamp")) for m in messages) if s]
        span = ""
        if stamps:
            span = f", {_local_stamp(stamps[0])[1:-1]} to {_local_stamp(stamps[-1])[1:-1]}"
        head = f"{_local_stamp(stamps[0] if stamps else None)} RAW archive of {len(messages)} message(s){span} — {reason}"
        lines = [head]
        for msg in messages:
            lines.extend(_raw_lines(msg))
        return self.append_history("\n".join(lines))

    def _separator(self) -> str:
        """What to write first so the new entry is separated from the last by a blank line."""
        try:
            size = self.history_file.stat().st_size
        except FileNotFoundError:
            return ""
        if size == 0:
            return ""
        with open(self.history_file, "rb") as fh:
            fh.seek(max(0, size - 2))
            tail = fh.read()
        if tail.endswith(b"\n\n") or (size == 1 and tail == b"\n"):
            return ""
        return "\n" if tail.endswith(b"\n") else "\n\n"


def _parse_iso(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _indent(text: str) -> str:
    # Continuation lines are indented so message text can never look like an entry stamp.
    return "\n  ".join(text.splitlines()) if text else ""


def _raw_lines(msg: Message) -> list[str]:
    role = str(msg.get("role", "?")).upper()
    text = text_of(msg.get("content"))
    if role == "TOOL":
        name = msg.get("name") or msg.get("tool_call_id") or "tool"
        if len(text) > _RAW_TOOL_RESULT_CHARS:
            text = text[:_RAW_TOOL_RESULT_CHARS] + f" … [{len(text) - _RAW_TOOL_RESULT_CHARS} more characters not archived]"
        return [f"TOOL ({name}): {_indent(text)}"]
    out = [f"{role}: {_indent(text)}".rstrip()] if text or not msg.get("tool_calls") else []
    for call in tool_calls_of(msg):
        fn = call.get("function") or {}
        args = fn.get("arguments")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        if len(args) > _RAW_ARGUMENT_CHARS:
            args = args[:_RAW_ARGUMENT_CHARS] + "…"
        out.append(f"{role}: [called {fn.get('name', '?')}({_indent(args)})]")
    return out
