"""File tools: read, write, edit and list.

Every call takes the same steps, each owned by workspace_guard:
1. where: `resolve_path` (restrictToWorkspace refuses anything outside the workspace);
2. ask: `approve_access` when the access is risky (outside the workspace, a file that runs at
   login or on a schedule, MEMORY.md, a skill), showing the change as a diff;
3. open: `open_regular` / `open_parent_dir`, which check the descriptor (a regular file, the
   file that was checked, no link swapped in), then read or write.
"""

from __future__ import annotations

import difflib
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from nanobot.errors import NanobotError, ToolError
from nanobot.tools.approval import Decision
from nanobot.tools.base import Tool, ToolContext
from nanobot.tools.workspace_guard import (
    DIR_FLAGS,
    approve_access,
    change_diff,
    content_risks,
    display_path,
    location_risks,
    open_dir,
    open_parent_dir,
    open_regular,
    read_capped,
    resolve_path,
    workspace_root,
)

__all__ = ["ReadFileTool", "WriteFileTool", "EditFileTool", "ListDirTool", "READ_CHAR_CAP"]

READ_CHAR_CAP = 50_000  # characters returned by one read_file call
MAX_TEXT_FILE_BYTES = 32 * 1024 * 1024  # larger files are refused rather than loaded whole
MAX_COUNTED_EXTRA = 10_000  # list_dir stops counting entries past its cap here
SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules"})


async def _read_text(ctx: ToolContext, path: Path, shown: str, tool: str) -> str:
    """The file's text, or a ToolError the model can act on (missing, directory, device, binary...)."""
    if not os.path.lexists(path):
        raise ToolError(f"file not found: {shown}")
    fd = await open_regular(ctx, path, shown, tool)
    try:
        data = read_capped(fd, MAX_TEXT_FILE_BYTES, shown)
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if b"\x00" in data:
        raise ToolError(
            f"{shown} looks like a binary file (it contains NUL bytes); read_file only reads text"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{shown} is not UTF-8 text (undecodable byte at offset {exc.start}); read_file only reads text"
        ) from exc


def _current_text(path: Path) -> str | None:
    """What a file holds now, for the user's diff only (never shown to the model); None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return read_capped(fd, 256 * 1024, str(path)).decode("utf-8", errors="replace")
    except (OSError, ToolError):
        return "(too large to show)\n"
    finally:
        os.close(fd)


def _refuse_non_regular(path: Path, shown: str) -> None:
    """A write replaces a regular file or creates one; a directory, FIFO or device is refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(mode):
        raise ToolError(f"{shown} is a directory; give a file path")
    if not stat.S_ISREG(mode) and not stat.S_ISLNK(mode):
        raise ToolError(
            f"{shown} is not a regular file (a FIFO, socket or device); file tools only write regular files"
        )


