"""The workspace's memory files: MEMORY.md (long-term facts) and HISTORY.md (dated log).

Files live in `<workspace>/memory/` in the layout HKUDS/nanobot uses, so an existing workspace
works unchanged. This store is the one door for every change to them:

- MEMORY.md is replaced atomically; the replaced text is kept in `memory/versions/` (named by
  UTC time with microseconds, so names sort chronologically) and can be restored; secrets are
  masked; an update applies only to the content it was computed from (compare-and-swap: a
  stale update is merged on top of the newer text, see nanobot.memory.merge); an update that
  drops most remembered facts is held back.
- HISTORY.md is append-only. Every append also goes to a journal copy outside the workspace
  (`<nanobot home>/journal/<workspace id>/`), so a file found shorter or altered (by a command,
  an editor, a crash) is put back and the user told; the altered file is kept in `memory/damaged/`.
- Damage is reported, never propagated: a MEMORY.md that is not UTF-8 is read with replacement
  characters (raw bytes kept in `memory/damaged/`), and an empty or cut-off MEMORY.md while a
  good copy exists is never taken as "nothing remembered" by consolidation.
- One OS lock on the memory folder (`memory/.writers.lock`) serialises writers across processes.

Version numbers count from the newest: version 1 is the most recently replaced MEMORY.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from nanobot.errors import (
    LockHeld,
    MemoryBusy,
    MemoryUpdateRefused,
    ToolError,
    VersionNotFound,
)
from nanobot.fsio import ExclusiveLock, append_durably, atomic_write, fsync_dir
from nanobot.memory.history_format import STAMP_RE
from nanobot.memory.merge import merge_update
from nanobot.messages import Message, parse_timestamp, transcript_lines
from nanobot.paths import memory_dir, nanobot_home
from nanobot.secrets_mask import mask_secrets

__all__ = [
    "MemoryStore",
    "MemoryInfo",
    "VersionInfo",
    "UpdateOutcome",
    "WriteReceipt",
    "MemoryState",
    "MemoryUpdateRefused",
    "VersionNotFound",
    "MemoryBusy",
    "STAMP_RE",
    "watch_memory",
    "protected_reason",
    "HOLD_BACK_MIN_LINES",
    "HOLD_BACK_MIN_CHARS",
    "HOLD_BACK_KEEP_RATIO",
    "fact_lines",
    "norm_fact",
]

# Hold-back policy (see `apply_update`): an update is held back when the current MEMORY.md has
# at least HOLD_BACK_MIN_LINES fact lines and HOLD_BACK_MIN_CHARS characters, and the update
# keeps fewer than HOLD_BACK_KEEP_RATIO of those fact lines.
HOLD_BACK_MIN_LINES = (
    1  # any remembered fact is worth protecting: young memories are the easiest to wipe
)
HOLD_BACK_MIN_CHARS = 0
HOLD_BACK_KEEP_RATIO = 0.5

# A HISTORY.md entry starts with this stamp (nanobot's format, local time).
_VERSION_RE = re.compile(r"^MEMORY-(\d{8}T\d{6}\.\d{6})Z\.md$")
_VERSION_FMT = "%Y%m%dT%H%M%S.%f"
_LOCK_WAIT_SECONDS = 10.0
# Raw archives keep user and assistant text whole; very long tool output is already in the session file.
_RAW_TOOL_RESULT_CHARS = 4000
_RAW_ARGUMENT_CHARS = 500

Damage = Literal["not_utf8", "empty", "cut_off"]


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
    exact: bool = True  # False when `tokens` is the fallback estimate (tiktoken could not load)


@dataclass(frozen=True)
class WriteReceipt:
    changed: bool
    version: Path | None  # where the replaced content was saved
    masked: bool  # secrets were masked in the new text
    concurrent_change: (
        bool  # the file changed after `base` was read; the write was merged on top of it
    )
    conflicts: tuple[
        str, ...
    ] = ()  # lines of the write that could not be merged (kept under "Held back")


@dataclass(frozen=True)
class UpdateOutcome:
    status: Literal["written", "held_back", "refused"]
    message: str
    version: Path | None = None
    notices: tuple[str, ...] = ()  # for the user: a merge, a damaged file set aside, ...


@dataclass(frozen=True)
class MemoryState:
    """MEMORY.md as read, with what is wrong with it."""

    text: str  # decoded (undecodable bytes become U+FFFD)
    damage: Damage | None
    last_good: str | None  # the last text written through the store (None: never recorded)
    bad_offset: int | None = None  # first undecodable byte

    @property
    def usable(self) -> str:
        """The text consolidation should build on: the last good text when the file is empty or cut off."""
        if self.damage in ("empty", "cut_off") and self.last_good is not None:
            return self.last_good
        return self.text


def norm_fact(line: str) -> str:
    """A fact line compared loosely: bullets, case, spacing and end punctuation don't matter."""
    s = line.strip()
    s = re.sub(r"^(?:[-*+]|\d+[.)])\s+", "", s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".;,").lower()
    return s


