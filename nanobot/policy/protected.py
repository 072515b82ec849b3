"""What is protected, and what a change to it needs: the one table every tool asks.

How to add an entry: one `Protected(...)` line in TABLE (a workspace-relative path; a trailing
"/" covers the folder and everything beneath it), with the approval kind a change needs and the
door it goes through. The file tools, exec's sandbox and the after-command check all read it.

The rules:
1. A file tool's change to a protected path needs the user (`kind`; in the chat y / always / n
   with a diff, in one-shot a refusal naming `--approve KIND`), then goes through its door:
   "memory" (the versioned MEMORY.md store), "prompt" (the versioned prompt-file store, which
   records who wrote each version), "plain" (an ordinary write), or "never" (no tool may change
   it; the user does, or a dedicated tool such as cron).
2. exec: every entry that exists when a command starts is read-only inside the sandbox (bwrap,
   and Landlock where it may make a mount namespace). `.git/` is the one exception in part: its
   data (objects, refs, index, HEAD, logs) stays writable so `git commit` works unasked, while
   what git reads settings from or runs code from (config, config.worktree, commondir, hooks/,
   info/, modules/, worktrees/) is read-only. The same holds for every repository folder in the
   workspace, nested ones included (`sub/.git`, a bare `x.git`; found by nanobot.policy.repos),
   and for `.git` files (the `gitdir:` pointers of worktrees and submodules).
3. What the sandbox could not hold (a path that did not exist yet, a Landlock without mounts,
   no sandbox) is found after the command by comparing with a snapshot (nanobot.policy.watch)
   and needs the same approval as rule 1; refused, it is put back. A repository's config that
   a command created (`git init` of a new repository) may hold only keys that run nothing (GIT_SAFE_KEYS).
4. Outside the workspace, files that run at login or on a schedule (shell rc files, autostart
   folders, crontabs, systemd units, git hooks) need "persistence" wherever they are.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from nanobot.policy.repos import (
    GIT_CODE_PATHS,
    GIT_SETTINGS,
    GIT_WATCHED,
    Repos,
    find_repos,
    looks_like_git_dir,
)

__all__ = [
    "Protected",
    "TABLE",
    "PROMPT_FILES",
    "GIT_CODE_PATHS",
    "GIT_WATCHED",
    "GIT_ENTRY",
    "entry_for",
    "is_persistence_path",
    "exec_read_only",
    "git_config_is_safe",
    "git_settings_note",
    "parse_git_config",
    "safe_git_config_edit",
    "named_by_git_config",
    "SHELL_RC_FILES",
]

# The files the system prompt is built from, curated by the user (memory/prompt_files.py is their door).
PROMPT_FILES = ("AGENTS.md", "SOUL.md", "USER.md", "TOOLS.md", "HEARTBEAT.md")


@dataclass(frozen=True)
class Protected:
    path: str  # workspace-relative; a trailing "/" means the folder and all beneath it
    kind: str  # the approval kind a change needs ("" when no tool may change it)
    door: str  # "memory" | "prompt" | "plain" | "never"
    why: str  # shown to the user and the model: what this is and why it matters

    def covers(self, rel: PurePosixPath) -> bool:
        own = PurePosixPath(self.path.rstrip("/"))
        if self.path.endswith("/"):
            return rel == own or rel.parts[: len(own.parts)] == own.parts
        return rel == own


SHELL_RC_FILES = (
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".cshrc",
    ".tcshrc",
    ".kshrc",
    ".login",
    ".logout",
    ".xprofile",
    ".xinitrc",
    ".xsessionrc",
    ".xsession",
    ".pam_environment",
)

_PROMPT = "a prompt file: it is part of every system prompt, so what it says steers the assistant"
_RUNS_LATER = "runs later as you, outside the sandbox"

TABLE: tuple[Protected, ...] = (
    Protected(
        "memory/MEMORY.md",
        "memory-edit",
        "memory",
        "long-term memory (MEMORY.md), which is in every prompt",
    ),
    Protected(
        "memory/",
        "",
        "never",
        "nanobot's memory store (HISTORY.md is append-only; versions are kept)",
    ),
    *(Protected(name, "prompt-edit", "prompt", f"{name}, {_PROMPT}") for name in PROMPT_FILES[:4]),
    Protected(
        "HEARTBEAT.md",
        "persistence",
        "prompt",
        "HEARTBEAT.md, whose tasks nanobot runs on a schedule",
    ),
    Protected(
        "skills/", "skill-edit", "plain", "a workspace skill, which steers the assistant when used"
    ),
    Protected(
        "cron/", "", "never", "the scheduled jobs (only the cron tool adds one, and it asks)"
    ),
    Protected(
        ".git/", "persistence", "plain", f"the repository's settings and hooks: git {_RUNS_LATER}"
    ),
    Protected(".envrc", "persistence", "plain", f".envrc: direnv {_RUNS_LATER}"),
    Protected(
        ".vscode/",
        "persistence",
        "plain",
        f"an editor run configuration (tasks run on folder open) that {_RUNS_LATER}",
    ),
    Protected(".idea/", "persistence", "plain", f"an editor run configuration that {_RUNS_LATER}"),
    Protected(
        ".devcontainer/", "persistence", "plain", f"a dev container definition that {_RUNS_LATER}"
    ),
    *(
        Protected(name, "persistence", "plain", f"a shell start-up file that {_RUNS_LATER}")
        for name in SHELL_RC_FILES
    ),
)

GIT_ENTRY = next(e for e in TABLE if e.path == ".git/")


def entry_for(workspace: Path, target: Path, repos: Repos | None = None) -> Protected | None:
    """The table's entry for `target` (both resolved), or None when it is not protected. `repos`:
    the walk's answer (else walked now, if the table does not decide)."""
    if not target.is_relative_to(workspace) or target == workspace:
        return None
    rel = PurePosixPath(target.relative_to(workspace).as_posix())
    for entry in TABLE:
        if entry.covers(rel):
            return entry
    return GIT_ENTRY if _in_a_repository_folder(workspace, rel, repos) else None