def _split_lines(text: str) -> list[str]:
    """Lines with their endings kept; only "\\n" ends a line (the way sed and wc count)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


class ReadFileTool(Tool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file. Returns the text of lines offset..offset+limit-1 (1-based), at most "
        f"{READ_CHAR_CAP:,} characters per call; when cut, a note says which offset to continue from."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, relative to the workspace or absolute.",
            },
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "First line to return (1-based).",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Maximum number of lines to return.",
            },
        },
        "required": ["path"],
    }

    # required arguments: the schema check refuses a call without them before run() is reached
    async def run(self, path: str, offset: int = 1, limit: int | None = None, **_: Any) -> str:  # type: ignore[override]
        target = resolve_path(self.ctx, path)
        shown = display_path(self.ctx, target)
        if os.path.lexists(target):  # asking about a file that is not there would only annoy
            await approve_access(
                self.ctx, self.name, "read", target, location_risks(self.ctx, target, "read")
            )
        lines = _split_lines(await _read_text(self.ctx, target, shown, self.name))
        total = len(lines)
        if total == 0:
            return f"({shown} is empty)"
        if offset > total:
            raise ToolError(f"offset {offset} is past the end of {shown}, which has {total} lines")

        stop = total if limit is None else min(total, offset - 1 + limit)
        picked: list[str] = []
        used = 0
        for line in lines[offset - 1 : stop]:
            if used + len(line) > READ_CHAR_CAP:
                break
            picked.append(line)
            used += len(line)

        if not picked:
            # A single line longer than the cap (minified code, a data blob): show its head.
            head = lines[offset - 1][:READ_CHAR_CAP]
            return (
                f"{head}\n[truncated: line {offset} of {total} is {len(lines[offset - 1]):,} characters long; "
                f"showing its first {READ_CHAR_CAP:,}. Use exec (e.g. cut or fold) to see the rest"
                + (
                    f", or read_file with offset={offset + 1} for the next line]"
                    if offset < total
                    else "]"
                )
            )

        last = offset - 1 + len(picked)
        body = "".join(picked)
        if last >= total:
            return body
        sep = "" if body.endswith("\n") else "\n"
        cut_by_cap = last < stop
        label = "truncated: showing" if cut_by_cap else "showing"
        return f"{body}{sep}[{label} lines {offset}-{last} of {total}; call read_file with offset={last + 1} to continue]"


class WriteFileTool(Tool):
    name = "write_file"
    description = (
        "Create or overwrite a text file with the given content; parent directories are created."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, relative to the workspace or absolute.",
            },
            "content": {"type": "string", "description": "The complete new content of the file."},
        },
        "required": ["path", "content"],
    }

    async def run(self, path: str, content: str, **_: Any) -> str:  # type: ignore[override]  # (as read_file)
        target = resolve_path(self.ctx, path)
        shown = display_path(self.ctx, target)
        _refuse_non_regular(target, shown)
        _refuse_memory_internals(self.ctx, target)
        # ask: outside the workspace, a login/schedule file, memory or a skill (with the diff)
        before = _current_text(target)
        risks = location_risks(self.ctx, target, "write") + content_risks(
            self.ctx, target, (before, content)
        )
        decision = await approve_access(
            self.ctx,
            self.name,
            "write",
            target,
            risks,
            detail=change_diff(before, content, shown) if risks else "",
        )
        routed = _memory_write(self.ctx, target, content, base=None) or _prompt_write(
            self.ctx, target, content, decision
        )
        if routed is not None:
            return routed
        payload = content.encode("utf-8")
        existed = os.path.lexists(target)
        _write(self.ctx, target, payload, shown)
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {shown} ({len(payload):,} bytes written)"


def _write(ctx: ToolContext, target: Path, payload: bytes, shown: str) -> None:
    """Atomic replace inside the checked folder's descriptor; keeps an existing file's permission
    bits (a script stays executable); a new file is 0600. A symlink at the name is replaced, not followed."""
    dir_fd = open_parent_dir(ctx, target, shown)
    tmp = f".{target.name}.{secrets.token_hex(4)}.tmp"
    try:
        try:
            st = os.stat(target.name, dir_fd=dir_fd, follow_symlinks=False)
            mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None
        except FileNotFoundError:
            mode = None
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
            0o600,
            dir_fd=dir_fd,
        )
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
    except PermissionError as exc:
        _discard(tmp, dir_fd)
        raise ToolError(f"permission denied writing {shown}") from exc
    except OSError as exc:
        _discard(tmp, dir_fd)
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    finally:
        os.close(dir_fd)


def _discard(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


class EditFileTool(Tool):
    name = "edit_file"
    description = (
        "Replace exact text in a file. old_text must match exactly (whitespace included) and be unique "
        "unless replace_all is true; include surrounding lines to make it unique."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "File path, relative to the workspace or absolute.",
            },
            "old_text": {"type": "string", "description": "Exact text to find."},
            "new_text": {"type": "string", "description": "Text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence (default false).",
            },
        },
        "required": ["path", "old_text", "new_text"],
    }

    async def run(  # type: ignore[override]
        self,
        path: str,
        old_text: str,
        new_text: str,
        replace_all: bool = False,
        **_: Any,
    ) -> str:  # required arguments: as read_file
        target = resolve_path(self.ctx, path)
        shown = display_path(self.ctx, target)
        if old_text == "":
            raise ToolError("old_text is empty; to create or overwrite a whole file use write_file")
        _refuse_memory_internals(self.ctx, target)
        # outside the workspace: ask before reading (the errors below quote the file to the model)
        outside = location_risks(self.ctx, target, "write")
        if outside and os.path.lexists(target):
            await approve_access(
                self.ctx, self.name, "edit", target, outside + content_risks(self.ctx, target)
            )
        content = await _read_text(self.ctx, target, shown, self.name)

        count = content.count(old_text)
        if count == 0 and "\r\n" in content and "\r\n" not in old_text and "\n" in old_text:
            # The model almost always writes "\n"; meet a CRLF file halfway rather than fail.
            crlf_old = old_text.replace("\n", "\r\n")
            if content.count(crlf_old):
                old_text, new_text = crlf_old, new_text.replace("\n", "\r\n")
                count = content.count(old_text)
        if count == 0:
            raise ToolError(
                f"old_text was not found in {shown}.{_closest_region(content, old_text)}"
            )
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_text occurs {count} times in {shown} (at lines {_match_lines(content, old_text)}); "
                "add surrounding lines so it matches exactly once, or set replace_all=true"
            )
        updated = (
            content.replace(old_text, new_text)
            if replace_all
            else content.replace(old_text, new_text, 1)
        )
        decision = Decision(True)
        if not outside:  # inside the workspace: memory, a prompt file, a skill or a git hook still asks, with the diff
            decision = await approve_access(
                self.ctx,
                self.name,
                "edit",
                target,
                content_risks(self.ctx, target, (content, updated)),
                detail=change_diff(content, updated, shown),
            )
        routed = _memory_write(self.ctx, target, updated, base=content) or _prompt_write(
            self.ctx, target, updated, decision
        )
        if routed is not None:
            return routed
        _write(self.ctx, target, updated.encode("utf-8"), shown)
        return f"Edited {shown}: replaced {count if replace_all else 1} occurrence{'s' if replace_all and count > 1 else ''}"


# -- memory routing: MEMORY.md goes through the versioned store; HISTORY.md is append-only ---------


def _refuse_memory_internals(ctx, target: Path) -> None:
    """HISTORY.md and the store's own files (versions, damaged copies) are never rewritten by a tool."""
    from nanobot.memory.store import protected_reason

    reason = protected_reason(workspace_root(ctx), target)
    if reason:
        raise ToolError(reason)


