"""Bring a nanobot user's conversations along: sessions from nanobot 0.1.x and 0.3.x, and
0.3.x's memory/history.jsonl, copied into our store on first use.

Where nanobot keeps them:
- 0.1.x: `<workspace>/sessions/<key with ':' as '_'>.jsonl`, and, in older releases,
  `~/.nanobot/sessions/<same>.jsonl`, beside our own files (ours are `<slug>-<hash>.jsonl`);
- 0.3.x: `~/.nanobot/sessions/<workspace id>/<base64url of the key>.jsonl`, where the id is in
  `<workspace>/.nanobot/workspace-id` and the folder's `.workspace` names the workspace;
- 0.3.x: `<workspace>/memory/history.jsonl`, one `{"cursor", "timestamp", "content"}` per line.

Rules: the originals are only read, never changed; a session we already have is never
overwritten (ours may have moved on since); every import is recorded in a receipt
(`~/.nanobot/imports.jsonl`: source, its SHA-256 and size, what it became) so nothing is
imported twice; an imported session is our JSONL format byte for byte, so it is loaded
and sent through the same rules as every other session (damaged lines set aside, the
pointer range-checked, get_history made valid).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from nanobot import paths
from nanobot.errors import LockHeld
from nanobot.fsio import ExclusiveLock, append_durably, atomic_write
from nanobot.messages import now_iso, parse_timestamp
from nanobot.session.store import SessionStore, is_our_file

RECEIPTS_NAME = "imports.jsonl"


@dataclass
class Receipt:
    kind: str  # "session" | "history" | "kept" (not imported: we had that session already)
    source: str  # the nanobot file read (left as it was)
    sha256: str  # of the source's bytes when imported
    size: int
    format: str  # "nanobot-0.1" | "nanobot-0.3"
    target: str  # our file it went into
    key: str = ""  # the session key (sessions)
    messages: int = 0  # messages imported (sessions) or entries (history)
    last_cursor: int = 0  # history: the highest cursor imported
    imported_at: str = ""

    def describe(self) -> str:
        if self.kind == "session":
            return f"session {self.key}: {self.messages} messages from {self.source}"
        entries = "1 entry" if self.messages == 1 else f"{self.messages} entries"
        return f"history: {entries} from {self.source} appended to {self.target}"


@dataclass
class ImportResult:
    imported: list[Receipt]
    kept: list[str]  # nanobot sessions not imported because we already have that key (ours wins)


def continuing_line(key: str, message_count: int, home: Path | None = None) -> str | None:
    """What the chat says when it opens a session imported from nanobot that has no turn of ours yet."""
    for receipt in reversed(read_receipts(home)):
        if receipt.kind == "session" and receipt.key == key:
            if receipt.messages == message_count:
                return f"continuing your nanobot session {key} ({receipt.messages} messages)"
            return None
    return None


@dataclass
class _Found:
    key: str
    path: Path
    format: str


def _receipts_path(home: Path) -> Path:
    return home / RECEIPTS_NAME


def read_receipts(home: Path | None = None) -> list[Receipt]:
    path = _receipts_path(home or paths.nanobot_home())
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            out.append(Receipt(**json.loads(line)))
        except (TypeError, ValueError):
            continue  # a torn last line costs only itself
    return out


def _record(home: Path, receipt: Receipt) -> None:
    append_durably(_receipts_path(home), json.dumps(asdict(receipt), ensure_ascii=False) + "\n")


def _first_meta(path: Path) -> dict:
    """The file's first line, when it is a metadata record (only that line is read: a session
    file can be tens of megabytes, and this runs for every file on every start)."""
    try:
        with path.open("rb") as fh:
            first = (
                fh.readline().rstrip(b"\n").rstrip(b"\r").removeprefix(b"\xef\xbb\xbf")
            )  # CRLF, a BOM
    except OSError:
        return {}
    try:
        record = json.loads(first.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("_type") == "metadata" else {}


def _key_from_v01_name(stem: str) -> str:
    # 0.1.x wrote "cli:direct" as cli_direct.jsonl; the metadata line has the exact key
    channel, sep, rest = stem.partition("_")
    return f"{channel}:{rest}" if sep else stem


def _key_from_v03_name(stem: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(stem + "=" * (-len(stem) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def _workspace_id(workspace: Path) -> str:
    try:
        return (workspace / ".nanobot" / "workspace-id").read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def _v03_folders(home: Path, workspace: Path) -> list[Path]:
    """0.3.x session folders that belong to this workspace (by its id, or by the path they record)."""
    root = home / "sessions"
    if not root.is_dir():
        return []
    wanted = _workspace_id(workspace)
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            recorded = (folder / ".workspace").read_text(encoding="utf-8").strip()
        except OSError:
            recorded = ""
        same_path = (
            bool(recorded) and Path(recorded).expanduser().absolute() == workspace.absolute()
        )
        if (wanted and folder.name == wanted) or same_path:
            out.append(folder)
    return out


def find_sessions(home: Path, workspace: Path, store: SessionStore) -> list[_Found]:
    """Every nanobot session file for this workspace, 0.3.x first (it is the newer copy)."""
    found: list[_Found] = []
    for folder in _v03_folders(home, workspace):
        for path in sorted(folder.glob("*.jsonl")):
            key = _first_meta(path).get("key") or _key_from_v03_name(path.stem)
            if isinstance(key, str) and key:
                found.append(_Found(key, path, "nanobot-0.3"))
    for folder in (
        workspace / "sessions",
        store.directory,
    ):  # 0.1.x; older 0.1.x beside our own files
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.jsonl")):
            if folder == store.directory and is_our_file(path) or not path.is_file():
                continue  # ours (however damaged: the store sets its bad lines aside), or not a file
            key = _first_meta(path).get("key") or _key_from_v01_name(path.stem)
            if isinstance(key, str) and key and path != store.path_for(key):
                found.append(_Found(key, path, "nanobot-0.1"))
    return found


def _count_messages(data: bytes) -> int:
    count = 0
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and "_type" not in record
            and isinstance(record.get("role"), str)
        ):
            count += 1
    return count


def _import_session(
    store: SessionStore, home: Path, found: _Found, kept: list[str]
) -> Receipt | None:
    target = store.path_for(found.key)
    data = found.path.read_bytes()
    lock = ExclusiveLock(target)
    try:
        lock.acquire()
    except LockHeld:  # the session is open in another nanobot process, so it is ours already
        kept.append(f"{found.key} ({found.path}): the session here is in use")
        return None
    try:
        if target.exists() and target.stat().st_size > 0:
            # never overwrite a session we have: it may have moved on since; said once, then recorded
            kept.append(f"{found.key} ({found.path}): a session with that key exists here already")
            _record(
                home,
                Receipt(
                    "kept",
                    str(found.path),
                    hashlib.sha256(data).hexdigest(),
                    len(data),
                    found.format,
                    str(target),
                    key=found.key,
                    imported_at=now_iso(),
                ),
            )
            return None
        atomic_write(target, data)
    finally:
        lock.release()
    receipt = Receipt(
        "session",
        str(found.path),
        hashlib.sha256(data).hexdigest(),
        len(data),
        found.format,
        str(target),
        key=found.key,
        messages=_count_messages(data),
        imported_at=now_iso(),
    )
    _record(home, receipt)
    return receipt


def _messages(data: bytes) -> list[dict]:
    """The message records of a session file (metadata, decisions and unreadable lines left out)."""
    out = []
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and "_type" not in record
            and isinstance(record.get("role"), str)
        ):
            out.append(record)
    return out


def _continue_session(home: Path, found: _Found, last: Receipt, kept: list[str]) -> Receipt | None:
    """New turns made in nanobot after the import (the user went back and forth): appended to our
    copy when that is safe, i.e. nanobot's file still begins with what was imported and our copy
    has not moved on since; otherwise both are kept apart, and the user is told which and why (once)."""
    data = found.path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    target = Path(last.target)
    theirs, imported = _messages(data), last.messages
    lock = ExclusiveLock(target)
    try:
        lock.acquire()
    except LockHeld:
        return None  # open in a chat: looked at again on the next start
    try:
        ours = _messages(target.read_bytes()) if target.is_file() else []
        if (
            len(theirs) > imported
            and theirs[:imported] == ours[:imported]
            and len(ours) == imported
        ):
            append_durably(
                target, "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in theirs[imported:])
            )
            receipt = Receipt(
                "session",
                str(found.path),
                sha,
                len(data),
                found.format,
                str(target),
                key=found.key,
                messages=len(theirs),
                imported_at=now_iso(),
            )
            _record(home, receipt)
            return receipt
        if theirs[:imported] != ours[:imported] or len(theirs) < imported:
            why = "nanobot rewrote it since the import (a /new or an edit), so its turns no longer follow ours"
        elif len(theirs) == imported:
            return None  # only nanobot's metadata changed: nothing to bring
        else:
            why = (
                f"it has {len(theirs) - imported} new message(s) there and this copy has "
                f"{len(ours) - imported} here since the import; mixing them would interleave two conversations"
            )
        kept.append(
            f"{found.key} ({found.path}): kept apart: {why}; continue it in one tool, or start "
            "afresh here with /new"
        )
        _record(
            home,
            Receipt(
                "kept",
                str(found.path),
                sha,
                len(data),
                found.format,
                str(target),
                key=found.key,
                messages=imported,
                imported_at=now_iso(),
            ),
        )
        return None
    finally:
        lock.release()


def _unchanged(path: Path, receipt: Receipt) -> bool:
    """The file is as the receipt saw it (size first: the hash is read only when the size matches)."""
    try:
        if path.stat().st_size != receipt.size:
            return False
        return hashlib.sha256(path.read_bytes()).hexdigest() == receipt.sha256
    except OSError:
        return True  # unreadable now: nothing to do until it reads again


def _history_entries(path: Path) -> list[dict]:
    entries = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(record, dict)
            and isinstance(record.get("cursor"), int)
            and isinstance(record.get("content"), str)
        ):
            entries.append(record)
    return entries


def _import_history(home: Path, workspace: Path, receipts: list[Receipt]) -> Receipt | None:
    source = workspace / "memory" / "history.jsonl"
    if not source.is_file():
        return None
    from nanobot.memory.store import MemoryStore

    already = max(
        (r.last_cursor for r in receipts if r.kind == "history" and r.source == str(source)),
        default=0,
    )
    data = source.read_bytes()
    fresh = sorted(
        (e for e in _history_entries(source) if e["cursor"] > already), key=lambda e: e["cursor"]
    )
    if not fresh:
        return None
    memory = MemoryStore(workspace)
    for entry in fresh:
        memory.append_history(entry["content"], when=parse_timestamp(entry.get("timestamp")))
    receipt = Receipt(
        "history",
        str(source),
        hashlib.sha256(data).hexdigest(),
        len(data),
        "nanobot-0.3",
        str(memory.history_file),
        messages=len(fresh),
        last_cursor=fresh[-1]["cursor"],
        imported_at=now_iso(),
    )
    _record(home, receipt)
    return receipt


def waiting(key: str, workspace: Path, *, home: Path | None = None) -> Path | None:
    """nanobot's file for session `key` when it has not been imported yet (the first chat or
    `nanobot session list` imports it): what `nanobot status` says instead of "new"."""
    home = home or paths.nanobot_home()
    done = {r.source for r in read_receipts(home) if r.kind in ("session", "kept")}
    try:
        found = find_sessions(home, workspace, SessionStore())
    except OSError:
        return None
    return next((f.path for f in found if f.key == key and str(f.path) not in done), None)


def import_all(
    workspace: Path, *, store: SessionStore | None = None, home: Path | None = None
) -> ImportResult:
    """Import whatever nanobot left for this workspace that we have not imported yet."""
    home = home or paths.nanobot_home()
    store = store or SessionStore()
    receipts = read_receipts(home)
    done = {r.source for r in receipts if r.kind in ("session", "kept")}
    latest = {
        r.source: r for r in receipts if r.kind in ("session", "kept")
    }  # the last word on each
    imported = {r.source: r for r in receipts if r.kind == "session"}  # the last import of each
    result = ImportResult([], [])
    try:
        found_all = find_sessions(home, workspace, store)
    except OSError as exc:  # an unreadable folder must not stop the chat
        result.kept.append(f"nanobot's sessions could not be read: {exc}")
        found_all = []
    for found in found_all:
        source = str(found.path)
        if source in done:  # imported before: only turns added in nanobot since then come across
            last = imported.get(source)
            if last is None or _unchanged(found.path, latest[source]):
                continue
            work = partial(_continue_session, home, found, last, result.kept)
            failed = "new turns could not be imported"
        else:
            work, failed = (
                partial(_import_session, store, home, found, result.kept),
                "could not be imported",
            )
        try:
            receipt = work()
        except OSError as exc:
            result.kept.append(f"{found.key} ({found.path}): {failed}: {exc}")
            continue
        if receipt is not None:
            result.imported.append(receipt)
            done.add(source)
    try:
        history = _import_history(home, workspace, receipts)
    except OSError as exc:
        result.kept.append(f"nanobot's history.jsonl could not be imported: {exc}")
        history = None
    if history is not None:
        result.imported.append(history)
    return result