def _in_a_repository_folder(workspace: Path, rel: PurePosixPath, repos: Repos | None) -> bool:
    """A nested repository's folder or what is in it: `sub/.git/...`, or any folder git takes for
    one (a bare `x.git/`, where a `.git` file points), found by its own entries; or a file a
    repository's settings point git at (named_by_git_config)."""
    if ".git" in rel.parts:
        return True
    if any(looks_like_git_dir(workspace / folder) for folder in list(rel.parents)[:-1]):
        return True
    target = workspace / rel
    return any(
        target == p or target.is_relative_to(p) for p in named_by_git_config(workspace, repos)
    )


def exec_read_only(workspace: Path, repos: Repos | None = None) -> tuple[Path, ...]:
    """Rule 2: the protected paths that exist now, to be read-only inside the sandbox (symlinks are
    not followed: the after-command check covers them). `repos`: the walk's answer (else walked now)."""
    base = f"{workspace}{os.sep}"
    out = [
        workspace / rel
        for rel in _TABLE_PATHS
        if _lstat_kind(base + rel) in (stat.S_IFDIR, stat.S_IFREG)
    ]
    repos = repos or find_repos(workspace)
    git_dirs = (
        dict.fromkeys([".git", *repos.git_dirs])
        if (workspace / ".git").is_dir()
        else repos.git_dirs
    )
    for rel in git_dirs:
        folder = f"{base}{rel}{os.sep}"
        out += [
            workspace / rel / p for p in GIT_CODE_PATHS if _lstat_kind(folder + p) == stat.S_IFDIR
        ]
        out += [
            workspace / rel / p for p in GIT_SETTINGS if _lstat_kind(folder + p) == stat.S_IFREG
        ]
    out += [workspace / rel for rel in repos.git_files if not (workspace / rel).is_symlink()]
    return tuple(dict.fromkeys([*out, *named_by_git_config(workspace, repos)]))


_TABLE_PATHS = tuple(e.path.rstrip("/") for e in TABLE if e.path != ".git/")


def _lstat_kind(path: str) -> int | None:
    """The file type of `path` itself (a link is a link), None when nothing is there: one system call."""
    try:
        return stat.S_IFMT(os.lstat(path).st_mode)
    except OSError:
        return None


# -- what a repository's settings name: included files, a hooks folder, programs ------------------

