"""Where a tool's path really points, and whether the workspace rule allows it.

This is the one place that decides: the file tools and exec's `working_dir` all call
`resolve_path`, so a fix here covers every tool.
"""

from __future__ import annotations

import os
from pathlib import Path

from nanobot.errors import ToolError
from nanobot.tools.base import ToolContext

__all__ = ["resolve_path", "workspace_root", "display_path"]


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