def _memory_write(ctx, target: Path, text: str, *, base: str | None) -> str | None:
    """Write MEMORY.md through the memory store (versioned, guarded, masked); None for other files."""
    from nanobot.memory.store import MemoryStore, MemoryUpdateRefused

    _refuse_memory_internals(ctx, target)
    store = MemoryStore(workspace_root(ctx))
    if target != store.memory_file.resolve():
        return None
    try:
        receipt = store.write_memory(
            text, reason="written by the model with a file tool", base=base, guard=True
        )
    except MemoryUpdateRefused as exc:
        raise ToolError(f"{exc.message}. {exc.hint or ''}".strip()) from None
    except NanobotError as exc:
        raise ToolError(f"MEMORY.md was not changed: {exc.message}") from None
    if not receipt.changed:
        return "MEMORY.md already holds this text; nothing changed"
    notes = ["the previous text is kept as a version"] if receipt.version else []
    if receipt.masked:
        notes.append("text that looked like a secret was replaced by [REDACTED]")
    if receipt.concurrent_change:
        notes.append(
            "MEMORY.md had changed meanwhile, so your change was merged on top of the newer text"
        )
    if receipt.conflicts:
        notes.append(
            f'{len(receipt.conflicts)} line(s) conflicted and were put under "Held back update"'
        )
    return "Saved memory/MEMORY.md" + (f" ({'; '.join(notes)})" if notes else "")


def _prompt_write(ctx: ToolContext, target: Path, text: str, decision: Decision) -> str | None:
    """A prompt file (the policy's "prompt" door) goes through its versioned store; None for other files."""
    from nanobot.memory.prompt_files import PromptFiles
    from nanobot.policy.protected import entry_for

    root = workspace_root(ctx)
    entry = entry_for(root, target)
    if entry is None or entry.door != "prompt":
        return None
    try:
        version = PromptFiles(root).write(
            entry.path, text, author="assistant", seen_by_user=decision.by_person
        )
    except (OSError, NanobotError) as exc:
        raise ToolError(f"{entry.path} was not changed: {exc}") from None
    notes = ["the previous text is kept as a version the user can restore"] if version else []
    if entry.path == "HEARTBEAT.md" and not decision.by_person:
        notes.append("tasks you added wait for the user's approval before the heartbeat runs them")
    return f"Saved {entry.path}" + (f" ({'; '.join(notes)})" if notes else "")


def _match_lines(content: str, needle: str, limit: int = 10) -> str:
    found: list[str] = []
    start = 0
    while len(found) < limit:
        at = content.find(needle, start)
        if at < 0:
            break
        found.append(str(content.count("\n", 0, at) + 1))
        start = at + len(needle)
    return ", ".join(found) + (", ..." if content.count(needle) > limit else "")