_INCLUDE_KEY = re.compile(r"^include(?:if\..+)?\.path$")
_INCLUDE_DEPTH = 5  # includes followed, as git does (it stops at 10)
_parsed_configs: dict[str, tuple[tuple[int, int, int, int], dict[str, list[str]] | None]] = {}


def named_by_git_config(workspace: Path, repos: Repos | None = None) -> tuple[Path, ...]:
    """Files and folders in the workspace that a repository's settings point git at, and which run
    later as the user just like hooks: an included config file (`include.path`, `includeIf.*.path`),
    the hooks folder of `core.hooksPath` (husky's `.husky`), a program a key names by its path
    (`core.fsmonitor = ./watch.sh`, a filter or textconv driver, an alias, a pager)."""
    repos = repos or find_repos(workspace)
    tops = _worktree_tops(workspace, repos)
    out: list[Path] = []
    for rel in dict.fromkeys([".git", *repos.git_dirs]):
        git_dir = workspace / rel
        top = tops.get(rel, git_dir.parent if git_dir.name == ".git" else git_dir)
        for name in ("config", "config.worktree"):
            out += _named(workspace, git_dir / name, git_dir, top, 0)
    return tuple(dict.fromkeys(out))


def _worktree_tops(workspace: Path, repos: Repos) -> dict[str, Path]:
    """Repository folder -> its working tree, for those a `.git` file points at."""
    tops: dict[str, Path] = {}
    for rel in repos.git_files:
        pointer = workspace / rel
        try:
            line = pointer.read_text(errors="replace").strip()
        except OSError:
            continue
        if line.startswith("gitdir:"):
            target = Path(os.path.normpath(pointer.parent / line[7:].strip()))
            if target.is_relative_to(workspace):
                tops[target.relative_to(workspace).as_posix()] = pointer.parent
    return tops


def _named(workspace: Path, config: Path, git_dir: Path, top: Path, depth: int) -> list[Path]:
    parsed = _read_git_config(config)
    out: list[Path] = []
    for key, values in (parsed or {}).items():
        if GIT_SAFE_KEYS.match(key):
            continue
        for value in values:
            include = bool(_INCLUDE_KEY.match(key))
            if include or key == "core.hookspath":
                word = value
            else:  # a command: its program, when it is a file of the workspace
                words = value.lstrip("!").split()
                word = words[0] if words else ""
            if not word or word.startswith("~"):
                continue
            path = Path(os.path.normpath((config.parent if include else top) / word))
            if (
                not path.is_relative_to(workspace)
                or path == workspace
                or git_dir.is_relative_to(path)
                or path.is_relative_to(git_dir)
                or path.is_symlink()
                or not path.exists()
            ):
                continue  # outside (read-only anyway), a folder holding the repository, or already covered
            out.append(path)
            if include and depth < _INCLUDE_DEPTH and path.is_file():
                out += _named(workspace, path, git_dir, top, depth + 1)
    return out


