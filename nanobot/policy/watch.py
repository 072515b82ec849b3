"""Rule 3 of nanobot.policy.protected: after a command, what it changed among the protected paths.

The sandbox makes every protected path that exists read-only, but it cannot stop a command from
creating one that did not exist (`.vscode/tasks.json` in a workspace without `.vscode/`), and a
Landlock without mount namespaces or an unconfined exec cannot make anything read-only at all.
So exec takes a snapshot of the protected paths before each command and compares after it:
every change needs the approval the table names (asked after the fact, with the diff), and a
change that is not approved is put back (new files are moved aside into the nanobot home, old
contents written back). No process of the command outlives it, so nothing it left there can
run before this check. memory/ has its own watch (nanobot.memory.store.watch_memory).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from nanobot.fsio import atomic_write
from nanobot.policy.protected import (
    GIT_ENTRY,
    TABLE,
    Protected,
    entry_for,
    git_config_is_safe,
    named_by_git_config,
    parse_git_config,
)
from nanobot.policy.repos import GIT_SETTINGS, GIT_WATCHED, Repos, find_repos

__all__ = ["Snapshot", "Change", "take_snapshot", "changes_since", "put_back", "as_text"]

_KEEP_BYTES = 256 * 1024  # contents kept to put a file back; a larger protected file is only hashed
_MAX_ENTRIES = 5000
# git's own templates and ignore list, which run nothing: `git init` may write them unasked
_GIT_HARMLESS = ("info/exclude", "description")


@dataclass(frozen=True)
class _Item:
    kind: str  # "file" | "dir" | "link" | "other"
    digest: str = ""
    data: bytes | None = None  # a file's bytes when small enough to put back; a link's target
    git_config: bool = (
        False  # a repository's config (or config.worktree): changes in keys that run nothing pass
    )


Snapshot = dict[str, _Item]  # workspace-relative path -> what was there


@dataclass(frozen=True)
class Change:
    rel: str
    entry: Protected
    before: _Item | None
    after: _Item | None


def _table_roots() -> list[str]:
    """The table's paths but memory/ (its own watch) and .git/ (see _roots)."""
    return [
        e.path.rstrip("/") for e in TABLE if not e.path.startswith("memory/") and e.path != ".git/"
    ]


_TABLE_ROOTS = _table_roots()


def _roots(workspace: Path, repos: Repos) -> list[tuple[str, str | None]]:
    """(path, the repository folder it belongs to or None): the table's paths, `.git` itself (a command
    may swap the folder for a `gitdir:` file; not walked: its data is large) and every `.git` file (a
    `gitdir:` pointer), in every repository folder of the workspace (nanobot.policy.repos) what git
    reads settings or runs code from, and what their settings point git at (an included file, husky's hooks)."""
    git_dirs = dict.fromkeys([".git", *repos.git_dirs])
    named = [p.relative_to(workspace).as_posix() for p in named_by_git_config(workspace, repos)]
    files = [
        p for p in GIT_WATCHED if p in GIT_SETTINGS
    ]  # first: a large skills/ or modules/ must not crowd them out
    return [
        *((f, None) for f in dict.fromkeys([".git", *repos.git_files])),
        *((f"{g}/{p}", g) for g in git_dirs for p in files),
        *((r, None) for r in _TABLE_ROOTS),
        *((n, None) for n in named),
        *((f"{g}/{p}", g) for g in git_dirs for p in GIT_WATCHED if p not in files),
    ]


def _is_git_config(rel: str, git_dir: str | None) -> bool:
    return git_dir is not None and rel in (f"{git_dir}/config", f"{git_dir}/config.worktree")


def _item(path: str, contents: bool) -> _Item | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return _Item("link", data=os.fsencode(os.readlink(path)))
    if stat.S_ISDIR(st.st_mode):
        return _Item("dir")
    if not stat.S_ISREG(st.st_mode):
        return _Item("other")
    if not contents:  # any write, chmod or rename moves ctime, which no command can set back
        return _Item(
            "file", f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_mode}"
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return _Item("file", "unreadable")
    return _Item(
        "file", hashlib.sha256(data).hexdigest(), data if len(data) <= _KEEP_BYTES else None
    )