def fact_lines(text: str) -> list[str]:
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


_norm, _fact_lines = norm_fact, fact_lines  # older names, kept for callers


def _kept(old: str, new: str) -> tuple[int, int]:
    """(old facts still in `new`, old facts)."""
    old_facts = fact_lines(old)
    new_keys = {norm_fact(x) for x in fact_lines(new)}
    return sum(1 for x in old_facts if norm_fact(x) in new_keys), len(old_facts)


def _drops_most(old: str, new: str) -> tuple[bool, int, int]:
    kept, total = _kept(old, new)
    substantial = total >= HOLD_BACK_MIN_LINES and len(old.strip()) >= HOLD_BACK_MIN_CHARS
    return substantial and kept < HOLD_BACK_KEEP_RATIO * total, kept, total


def _decode(data: bytes) -> tuple[str, int | None]:
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return data.decode("utf-8", "replace"), exc.start


def _diagnose(text: str, bad_offset: int | None, last_good: str | None) -> Damage | None:
    if bad_offset is not None:
        return "not_utf8"
    if not last_good or not last_good.strip() or text == last_good:
        return None
    if not text.strip():
        return "empty"
    if last_good.startswith(text) and (
        not text.endswith("\n") or len(fact_lines(text)) < len(fact_lines(last_good)) / 2
    ):
        return "cut_off"
    return None


def _local_stamp(when: datetime | None = None) -> str:
    when = when or datetime.now()
    if when.tzinfo is not None:
        when = when.astimezone()
    return when.strftime("[%Y-%m-%d %H:%M]")


def _utc_name(prefix: str, suffix: str) -> str:
    return f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S.%f}Z{suffix}"