def _read_git_config(path: Path) -> dict[str, list[str]] | None:
    """parse_git_config of a file, kept while the file's status is unchanged (exec asks at every command)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    cached = _parsed_configs.get(str(path))
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        parsed = parse_git_config(path.read_bytes()) if st.st_size <= 1 << 20 else None
    except OSError:
        return None
    if len(_parsed_configs) > 1000:
        _parsed_configs.clear()
    _parsed_configs[str(path)] = (stamp, parsed)
    return parsed


# git's words when the read-only config stopped it (`git config`, `git remote add`, `git push -u`, `git init`
# in an existing repository): "could not write config file .git/config: Device or resource busy"
_GIT_SETTINGS_REFUSED = re.compile(
    r"could not (?:write|lock|commit|set)[^\n]*config[^\n]*"
    r"(?:Device or resource busy|Read-only file system)"
)


def git_settings_note(output: str) -> str:
    """For exec's result: when git failed because a repository's config is read-only, what to do instead."""
    if not _GIT_SETTINGS_REFUSED.search(output):
        return ""
    return (
        "\n[nanobot: git could not change the repository's settings: inside exec every repository's config "
        "and hooks are read-only, because git runs the programs they name as the user, outside the sandbox. "
        "Do not retry it with exec. For one command, pass a setting with `git -c key=value ...` (e.g. "
        "`git -c user.name=... -c user.email=... commit`); to keep it, change the config file with edit_file "
        "(keys that run nothing, such as user.name or a remote's url, need no approval; others ask the user), "
        "or ask the user to run the command themselves.]"
    )


# -- .git/config: keys that run nothing -----------------------------------------------------------

# `git config` writes these in ordinary work (identity, branches, remotes). Any other key may name
# a program git runs later (core.fsmonitor, core.hooksPath, core.pager, filter.*, diff.*.textconv,
# alias.*, include.path, credential.helper, remote.*.uploadpack, ...), so a change to one needs the user.
GIT_SAFE_KEYS = re.compile(
    r"^(?:user\.(?:name|email)|init\.defaultbranch"
    r"|core\.(?:repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks"
    r"|autocrlf|eol|safecrlf|quotepath)"
    r"|branch\.[^\n]+\.(?:remote|merge|rebase)|remote\.[^\n]+\.(?:url|pushurl|fetch)"
    r"|pull\.rebase|push\.default|merge\.conflictstyle|color\.ui|commit\.verbose)$"
)


def git_config_is_safe(
    before: dict[str, list[str]] | None, after: dict[str, list[str]] | None
) -> bool:
    """Whether `after` differs from `before` (parsed configs; None: unreadable) only in GIT_SAFE_KEYS."""
    if after is None:
        return False
    old = before or {}
    changed = {k for k in set(old) | set(after) if old.get(k) != after.get(k)}
    return all(GIT_SAFE_KEYS.match(k) for k in changed)


def parse_git_config(data: bytes) -> dict[str, list[str]] | None:
    """A config file's key -> values as git itself reads it (no includes followed; nothing run);
    None when git is missing or cannot read it."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        run = subprocess.run(
            [git, "config", "--no-includes", "--file", "-", "--list", "-z"],
            input=data,
            capture_output=True,
            timeout=10,
            env={"PATH": os.defpath, "GIT_CONFIG_NOSYSTEM": "1"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if run.returncode != 0:
        return None
    out: dict[str, list[str]] = {}
    for record in run.stdout.split(b"\0"):
        if record:
            key, _, value = record.decode("utf-8", "replace").partition("\n")
            out.setdefault(key, []).append(value)
    return out


def safe_git_config_edit(workspace: Path, target: Path, before: str | None, after: str) -> bool:
    """A file tool's change to a repository's config (or config.worktree) that touches only keys that
    run nothing: it needs no approval, as `git config user.email ...` needed none before the
    config became read-only inside exec."""
    if target.name not in ("config", "config.worktree") or not target.is_relative_to(workspace):
        return False
    if not looks_like_git_dir(target.parent):
        return False
    old = parse_git_config(before.encode()) if before is not None else {}
    return old is not None and git_config_is_safe(old, parse_git_config(after.encode()))


# -- rule 4: anywhere on disk ---------------------------------------------------------------------

_PERSISTENCE_NAMES = frozenset(
    {*SHELL_RC_FILES, ".envrc", "crontab", "authorized_keys", "authorized_keys2"}
)
_PERSISTENCE_DIRS = (
    (".git", "hooks"),
    (".ssh",),
    (".config", "autostart"),
    (".config", "systemd"),
    (".config", "fish"),
    ("etc", "profile.d"),
    ("etc", "systemd"),
    ("etc", "init.d"),
    ("var", "spool", "cron"),
    ("Library", "LaunchAgents"),
    (".config", "environment.d"),
    (".husky",),
)
_PERSISTENCE_TAILS = ((".git", "config"),)
_UNIT_SUFFIXES = (".service", ".timer", ".socket", ".path", ".mount")


def is_persistence_path(path: Path) -> bool:
    """A file that runs at login or on a schedule: shell rc files, authorized_keys, crontabs,
    systemd units, git hooks (rule 4)."""
    parts = path.parts
    if path.name in _PERSISTENCE_NAMES or path.name.startswith("cron") and "etc" in parts:
        return True
    if path.suffix in _UNIT_SUFFIXES and "systemd" in parts:
        return True
    folders = parts[:-1]
    for tail in _PERSISTENCE_DIRS:
        for i in range(len(folders) - len(tail) + 1):
            if folders[i : i + len(tail)] == tail:
                return True
    return any(parts[-len(tail) :] == tail for tail in _PERSISTENCE_TAILS)