def take_snapshot(
    workspace: Path, *, contents: bool = True, repos: Repos | None = None
) -> Snapshot:
    """Every protected path under `workspace` (folders walked, links not followed). `contents`: keep
    the files' bytes to put them back; without it (the sandbox made them read-only) files are
    compared by their inode status, and only the repositories' config files are read (one a command
    creates, in a new repository, may hold keys that run nothing). `repos`: the walk's answer for
    this moment (exec shares one with the sandbox's read-only list), else walked now."""
    snap: Snapshot = {}
    base = str(workspace) + os.sep
    for root, git_dir in _roots(workspace, repos or find_repos(workspace)):
        stack = [root]
        while stack and len(snap) < _MAX_ENTRIES:
            rel = stack.pop()
            inner = rel[len(git_dir) + 1 :] if git_dir is not None else ""
            if inner and (
                inner.startswith("hooks/") and inner.endswith(".sample") or inner in _GIT_HARMLESS
            ):
                continue  # never run by git
            config = _is_git_config(rel, git_dir)
            item = _item(base + rel, contents or config)
            if item is None:
                continue
            if config:
                item = dataclasses.replace(item, git_config=True)
            snap[rel] = item
            if item.kind == "dir" and rel != ".git":
                try:
                    stack += [f"{rel}/{name}" for name in os.listdir(base + rel)]
                except OSError:
                    pass
    return snap


def changes_since(workspace: Path, before: Snapshot, *, contents: bool = True) -> list[Change]:
    """What differs now from `before`; a repository config that changed only in keys that run nothing
    is not a change. One walk for repositories, now: the command may have made one."""
    repos = find_repos(workspace)
    after = take_snapshot(workspace, contents=contents, repos=repos)
    found = []
    for rel in sorted(set(before) | set(after)):
        old, new = before.get(rel), after.get(rel)
        if old == new or (old is not None and new is not None and old.kind == "dir" == new.kind):
            continue
        if (
            new is not None and new.kind == "file" and new.data is None
        ):  # what the command wrote, to show
            new = _item(str(workspace / rel), True)
        if (
            new is not None
            and new.git_config
            and git_config_is_safe(_git_config(old), _git_config(new))
        ):
            continue
        # what is not the table's lies in a repository folder (_roots)
        found.append(
            Change(rel, entry_for(workspace, workspace / rel, repos) or GIT_ENTRY, old, new)
        )
    return found


def _git_config(item: _Item | None) -> dict[str, list[str]] | None:
    """The config's key -> values as git itself reads it (nanobot.policy.protected.parse_git_config)."""
    if item is None:
        return {}
    if item.kind != "file" or item.data is None:
        return None
    return parse_git_config(item.data)


def as_text(item: _Item | None) -> str | None:
    if item is None:
        return None
    if item.kind == "link":
        return f"(a symbolic link to {os.fsdecode(item.data or b'')})\n"
    if item.kind != "file":
        return f"({item.kind})\n"
    if item.data is None:
        return "(too large to show)\n"
    return item.data.decode("utf-8", "replace")


def put_back(workspace: Path, change: Change, aside: Path) -> bool:
    """Undo one change (what the command wrote is moved aside); False when the old contents were too
    large to keep, or could not be written back."""
    path, old, now = workspace / change.rel, change.before, change.after
    try:
        current = _item(str(path), False)
        if (
            now is not None
            and current is not None
            and current.kind == now.kind
            and (now.kind != "dir" or (old is not None and old.kind != "dir"))
        ):  # not already put back
            _move_aside(path, aside / change.rel)
        if old is None:
            return True
        for parent in reversed(
            path.relative_to(workspace).parents[:-1]
        ):  # a file where a folder was
            where = workspace / parent
            if where.is_symlink() or (where.exists() and not where.is_dir()):
                _move_aside(where, aside / parent)
        if old.kind == "dir":
            path.mkdir(parents=True, exist_ok=True)
            return True
        path.parent.mkdir(parents=True, exist_ok=True)
        if old.kind == "link" and old.data is not None:
            os.symlink(os.fsdecode(old.data), path)
            return True
        if old.kind == "file" and old.data is not None:
            atomic_write(path, old.data)
            return True
    except OSError:
        pass
    return False


def _move_aside(path: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        shutil.move(str(path), str(target))
    except OSError:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
