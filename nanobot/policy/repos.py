"""The git repositories in a workspace, found by a bounded walk: where git reads settings and runs code from.

git runs programs named in a repository's settings (`core.fsmonitor`, `core.pager`, hooks, ...)
as the user, outside the sandbox, the next time they use git in it. Not only the workspace's own
`.git`: any folder git accepts as a repository directory counts (`sub/.git`, a bare `x.git`, the
folder a `.git` file's `gitdir:` line names, `.git/modules/x`). git accepts a folder holding
`HEAD` and either `objects/` + `refs/` or a `commondir` file (git's is_git_directory), so that is
what the walk looks for, by the names a folder lists, with no extra system call.

The walk skips what is never a repository people work in (node_modules, virtualenvs, caches),
does not go into a repository folder (its data is large; its code paths are named below), and
stops after MAX_ENTRIES entries or MAX_DEPTH folders deep, saying so (`complete`).
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Repos",
    "find_repos",
    "last_found",
    "looks_like_git_dir",
    "GIT_CODE_PATHS",
    "GIT_SETTINGS",
    "GIT_WATCHED",
    "MAX_ENTRIES",
    "MAX_DEPTH",
    "SKIPPED",
]

# Inside a repository folder: what git runs code from or is steered by. Folders: hooks, the info
# folder (attributes, sparse-checkout), the submodules' and linked worktrees' own repository folders.
GIT_CODE_PATHS = ("hooks", "info", "modules", "worktrees")
# Files: the settings (and the per-worktree ones), and `commondir`, which says where the settings are.
GIT_SETTINGS = ("config", "config.worktree", "commondir")
# What the after-command check compares: the above, and a rebase's or cherry-pick's todo list (`exec` lines).
GIT_WATCHED = (*GIT_CODE_PATHS, *GIT_SETTINGS, "rebase-merge", "rebase-apply", "sequencer")

MAX_ENTRIES = 60_000  # folder entries looked at per walk (a 50,000-file project fits); past it the rest is not searched
MAX_DEPTH = 8  # folders below the workspace
SKIPPED = frozenset(
    {
        "node_modules",
        ".venv",
        "venv",
        "site-packages",
        "__pycache__",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".cache",
        ".cargo",
        ".npm",
        ".gradle",
    }
)


@dataclass(frozen=True)
class Repos:
    git_dirs: tuple[
        str, ...
    ]  # workspace-relative repository folders (".git", "sub/.git", "x.git", ...)
    git_files: tuple[
        str, ...
    ]  # workspace-relative `.git` files (a worktree's or submodule's `gitdir:` pointer)
    complete: bool  # False: the walk stopped at MAX_ENTRIES or MAX_DEPTH; repositories beyond were not seen
    seen: int  # folder entries looked at

    def note(self) -> str:
        """What the walk left out, for the user and the model; "" when it saw everything it searches."""
        if self.complete:
            return ""
        return (
            f"the workspace is too large to search it all for git repositories (stopped after {self.seen:,} "
            f"entries or {MAX_DEPTH} folders deep): the settings and hooks of a repository beyond that "
            "are not read-only inside exec"
        )


def _is_git_dir(names: set[str] | frozenset[str]) -> bool:
    return "HEAD" in names and ("objects" in names and "refs" in names or "commondir" in names)


def looks_like_git_dir(path: Path) -> bool:
    """Whether git would take `path` for a repository folder (HEAD and objects/ + refs/, or commondir)."""
    try:
        return (path / "HEAD").is_file() and (
            (path / "objects").is_dir()
            and (path / "refs").is_dir()
            or (path / "commondir").is_file()
        )
    except OSError:
        return False


@dataclass(frozen=True)
class _Listing:
    """What the walk needs of one folder, kept while the folder's mtime stays the same."""

    mtime_ns: int
    ino: int
    folders: tuple[str, ...]  # its sub-folders (not links), SKIPPED ones left out
    entries: int
    git_dir: bool
    git_file: bool  # it holds a `.git` file


_listings: dict[str, _Listing] = {}
_CACHED_MAX = 200_000  # folders remembered across walks (all of them forgotten past it)
_SETTLED_NS = 2_000_000_000  # a folder changed this recently is listed again next time (timestamps are coarse)


def _listing(path: str) -> _Listing | None:
    """The folder's entries, from the last walk when its mtime (which any entry added, removed or
    renamed moves) is unchanged: a walk then costs one stat a folder instead of a listing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    cached = _listings.get(path)
    if cached is not None and cached.mtime_ns == st.st_mtime_ns and cached.ino == st.st_ino:
        return cached
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except OSError:
        return None
    names = {e.name for e in entries}
    folders: list[str] = []
    git_file = False
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIPPED:
                    folders.append(entry.name)
            elif entry.name == ".git" and entry.is_file(follow_symlinks=False):
                git_file = True
        except OSError:
            continue
    listing = _Listing(
        st.st_mtime_ns,
        st.st_ino,
        tuple(sorted(folders)),
        len(entries),
        _is_git_dir(names),
        git_file,
    )
    if time.time_ns() - st.st_mtime_ns > _SETTLED_NS:
        if len(_listings) >= _CACHED_MAX:
            _listings.clear()
        _listings[path] = listing
    return listing


def find_repos(
    workspace: Path, *, max_entries: int | None = None, max_depth: int | None = None
) -> Repos:
    """Every repository folder and `.git` file under `workspace` (links not followed), bounded;
    breadth first, so the repositories nearest the top are found before a cap is met."""
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    max_depth = MAX_DEPTH if max_depth is None else max_depth
    git_dirs: list[str] = []
    git_files: list[str] = []
    seen = 0
    complete = True
    base = str(workspace)
    queue: deque[tuple[str, int]] = deque([("", 0)])
    while queue:
        rel, depth = queue.popleft()
        listing = _listing(os.path.join(base, rel) if rel else base)
        if listing is None:
            continue
        seen += listing.entries
        if rel and listing.git_dir:
            git_dirs.append(rel)
            continue  # its code paths are named by GIT_CODE_PATHS; its submodules' folders live in modules/
        if listing.git_file:
            git_files.append(f"{rel}/.git" if rel else ".git")
        if listing.folders and depth >= max_depth:
            complete = False
            continue
        for name in listing.folders:
            where = (f"{rel}/{name}" if rel else name, depth + 1)
            queue.appendleft(where) if name == ".git" else queue.append(
                where
            )  # a repository first: cheap, and what is sought
        if seen > max_entries and queue:
            complete = False
            break
    found = Repos(tuple(sorted(git_dirs)), tuple(sorted(git_files)), complete, seen)
    _last[base] = found
    return found


_last: dict[str, Repos] = {}


def last_found(workspace: Path) -> Repos | None:
    """The latest walk's answer for `workspace` (no walk), e.g. to say once that it was cut short."""
    return _last.get(str(workspace))