def _stat_key(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class MemoryStore:
    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)
        self.dir = memory_dir(self.workspace)
        self.memory_file = self.dir / "MEMORY.md"
        self.history_file = self.dir / "HISTORY.md"
        self.versions_dir = self.dir / "versions"
        self.damaged_dir = self.dir / "damaged"
        self._reasons_file = self.versions_dir / "reasons.jsonl"
        self.warnings: list[str] = []  # damage noticed while reading, for the user (deduplicated)
        key = hashlib.sha256(str(self.workspace.expanduser().resolve()).encode()).hexdigest()[:16]
        self.journal_dir = nanobot_home() / "journal" / key
        self.good_copy = self.journal_dir / "MEMORY.md"  # the last text written through this store
        self.history_journal = (
            self.journal_dir / "HISTORY.md"
        )  # every byte ever appended to HISTORY.md
        self._history_stat_file = (
            self.journal_dir / "HISTORY.stat"
        )  # HISTORY.md's inode, size, mtime as left
        self._versions_mirror = self.journal_dir / "versions"  # a copy of memory/versions/

    # ---- reading MEMORY.md -----------------------------------------------------------------

    def read_memory(self) -> str:
        """MEMORY.md's text ("" if missing). Undecodable bytes become U+FFFD, never an exception."""
        data = _read_bytes(self.memory_file)
        if data is None:
            return ""
        text, bad = _decode(data)
        if bad is not None:
            self._keep_raw(data, bad)
        return text

    def state(self) -> MemoryState:
        """MEMORY.md with its damage diagnosed against the last good copy."""
        data = _read_bytes(self.memory_file)
        text, bad = _decode(data) if data is not None else ("", None)
        if bad is not None:
            self._keep_raw(data or b"", bad)
        last_good = self._last_good()
        return MemoryState(text, _diagnose(text, bad, last_good), last_good, bad)

    def _last_good(self) -> str | None:
        data = _read_bytes(self.good_copy)
        if data is not None:
            return _decode(data)[0]
        versions = self._version_files()
        if versions:
            return _decode(versions[-1].read_bytes())[0]
        return None

    def _keep_raw(self, data: bytes, bad: int) -> None:
        digest = hashlib.sha256(data).hexdigest()[:12]
        path = self.damaged_dir / f"MEMORY-{digest}.raw"
        if not path.exists():
            try:
                atomic_write(path, data)
            except OSError:
                pass
        self._warn(
            f"{self.memory_file} is not valid UTF-8 (first bad byte at offset {bad}); it is read "
            f"with replacement characters and the raw bytes are kept at {path}. Fix: {self.undo_hint()}"
        )

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def memory_info(self) -> MemoryInfo:
        from nanobot.memory.token_cache import cached_count

        text = self.read_memory()
        try:
            st = self.memory_file.stat()
            modified, size, exists = datetime.fromtimestamp(st.st_mtime), st.st_size, True
        except FileNotFoundError:
            modified, size, exists = None, 0, False
        tokens, exact = cached_count(text)
        return MemoryInfo(
            self.memory_file, exists, tokens, size, modified, len(self._version_files()), exact
        )

    # ---- writing MEMORY.md (the door) --------------------------------------------------------

    def write_memory(
        self, new_text: str, *, reason: str, base: str | None = None, guard: bool = False
    ) -> WriteReceipt:
        """Replace MEMORY.md atomically, keeping the current content as a version first.

        Secrets are masked. An empty or whitespace-only text raises MemoryUpdateRefused.
        `base` is the content the caller started from (an editor session, a file tool's read);
        if the file changed since, the caller's change (base → new_text) is merged on top of the
        newer text, whose own changes win. `guard` refuses a text that drops most facts
        (MemoryUpdateRefused), for writers that should make targeted edits (the model's file tools).
        """
        if not new_text or not new_text.strip():
            raise MemoryUpdateRefused(
                "refused to replace MEMORY.md with an empty text; the file is unchanged",
                hint="`nanobot memory versions` lists saved versions if something went wrong",
            )
        with self._locked():
            current = self.state().usable
            conflicts: list[str] = []
            concurrent = base is not None and base != current
            if base is not None and concurrent:
                new_text, conflicts = merge_update(base, new_text, current)
                new_text = self._with_held_back(new_text, conflicts)
            if guard:
                drops, kept, total = _drops_most(current, new_text)
                if drops:
                    raise MemoryUpdateRefused(
                        f"refused: this would drop {total - kept} of the {total} facts in MEMORY.md; "
                        "the file is unchanged",
                        hint="change MEMORY.md with edit_file (a small, targeted replacement) and keep the "
                        "facts you were not asked to forget",
                    )
            receipt = self._write_locked(new_text, reason=reason)
        return WriteReceipt(
            receipt.changed, receipt.version, receipt.masked, concurrent, tuple(conflicts)
        )

    def _write_locked(self, new_text: str, *, reason: str) -> WriteReceipt:
        masked = mask_secrets(new_text)
        data = _read_bytes(self.memory_file)
        current = _decode(data)[0] if data is not None else ""
        if masked == current and data == masked.encode("utf-8"):
            self._record_good(masked)
            return WriteReceipt(False, None, masked != new_text, False)
        version = self._save_version(current, reason) if current.strip() else None
        atomic_write(self.memory_file, masked)
        self._record_good(masked)
        return WriteReceipt(True, version, masked != new_text, False)

    def _record_good(self, text: str) -> None:
        if _read_bytes(self.good_copy) != text.encode("utf-8"):
            atomic_write(self.good_copy, text, mode=0o600)

    @staticmethod
    def _with_held_back(text: str, lines: list[str]) -> str:
        if not lines:
            return text
        heading = f"## Held back update ({datetime.now():%Y-%m-%d %H:%M}) — review and merge"
        return text.rstrip("\n") + "\n\n" + heading + "\n\n" + "\n".join(lines) + "\n"

    def apply_update(
        self, new_text: str | None, *, truncated: bool, base: str | None = None
    ) -> UpdateOutcome:
        """Apply a `memory_update` from consolidation under the safety policy.

        - empty or whitespace-only, or `truncated` (finish_reason == "length"): refused;
        - `base` (the MEMORY.md the update was computed from) differs from the file now: the
          update's change is merged on top of the new text (nanobot.memory.merge);
        - the file is empty or cut off while a good copy exists: the update applies to the good copy,
          and the damaged file is kept as a version;
        - the update keeps < HOLD_BACK_KEEP_RATIO of the current fact lines: held back. The
          current facts stay; the update's new lines go under a "Held back update" heading;
        - otherwise: written, with the old content kept as a version.
        """
        problem = self.check_update(new_text, truncated=truncated)
        if problem:
            return UpdateOutcome("refused", problem)
        with self._locked():
            return self._apply_locked(mask_secrets(new_text or ""), base)

    @staticmethod
    def check_update(new_text: str | None, *, truncated: bool) -> str | None:
        """Why a memory update cannot be applied at all, or None."""
        if not new_text or not new_text.strip():
            return "memory update was empty; MEMORY.md left unchanged"
        if truncated:
            return "memory update was cut off (the reply hit its length limit); MEMORY.md left unchanged"
        return None

    def _apply_locked(self, new_text: str, base: str | None) -> UpdateOutcome:
        state = self.state()
        notices: list[str] = []
        old = state.usable
        if state.damage in ("empty", "cut_off") and state.last_good is not None:
            notices.append(
                f"MEMORY.md was {'empty' if state.damage == 'empty' else 'cut off'} (changed outside "
                "nanobot); this update was applied to the last good text instead, and the file "
                "as found is kept as a version (`nanobot memory versions`)"
            )
        if base is not None and base != old:
            new_text, conflicts = merge_update(base, new_text, old)
            new_text = self._with_held_back(new_text, conflicts)
            notices.append(
                "MEMORY.md changed while this update was being prepared (another session or an "
                "edit); the update was merged on top of it and the newer text was kept"
                + (
                    f'; {len(conflicts)} conflicting line(s) are under "Held back update"'
                    if conflicts
                    else ""
                )
            )
        drops, kept, total = _drops_most(old, new_text)
        if drops:
            return self._hold_back(old, new_text, kept, total, notices)
        receipt = self._write_locked(new_text, reason="consolidation")
        if not receipt.changed:
            return UpdateOutcome("written", "MEMORY.md already up to date", None, tuple(notices))
        return UpdateOutcome(
            "written", "MEMORY.md updated (previous version kept)", receipt.version, tuple(notices)
        )

    def _hold_back(
        self, old: str, new_text: str, kept: int, total: int, notices: list[str]
    ) -> UpdateOutcome:
        dropped = total - kept
        seen = {norm_fact(line) for line in old.splitlines() if line.strip()}
        fresh = [
            line.rstrip()
            for line in new_text.splitlines()
            if line.strip() and norm_fact(line) not in seen
        ]
        if not fact_lines("\n".join(fresh)):
            fresh = []  # new headings alone are nothing to review
        summary = (
            f"memory update held back: it would have dropped {dropped} of {total} remembered facts"
        )
        if not fresh:
            if old != self.read_memory():  # a damaged file: put the good text back all the same
                self._write_locked(old, reason="damaged file replaced by the last good text")
            return UpdateOutcome(
                "held_back",
                f"{summary}; it added nothing new, MEMORY.md unchanged",
                None,
                tuple(notices),
            )
        receipt = self._write_locked(
            self._with_held_back(old, fresh), reason="held back consolidation update"
        )
        return UpdateOutcome(
            "held_back",
            f"{summary}; its {len(fresh)} new line(s) were appended to MEMORY.md under "
            f'"Held back update" — review and merge them (`nanobot memory edit`)',
            receipt.version,
            tuple(notices),
        )

    def record_consolidation(
        self,
        history_entry: str,
        memory_update: str | None,
        *,
        truncated: bool,
        base: str | None,
        when: datetime | None = None,
    ) -> tuple[str, UpdateOutcome]:
        """Both or neither: check the history entry and the memory update, then write both.

        Returns (the entry's first line, the memory outcome). Raises MemoryUpdateRefused, writing
        nothing, when either part fails its checks.
        """
        if not mask_secrets(history_entry or "").strip():
            raise MemoryUpdateRefused("the history entry was empty; nothing was written")
        problem = self.check_update(memory_update, truncated=truncated)
        if problem:
            raise MemoryUpdateRefused(
                problem.replace("MEMORY.md left unchanged", "nothing was written")
            )
        with self._locked():
            outcome = self._apply_locked(mask_secrets(memory_update or ""), base)
            first = self._append_history_locked(history_entry, when)
        return first, outcome

    # ---- versions --------------------------------------------------------------------------

    def versions(self) -> list[VersionInfo]:
        """Saved versions, newest first (number 1 = the most recently replaced content)."""
        reasons = self._reasons()
        out = []
        for i, path in enumerate(reversed(self._version_files()), start=1):
            stamp = _VERSION_RE.match(path.name).group(1)  # type: ignore[union-attr]
            saved = datetime.strptime(stamp, _VERSION_FMT).replace(tzinfo=UTC)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            out.append(VersionInfo(i, path, saved, size, reasons.get(path.name, "")))
        return out

    def read_version(self, n: int) -> str:
        return _decode(self._version(n).path.read_bytes())[0]

    def restore(self, n: int) -> WriteReceipt:
        """Make version `n` the current MEMORY.md; the current file is saved as a version first."""
        version = self._version(n)
        return self.write_memory(
            _decode(version.path.read_bytes())[0],
            reason=f"restore of the version saved {version.saved_at:%Y-%m-%d %H:%M:%S} UTC",
        )

    def undo_hint(self) -> str:
        """How to go back: `restore 1` only when a saved version exists (else it answers "no version 1")."""
        if self._version_files():
            return "`nanobot memory restore 1` (or `nanobot memory versions` to pick one)"
        return "`nanobot memory edit` (no saved version to restore yet)"

    def _version(self, n: int) -> VersionInfo:
        all_versions = self.versions()
        if not 1 <= n <= len(all_versions):
            have = f"1..{len(all_versions)}" if all_versions else "none saved yet"
            raise VersionNotFound(
                f"no MEMORY.md version {n} (versions: {have})",
                hint="`nanobot memory versions` lists them",
            )
        return all_versions[n - 1]

    def _version_files(self) -> list[Path]:
        """Oldest first: the names are UTC timestamps, so name order is time order."""
        try:
            names = [p for p in self.versions_dir.iterdir() if _VERSION_RE.match(p.name)]
        except FileNotFoundError:
            return []
        return sorted(names, key=lambda p: p.name)

    def _save_version(self, content: str, reason: str) -> Path:
        now = datetime.now(UTC).replace(tzinfo=None)
        files = self._version_files()
        if files:
            # Names must keep sorting in save order even if the clock steps back or repeats.
            latest = datetime.strptime(_VERSION_RE.match(files[-1].name).group(1), _VERSION_FMT)  # type: ignore[union-attr]
            now = max(now, latest + timedelta(microseconds=1))
        path = self.versions_dir / f"MEMORY-{now.strftime(_VERSION_FMT)}Z.md"
        atomic_write(path, content)
        atomic_write(self._versions_mirror / path.name, content, mode=0o600)
        line = json.dumps({"version": path.name, "reason": reason}, ensure_ascii=False)
        append_durably(self._reasons_file, line + "\n")
        append_durably(self._versions_mirror / self._reasons_file.name, line + "\n")
        return path

    def _versions_stat(self) -> dict[str, tuple[int, int, int] | None]:
        try:
            return {p.name: _stat_key(p) for p in self.versions_dir.iterdir()}
        except FileNotFoundError:
            return {}

    def _mirror_versions(self) -> None:
        """Copy into the journal the versions saved before it kept them (a workspace from before)."""
        try:
            names = [p.name for p in self.versions_dir.iterdir() if p.is_file()]
        except FileNotFoundError:
            return
        for name in names:
            if not (self._versions_mirror / name).exists():
                atomic_write(
                    self._versions_mirror / name,
                    (self.versions_dir / name).read_bytes(),
                    mode=0o600,
                )

    def _restore_versions(self) -> int:
        """Put back versions (and their reasons) changed or deleted by something else; how many."""
        try:
            mirrored = [p for p in self._versions_mirror.iterdir() if p.is_file()]
        except FileNotFoundError:
            return 0
        fixed = 0
        for copy in mirrored:
            data = copy.read_bytes()
            if _read_bytes(self.versions_dir / copy.name) != data:
                atomic_write(self.versions_dir / copy.name, data)
                fixed += 1
        return fixed

    def _reasons(self) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            lines = self._reasons_file.read_text(encoding="utf-8", errors="replace").splitlines()
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
        # Consolidations in several processes, `memory edit` and the file tools may write at once;
        # one lock on the folder makes "check, save version, replace, append" a single step.
        lock = ExclusiveLock(self.dir / ".writers")
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        while True:
            try:
                lock.acquire()
                break
            except LockHeld:
                if time.monotonic() > deadline:
                    raise MemoryBusy(
                        f"the memory folder is locked by another process ({lock.path})",
                        hint="wait for it to finish, then try again",
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            lock.release()

    # ---- HISTORY.md ------------------------------------------------------------------------

    def append_history(self, entry: str, *, when: datetime | None = None) -> str:
        """Append a dated entry (masked, stamped if needed) durably; returns its first line.

        An empty entry writes nothing and returns "".
        """
        with self._locked():
            return self._append_history_locked(entry, when)

    def _append_history_locked(self, entry: str, when: datetime | None) -> str:
        text = mask_secrets(entry).strip("\n").rstrip()
        if not text.strip():
            return ""
        if not STAMP_RE.match(text):
            text = f"{_local_stamp(when)} {text.lstrip()}"
        self._ensure_journal()
        payload = (self._separator() + text + "\n\n").encode("utf-8")
        # journal first: a crash between the two leaves HISTORY.md short, which start-up completes
        append_durably(self.history_journal, payload)
        append_durably(self.history_file, payload)
        self._record_history_stat()
        return text.splitlines()[0]

    def _record_history_stat(self) -> None:
        """Remember how nanobot left HISTORY.md, so start-up knows without reading it whether it was touched."""
        key = _stat_key(self.history_file)
        atomic_write(self._history_stat_file, json.dumps(list(key) if key else None), mode=0o600)

    def _history_untouched(self) -> bool:
        try:
            recorded = json.loads(self._history_stat_file.read_text())
        except (OSError, ValueError):
            return False
        key = _stat_key(self.history_file)
        return recorded is not None and key is not None and list(key) == recorded

    def history_tail(self, max_bytes: int) -> str:
        """The last `max_bytes` of HISTORY.md as text ("" when there is none)."""
        try:
            with open(self.history_file, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - max_bytes))
                return fh.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def append_raw_archive(self, messages: list[Message], reason: str, *, marker: str = "") -> str:
        """Archive messages the summariser failed on as a RAW entry (ending with `marker`); returns its first line."""
        stamps = [s for s in (parse_timestamp(m.get("timestamp")) for m in messages) if s]
        span = ""
        if stamps:
            span = f", {_local_stamp(stamps[0])[1:-1]} to {_local_stamp(stamps[-1])[1:-1]}"
        head = f"{_local_stamp(stamps[0] if stamps else None)} RAW archive of {len(messages)} message(s){span} — {reason}"
        lines = [head]
        for msg in messages:
            lines.extend(_raw_lines(msg))
        if marker:
            lines.append(marker)
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

    def _ensure_journal(self) -> None:
        """Start the journal from the current HISTORY.md (a workspace from before the journal)."""
        if self.history_journal.exists():
            return
        self.journal_dir.mkdir(parents=True, exist_ok=True)
        (self.journal_dir / "workspace.txt").write_text(
            str(self.workspace.expanduser().resolve()) + "\n"
        )
        if self.history_file.exists():
            tmp = self.history_journal.with_suffix(".tmp")
            shutil.copyfile(self.history_file, tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, self.history_journal)
        else:
            append_durably(self.history_journal, b"")
        os.chmod(
            self.history_journal, 0o600
        )  # a copy of personal history: as private as the sessions
        fsync_dir(self.journal_dir)

    def repair_history(self, *, thorough: bool = False) -> str | None:
        """Put back what HISTORY.md lost or had changed, from the journal; a message for the user, or None.

        Cheap when HISTORY.md is as nanobot left it (same inode, size and mtime); otherwise it is
        compared with the journal in full (`thorough` forces that): a missing tail is appended, any
        other difference (an edit, an insertion, an append by something else) is undone, with the
        altered file kept in memory/damaged/. Call it under the lock.
        """
        if not self.history_journal.exists():
            if self.history_file.exists():
                self._ensure_journal()
                self._record_history_stat()
            return None
        if not thorough and self._history_untouched():
            return None
        data = _read_bytes(self.history_file) or b""
        journal = self.history_journal.read_bytes()
        message = None
        if data == journal:
            pass
        elif journal.startswith(data):
            append_durably(self.history_file, journal[len(data) :])
            message = (
                f"{self.history_file} was {len(journal) - len(data):,} bytes shorter than nanobot left it "
                f"(cut off); the lost part was restored from the journal ({self.history_journal})"
            )
        else:
            aside = self.damaged_dir / _utc_name("HISTORY", ".md")
            if data:
                atomic_write(aside, data)
            atomic_write(self.history_file, journal)
            kept = f"; the altered file is kept at {aside}" if data else ""
            message = (
                f"{self.history_file} had been changed outside nanobot (it is append-only); it was put "
                f"back from the journal ({self.history_journal}){kept}"
            )
        self._record_history_stat()
        return message

    # ---- start-up and outside changes ---------------------------------------------------------

    def startup_check(self) -> list[str]:
        """What went wrong with the memory files since nanobot last wrote them; fixes what it safely can.

        HISTORY.md found shorter is completed from the journal; an outside edit of MEMORY.md (an
        editor) is adopted and the text it replaced kept as a version; an empty, cut-off or
        non-UTF-8 MEMORY.md is reported with the fix.
        """
        messages: list[str] = []
        try:
            with self._locked():
                fixed = self.repair_history()
                if fixed:
                    messages.append(fixed)
                messages.extend(self._adopt_outside_edit())
        except (MemoryBusy, OSError) as exc:
            if (
                self.read_only_notice() is None
            ):  # a read-only folder is said once, by read_only_notice
                messages.append(f"could not check the memory files: {exc}")
        messages.extend(w for w in self.warnings if w not in messages)
        return messages

    def read_only_notice(self) -> str | None:
        """One line, with the fix, when the memory folder cannot be written (a read-only mount or
        folder); None when it can (or does not exist yet: it is made on the first write)."""
        folder = self.dir if self.dir.exists() else self.workspace
        if not folder.exists() or os.access(folder, os.W_OK):
            return None
        return (
            f"{folder} is read-only: nanobot answers, but remembers nothing new (MEMORY.md, HISTORY.md) "
            f"until it can write there; make it writable, or set agents.defaults.workspace to a "
            f"writable folder"
        )

    def _adopt_outside_edit(self) -> list[str]:
        state = self.state()
        if state.damage in ("empty", "cut_off"):
            what = "empty" if state.damage == "empty" else "cut off"
            return [
                f"{self.memory_file} is {what}, but nanobot last saved {len(fact_lines(state.last_good or ''))} "
                f"fact line(s) there; consolidation will keep building on the saved text. Fix: {self.undo_hint()}"
            ]
        if (
            state.damage is None
            and state.last_good is not None
            and state.text != state.last_good
            and self.memory_file.exists()
            and self.good_copy.exists()
        ):
            self._save_version(state.last_good, "edited outside nanobot (detected at start-up)")
            self._record_good(state.text)
        elif state.damage is None and not self.good_copy.exists() and state.text.strip():
            self._record_good(state.text)
        return []

    def snapshot(self) -> _Snapshot:
        """What the memory files look like now, so a command's changes can be found and undone."""
        try:
            with self._locked():
                self._adopt_outside_edit()
                if self.history_file.exists():
                    self._ensure_journal()
                self._mirror_versions()
        except (MemoryBusy, OSError):
            pass
        return _Snapshot(
            _stat_key(self.memory_file),
            _read_bytes(self.memory_file),
            _stat_key(self.history_file),
            self._versions_stat(),
        )

    def undo_outside_changes(self, before: _Snapshot) -> str:
        """Undo what something other than this store did to MEMORY.md / HISTORY.md since `before`.

        Returns a note for the model ("" when nothing changed).
        """
        if (
            _stat_key(self.memory_file) == before.memory_stat
            and _stat_key(self.history_file) == before.history_stat
            and self._versions_stat() == before.versions_stat
        ):
            return ""
        notes: list[str] = []
        try:
            with self._locked():
                if self._versions_stat() != before.versions_stat:
                    fixed = self._restore_versions()
                    if fixed:
                        notes.append(
                            f"{fixed} file(s) of memory/versions/ were changed or deleted by this command "
                            "and have been put back"
                        )
                if _stat_key(self.memory_file) != before.memory_stat:
                    notes.extend(self._undo_memory_change(before))
                if _stat_key(self.history_file) != before.history_stat:
                    repaired = self.repair_history(thorough=True)
                    if repaired:
                        notes.append(
                            "memory/HISTORY.md is append-only and only nanobot adds to it: the "
                            "command's change was undone"
                        )
        except (MemoryBusy, OSError) as exc:
            return f"\n[warning: the memory folder could not be checked after this command: {exc}]"
        if not notes:
            return ""
        return (
            "\n[nanobot: "
            + "; ".join(notes)
            + ". Change MEMORY.md only with edit_file or write_file "
            "(they keep versions); recall past conversations with search_history.]"
        )

    def _undo_memory_change(self, before: _Snapshot) -> list[str]:
        # a symlink put in its place is replaced, never read: it could point at any file
        now = None if self.memory_file.is_symlink() else _read_bytes(self.memory_file)
        good = _read_bytes(self.good_copy)
        target = good if good is not None else before.memory_bytes
        if now == target or target is None:
            return []
        if now:
            self._save_version(_decode(now)[0], "changed by an exec command (undone)")
        atomic_write(self.memory_file, target)
        return [
            "memory/MEMORY.md was changed by this command and has been put back (the command's text "
            "is kept as a version)"
            if now
            else "memory/MEMORY.md was removed by this command and has been put back"
        ]