def _closest_region(content: str, old_text: str) -> str:
    """Describe the part of the file most like old_text, so the model can copy it exactly."""
    file_lines = content.splitlines()
    want = old_text.splitlines() or [old_text]
    if not file_lines:
        return " The file is empty."
    size = min(len(want), len(file_lines))
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2("\n".join(want))  # seq2 is the side SequenceMatcher caches
    best_ratio, best_start = -1.0, 0
    # Cheap upper bounds first: with thousands of windows the full ratio is the cost.
    for start in range(len(file_lines) - size + 1):
        matcher.set_seq1("\n".join(file_lines[start : start + size]))
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best_ratio, best_start = ratio, start
    if best_ratio < 0.3:
        return " Nothing in the file resembles it; read the file again before editing."
    region = file_lines[best_start : best_start + size]
    numbered = "\n".join(f"{best_start + 1 + i:>6}| {line}" for i, line in enumerate(region))
    diff = "\n".join(difflib.unified_diff(want, region, "old_text", "file", lineterm="", n=1))
    text = (
        f" The closest match is lines {best_start + 1}-{best_start + size} "
        f"({best_ratio:.0%} similar):\n{numbered}\nDifferences (- your old_text, + the file):\n{diff}"
    )
    return text if len(text) <= 6000 else text[:6000] + "\n[...]"


class ListDirTool(Tool):
    name = "list_dir"
    description = (
        "List a directory: entries sorted, directories end with '/'. recursive=true walks subdirectories "
        "(skipping .git, __pycache__ and node_modules)."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Directory path (default: the workspace)."},
            "recursive": {
                "type": "boolean",
                "description": "Include subdirectories (default false).",
            },
            "max_entries": {
                "type": "integer",
                "minimum": 1,
                "maximum": 10000,
                "description": "Entry cap (default 200).",
            },
        },
    }

    async def run(
        self, path: str = ".", recursive: bool = False, max_entries: int = 200, **_: Any
    ) -> str:
        target = resolve_path(self.ctx, path)
        shown = display_path(self.ctx, target)
        if not target.exists():
            raise ToolError(f"directory not found: {shown}")
        await approve_access(
            self.ctx, self.name, "list", target, location_risks(self.ctx, target, "list")
        )
        if not target.is_dir():
            raise ToolError(f"{shown} is a file, not a directory; use read_file to read it")
        fd = open_dir(target, shown)  # what is listed is the folder that was checked, by descriptor
        entries = _walk(fd) if recursive else iter(_entries(fd, ""))
        shown_entries: list[str] = []
        extra = 0
        try:
            for entry in entries:
                if len(shown_entries) < max_entries:
                    shown_entries.append(entry)
                elif extra < MAX_COUNTED_EXTRA:  # counting a whole home folder would stall the turn
                    extra += 1
                else:
                    break
        except PermissionError as exc:
            raise ToolError(f"permission denied listing {shown}") from exc
        finally:
            if hasattr(entries, "close"):
                entries.close()  # the walk's open descriptors, now
            os.close(fd)
        if not shown_entries:
            return f"({shown} is empty)"
        if extra:
            more = f"{extra}+" if extra >= MAX_COUNTED_EXTRA else str(extra)
            shown_entries.append(f"... {more} more (raise max_entries or list a subdirectory)")
        return "\n".join(shown_entries)


def _sorted(fd: int) -> list[os.DirEntry]:
    with os.scandir(fd) as it:
        return sorted(it, key=lambda e: e.name)


def _entries(fd: int, prefix: str) -> list[str]:
    out = []
    for item in _sorted(fd):
        try:
            is_dir = item.is_dir()
        except OSError:
            is_dir = False
        out.append(f"{prefix}{item.name}/" if is_dir else f"{prefix}{item.name}")
    return out


def _walk(fd: int, prefix: str = ""):
    """Depth-first, sorted, directories before their contents; symlinked dirs are not entered.
    Each subfolder is opened relative to its parent's descriptor without following links, so a
    link swapped in during the walk is not entered either."""
    for item in _sorted(fd):
        if item.name in SKIPPED_DIRS:
            continue
        try:
            is_dir = item.is_dir()
            is_link = item.is_symlink()
        except OSError:
            is_dir, is_link = False, False
        if not is_dir:
            yield f"{prefix}{item.name}"
            continue
        yield f"{prefix}{item.name}/"
        if is_link:
            continue
        try:
            child = os.open(item.name, DIR_FLAGS, dir_fd=fd)
        except PermissionError:
            yield f"{prefix}{item.name}/ [permission denied]"
            continue
        except OSError:  # swapped for a link or removed since it was listed
            continue
        try:
            yield from _walk(child, f"{prefix}{item.name}/")
        except PermissionError:
            yield f"{prefix}{item.name}/ [permission denied]"
        finally:
            os.close(child)
