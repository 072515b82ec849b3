"""Where a tool's path really points, whether the workspace rule allows it, and whether
the user must be asked.

This is the one place that decides: the file tools and exec's `working_dir` all call
`resolve_path`, so a fix here covers every tool. The file tools also ask here about risky
accesses (outside the workspace, and what the policy table in nanobot.policy.protected names:
memory, prompt files, skills, files that run later) and open files through `open_regular` /
`open_parent_dir`, which check the descriptor, not just the path. exec asks here too, after a
command, about what it changed among the protected paths (`review`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from nanobot.errors import ToolError
from nanobot.policy.protected import Protected, entry_for, is_persistence_path, safe_git_config_edit
from nanobot.policy.watch import Change, as_text, put_back
from nanobot.tools.approval import ApprovalRequest, Approver, Decision, approve_flag_hint
from nanobot.tools.base import ToolContext

__all__ = [
    "resolve_path",
    "workspace_root",
    "display_path",
    "FileRisk",
    "location_risks",
    "content_risks",
    "approve_access",
    "change_diff",
    "refusal",
    "open_regular",
    "read_capped",
    "open_parent_dir",
    "review",
]


def workspace_root(ctx: ToolContext) -> Path:
    """The workspace with symlinks resolved, so containment checks compare like with like."""
    return Path(os.path.expanduser(str(ctx.workspace))).resolve()


def resolve_path(ctx: ToolContext, raw: str) -> Path:
    """Turn a model-supplied path into an absolute, symlink-free Path.

    Relative paths are taken from the workspace and `~` expands. When
    `ctx.restrict_to_workspace` is on, a path that ends up outside the workspace after
    resolution (`..`, an absolute path, `~`, or a symlink pointing out) raises ToolError.
    The check runs on the resolved path, so the file a tool then opens is the one checked
    (a symlink swapped in between check and use is out of scope: this is a guard against
    a confused model, not a sandbox).
    """
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError("path is empty; give a file or directory path")
    if "\x00" in raw:
        raise ToolError("path contains a NUL byte")
    root = workspace_root(ctx)
    candidate = Path(os.path.expanduser(raw))
    if not candidate.is_absolute():
        candidate = root / candidate
    try:
        resolved = candidate.resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop on older Pythons
        raise ToolError(f"cannot resolve path {raw!r}: {exc}") from exc
    if ctx.restrict_to_workspace and not resolved.is_relative_to(root):
        raise ToolError(
            f"path {raw!r} resolves to {resolved}, which is outside the workspace {root}; "
            "access outside the workspace is disabled (restrictToWorkspace is on)"
        )
    return resolved


def display_path(ctx: ToolContext, path: Path) -> str:
    """Workspace-relative text for paths inside it (shorter for the model), absolute otherwise."""
    root = workspace_root(ctx)
    if path == root:
        return "."
    if path.is_relative_to(root):
        return str(path.relative_to(root))
    return str(path)


# -- what makes a file access risky, and asking about it ----------------------------------------

# Credential stores under HOME: reading them is never remembered by "always" beyond the one file.
CREDENTIAL_STORES = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".password-store",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".local/share/keyrings",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
)
# ... and, anywhere outside the workspace, files by these names
_SECRET_NAMES = frozenset(
    {".env", ".envrc", ".npmrc", ".pypirc", ".pgpass", ".git-credentials", ".netrc"}
)


@dataclass(frozen=True)
class FileRisk:
    kind: str  # an ApprovalRequest kind: "file-outside", "persistence", "memory-edit", "skill-edit"
    reason: str  # why it needs the user, e.g. "outside the workspace"
    always_key: str  # what "always for this session" covers


def _is_under(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _sensitive_place(path: Path) -> str | None:
    """What secret place `path` is in (a credential store, the nanobot home), if any."""
    from nanobot.paths import nanobot_home

    home = Path(os.path.expanduser("~")).resolve()
    for name in CREDENTIAL_STORES:
        if _is_under(path, home / name):
            return f"a credential store ({home / name})"
    if _is_under(path, nanobot_home().expanduser().resolve()):
        return "the nanobot home (keys, sessions)"
    if path.name in _SECRET_NAMES:
        return f"a file that usually holds secrets ({path.name})"
    return None


def location_risks(ctx: ToolContext, target: Path, access: str) -> list[FileRisk]:
    """`access` ("read", "write", "list") of `target` outside the workspace."""
    if _is_under(target, workspace_root(ctx)):
        return []
    place = _sensitive_place(target)
    if place is not None:  # "always" never stretches from one secret file to its neighbours
        return [
            FileRisk(
                "file-outside",
                f"outside the workspace, in {place}",
                f"file-outside:{access}:{target}",
            )
        ]
    scope = target if access == "list" else target.parent
    return [FileRisk("file-outside", "outside the workspace", f"file-outside:{access}:{scope}")]


def content_risks(
    ctx: ToolContext, target: Path, change: tuple[str | None, str] | None = None
) -> list[FileRisk]:
    """What changing `target` needs, as the policy table says (nanobot.policy.protected): a prompt
    file, memory, a skill, a file that runs later; a door no tool may pass raises ToolError.
    `change`: (the text now or None, the text after), when known: a repository config changed only
    in keys that run nothing needs nothing."""
    root = workspace_root(ctx)
    entry = entry_for(root, target)
    if entry is not None and change is not None and safe_git_config_edit(root, target, *change):
        return []
    if entry is None:
        return (
            [
                FileRisk(
                    "persistence",
                    "a file that runs at login or on a schedule",
                    f"persistence:{target}",
                )
            ]
            if is_persistence_path(target)
            else []
        )
    if entry.door == "never":
        raise ToolError(refusal(root, target, entry))
    rel = target.relative_to(root)
    key = {
        "memory-edit": "memory-edit",
        "skill-edit": f"skill-edit:{rel.parts[1] if len(rel.parts) > 1 else ''}",
        "prompt-edit": f"prompt-edit:{rel}",
    }.get(entry.kind, f"{entry.kind}:{target}")
    why = (
        entry.why
        if entry.kind != "skill-edit" or len(rel.parts) < 2
        else f"a workspace skill ({rel.parts[1]})"
    )
    return [FileRisk(entry.kind, why, key)]


def refusal(root: Path, target: Path, entry: Protected) -> str:
    """Why no tool may change `target` (a "never" door), and what to do instead."""
    from nanobot.memory.store import protected_reason

    reason = protected_reason(root, target)
    if reason:
        return reason
    if entry.path == "cron/":
        return (
            "cron/ holds the scheduled jobs, which run later with nobody watching: add or remove a job with "
            "the cron tool (it asks the user), never by writing these files"
        )
    return (
        f"{target.relative_to(root)} belongs to {entry.why}; no tool may change it (the user can, or "
        "`nanobot memory` for MEMORY.md)"
    )


# Most severe first: the request takes the kind of the first risk that applies.
_SEVERITY = ("persistence", "file-outside", "skill-edit", "prompt-edit", "memory-edit")


async def approve_access(
    ctx: ToolContext, tool: str, verb: str, target: Path, risks: list[FileRisk], detail: str = ""
) -> Decision:
    """Ask the approver about `risks`; raise ToolError (the model reads it) when refused."""
    if not risks:
        return Decision(True)
    risks = sorted(
        risks, key=lambda r: _SEVERITY.index(r.kind) if r.kind in _SEVERITY else len(_SEVERITY)
    )
    first = risks[0]
    reasons = "; ".join(dict.fromkeys(r.reason for r in risks))
    summary = f"{tool} wants to {verb} {target} ({reasons})"
    request = ApprovalRequest(
        kind=first.kind,
        summary=summary,
        detail=detail,
        always_key=first.always_key,
        allow_hint=approve_flag_hint(first.kind),
    )
    decision = await ctx.approver.approve(request)
    if not decision.allowed:
        text = (
            f"not allowed to {verb} {target} ({reasons}) — {decision.reason.strip() or 'refused'}"
        )
        raise ToolError(
            text.rstrip(".") + ". Do not retry the same call; continue without it or ask the user."
        )
    return decision


def change_diff(before: str | None, after: str, shown: str) -> str:
    """The change as a unified diff, for the approval prompt (long diffs are cut)."""
    import difflib

    old = (before or "").splitlines(keepends=True)
    lines = list(
        difflib.unified_diff(
            old,
            after.splitlines(keepends=True),
            f"{shown} (now)" if before is not None else "/dev/null",
            f"{shown} (proposed)",
            n=2,
        )
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    limit = 4000
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"… [{len(text) - limit:,} more characters of diff]\n"
    )


# -- opening: the descriptor, not just the path -------------------------------------------------


def _fd_path(fd: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None  # no /proc (macOS): the (dev, inode) comparison below still holds


def _kind_of(mode: int) -> str:
    return (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "not a regular file"
    )


async def open_regular(ctx: ToolContext, target: Path, shown: str, tool: str) -> int:
    """A read-only descriptor on the regular file `target` (the caller closes it).

    Opened with O_NOFOLLOW and O_NONBLOCK (a FIFO must not hang the turn); the descriptor is
    then checked: a regular file (no devices, FIFOs, sockets), the same file that was checked
    (a path swapped in between is refused), and, with more than one hard link, approved as a
    possible way out of the workspace (refused under restrictToWorkspace).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        before = os.lstat(target)
    except FileNotFoundError:
        raise ToolError(f"file not found: {shown}") from None
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(before.st_mode):
        if stat.S_ISDIR(before.st_mode):
            raise ToolError(f"{shown} is a directory; use list_dir to see its contents")
        raise ToolError(
            f"{shown} is {_kind_of(before.st_mode)}; file tools only read regular files"
        )
    try:
        fd = os.open(target, flags)
    except PermissionError as exc:
        raise ToolError(f"permission denied reading {shown}") from exc
    except OSError as exc:
        raise ToolError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    try:
        st = os.fstat(fd)
        real = _fd_path(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(
                f"{shown} is {_kind_of(st.st_mode)}; file tools only read regular files"
            )
        if (st.st_dev, st.st_ino) != (before.st_dev, before.st_ino) or (
            real is not None and real != target
        ):
            raise ToolError(
                f"{shown} changed while it was being opened (a link was swapped in); refused"
            )
        if st.st_nlink > 1 and _is_under(target, workspace_root(ctx)):
            reason = f"it has {st.st_nlink} hard links, and another of its names may be outside the workspace"
            if ctx.restrict_to_workspace:
                raise ToolError(f"refused to read {shown}: {reason} (restrictToWorkspace is on)")
            await approve_access(
                ctx,
                tool,
                "read",
                target,
                [FileRisk("file-outside", reason, f"file-outside:hardlink:{target}")],
            )
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def read_capped(fd: int, cap: int, shown: str) -> bytes:
    """At most `cap` bytes from `fd`; more than that is refused (a size that lies, e.g. in /proc)."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > cap:
            raise ToolError(
                f"{shown} is larger than {cap:,} bytes, too large to load; use exec with head, "
                "sed -n or grep to look inside"
            )


DIR_FLAGS = (
    os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def open_dir(target: Path, shown: str) -> int:
    """A descriptor on the folder `target`, checked to be the folder that was resolved and
    approved: a link swapped in after the check is refused, not followed (the caller closes it)."""
    try:
        fd = os.open(target, DIR_FLAGS)
    except PermissionError as exc:
        raise ToolError(f"permission denied listing {shown}") from exc
    except OSError as exc:
        if (
            target.is_symlink()
        ):  # it was the resolved folder when checked: a link was swapped in since
            raise ToolError(
                f"{shown} changed while it was being opened (a link was swapped in); refused"
            ) from None
        if isinstance(exc, NotADirectoryError):
            raise ToolError(
                f"{shown} is a file, not a directory; use read_file to read it"
            ) from None
        raise ToolError(f"cannot list {shown}: {exc.strerror or exc}") from exc
    return _checked(fd, target, shown)


def _checked(fd: int, folder: Path, what: str) -> int:
    """`fd`, when it is open on `folder` itself (not on where a link swapped in since points)."""
    real = _fd_path(fd)
    if real is not None and real != folder:
        os.close(fd)
        raise ToolError(
            f"{what} changed while it was being opened (a link was swapped in); refused"
        )
    return fd


def open_parent_dir(ctx: ToolContext, target: Path, shown: str) -> int:
    """A descriptor on `target`'s folder (created if missing), checked to be the folder that was
    resolved, so the write lands where the check looked even if a link is swapped in later."""
    parent = target.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(parent, DIR_FLAGS)
    except PermissionError as exc:
        raise ToolError(f"permission denied writing {shown}") from exc
    except OSError as exc:
        raise ToolError(f"cannot write {shown}: {exc.strerror or exc}") from exc
    return _checked(fd, parent, f"the folder of {shown}")


# -- after a command: what it changed among the protected paths (nanobot.policy.watch) ------------


async def review(approver: Approver, workspace: Path, changes: list[Change]) -> str:
    """Ask about each change (after the fact); put back what is refused. Returns a note for the model."""
    if not changes:
        return ""
    from nanobot.paths import nanobot_home

    notes = []
    aside = nanobot_home() / "kept-aside" / datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    # deepest first, so a new folder's files are moved before the folder itself is looked at
    for change in sorted(changes, key=lambda c: c.rel.count("/"), reverse=True):
        entry = change.entry
        kept = False
        if entry.kind and (
            change.after is None or change.after.kind != "dir"
        ):  # a folder is judged by its files
            decision = await approver.approve(
                ApprovalRequest(
                    kind=entry.kind,
                    summary=f"exec changed {change.rel} ({entry.why}); keep the change?",
                    detail=change_diff(
                        as_text(change.before), as_text(change.after) or "(removed)\n", change.rel
                    ),
                    always_key=f"{entry.kind}:{workspace / change.rel}",
                    allow_hint=approve_flag_hint(entry.kind),
                )
            )
            kept = decision.allowed
            if (
                kept
                and entry.door == "prompt"
                and change.after is not None
                and change.after.kind == "file"
            ):
                from nanobot.memory.prompt_files import PromptFiles

                now = (workspace / change.rel).read_text(encoding="utf-8", errors="replace")
                # unknown before (not kept): every task in it counts as added, so none runs unapproved
                before = (
                    change.before.data.decode("utf-8", "replace")
                    if change.before and change.before.data
                    else ""
                )
                PromptFiles(workspace).write(
                    entry.path,
                    now,
                    author="assistant",
                    seen_by_user=decision.by_person,
                    replaced=before,
                )
        if kept:
            continue
        if change.after is not None and change.after.kind == "dir" and change.before is None:
            try:
                os.rmdir(workspace / change.rel)  # empty now, unless a file in it was kept
            except OSError:
                pass
            continue
        if change.before is not None and change.before.kind == "dir" and change.after is None:
            put_back(
                workspace, change, aside
            )  # the folder again; its files come back with their own changes
            continue
        restored = put_back(workspace, change, aside)
        notes.append(
            f"{change.rel} ({entry.why}) was "
            + (
                "put back as it was"
                if restored
                else "changed and could NOT be put back (too large); tell the user"
            )
        )
    if not notes:
        return ""
    return (
        "\n[nanobot: this command changed protected files without approval: "
        + "; ".join(notes)
        + f". What it wrote is kept aside in {aside}. Do not retry; ask the user to make such changes.]"
    )