def protected_reason(workspace: Path, target: Path) -> str | None:
    """Why a file tool may not rewrite `target` (a resolved path), or None.

    HISTORY.md is append-only (only consolidation adds to it); versions and damaged copies are
    the store's safety net.
    """
    store = MemoryStore(workspace)
    folder = store.dir.resolve()
    if target == store.history_file.resolve():
        return (
            "memory/HISTORY.md is append-only: nanobot adds a dated entry to it when it consolidates, and "
            "no tool may rewrite it. Read it with search_history (or read_file); lasting facts belong "
            "in memory/MEMORY.md"
        )
    for sub in (store.versions_dir, store.damaged_dir):
        if target.is_relative_to(sub.resolve()):
            return (
                f"{target.relative_to(folder)} belongs to nanobot's memory store (saved versions and damaged "
                "copies) and cannot be changed by a tool; the user restores versions with "
                "`nanobot memory restore N`"
            )
    if target.is_relative_to(store.journal_dir.resolve()):
        return "the memory journal belongs to nanobot and cannot be changed by a tool"
    return None


@dataclass(frozen=True)
class _Snapshot:
    memory_stat: tuple[int, int, int] | None
    memory_bytes: bytes | None
    history_stat: tuple[int, int, int] | None
    versions_stat: dict[str, tuple[int, int, int] | None] = field(default_factory=dict)


@dataclass
class _Watch:
    store: MemoryStore
    before: _Snapshot
    note: str = field(default="")


@contextmanager
def watch_memory(workspace: Path) -> Iterator[_Watch]:
    """Around a shell command: undo its changes to memory/ afterwards; `.note` tells the model.

    A ToolError raised inside gets the note appended. exec uses it only where its sandbox cannot
    make memory/ read-only to the command (`Confinement.memory_read_only`): no mount namespace, or
    no confinement at all.
    """
    store = MemoryStore(workspace)
    watch = _Watch(store, store.snapshot())
    try:
        yield watch
    except ToolError as exc:
        watch.note = store.undo_outside_changes(watch.before)
        if watch.note:
            raise ToolError(exc.message + watch.note, hint=exc.hint) from exc
        raise
    except BaseException:
        store.undo_outside_changes(watch.before)
        raise
    watch.note = store.undo_outside_changes(watch.before)


def _indent(text: str) -> str:
    # Continuation lines are indented so message text can never look like an entry stamp.
    return "\n  ".join(text.splitlines()) if text else ""


def _raw_lines(msg: Message) -> list[str]:
    return [
        _indent(line)
        for line in transcript_lines(
            msg,
            tool_chars=_RAW_TOOL_RESULT_CHARS,
            arg_chars=_RAW_ARGUMENT_CHARS,
            note=", not archived",
        )
    ]
