from __future__ import annotations

import os
from pathlib import Path

import pytest
from nanobot.errors import ToolError
from nanobot.tools.workspace_guard import display_path, resolve_path


def test_relative_path_resolves_against_workspace(make_ctx, ws):
    assert resolve_path(make_ctx(), "notes/a.md") == ws.resolve() / "notes" / "a.md"


def test_tilde_expands_to_home(make_ctx):
    assert resolve_path(make_ctx(), "~/x.txt") == Path(os.environ["HOME"]).resolve() / "x.txt"


def _escapes(ws: Path, tmp_path: Path) -> dict[str, str]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (ws / "link").symlink_to(outside)
    (ws / "filelink").symlink_to(outside / "secret.txt")
    return {
        "dotdot": "../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "tilde": "~",
        "tilde_file": "~/anything",
        "symlink_dir": "link/secret.txt",
        "symlink_file": "filelink",
        "root": "/etc/passwd",
    }


@pytest.mark.parametrize(
    "kind", ["dotdot", "absolute", "tilde", "tilde_file", "symlink_dir", "symlink_file", "root"]
)
def test_escape_refused_when_restricted(make_ctx, ws, tmp_path, kind):
    raw = _escapes(ws, tmp_path)[kind]
    with pytest.raises(ToolError, match="outside the workspace"):
        resolve_path(make_ctx(restrict_to_workspace=True), raw)


@pytest.mark.parametrize(
    "kind", ["dotdot", "absolute", "tilde", "tilde_file", "symlink_dir", "symlink_file", "root"]
)
def test_escape_allowed_when_not_restricted(make_ctx, ws, tmp_path, kind):
    raw = _escapes(ws, tmp_path)[kind]
    resolved = resolve_path(make_ctx(restrict_to_workspace=False), raw)
    assert resolved.is_absolute()
    assert not resolved.is_relative_to(ws.resolve())


def test_symlink_inside_workspace_pointing_inside_is_allowed(make_ctx, ws):
    (ws / "real.txt").write_text("x")
    (ws / "alias.txt").symlink_to(ws / "real.txt")
    assert (
        resolve_path(make_ctx(restrict_to_workspace=True), "alias.txt")
        == (ws / "real.txt").resolve()
    )


def test_dotdot_that_stays_inside_is_allowed(make_ctx, ws):
    assert (
        resolve_path(make_ctx(restrict_to_workspace=True), "a/../b.txt") == ws.resolve() / "b.txt"
    )


def test_workspace_given_through_a_symlink_still_contains_its_files(tmp_path):
    from nanobot.tools.base import ToolContext

    real = tmp_path / "real_ws"
    real.mkdir()
    (tmp_path / "ws_link").symlink_to(real)
    ctx = ToolContext(workspace=tmp_path / "ws_link", restrict_to_workspace=True)
    assert resolve_path(ctx, "f.txt") == real.resolve() / "f.txt"


def test_sibling_with_common_prefix_is_outside(make_ctx, ws):
    sibling = ws.parent / (ws.name + "-evil")
    sibling.mkdir()
    with pytest.raises(ToolError):
        resolve_path(make_ctx(restrict_to_workspace=True), str(sibling / "x"))


@pytest.mark.parametrize("raw", ["", "   ", "a\x00b"])
def test_empty_or_nul_path_refused(make_ctx, raw):
    with pytest.raises(ToolError):
        resolve_path(make_ctx(), raw)


def test_display_path_is_relative_inside_and_absolute_outside(make_ctx, ws, tmp_path):
    ctx = make_ctx()
    assert display_path(ctx, ws.resolve() / "a" / "b.txt") == "a/b.txt"
    assert display_path(ctx, ws.resolve()) == "."
    assert display_path(ctx, tmp_path.resolve() / "x") == str(tmp_path.resolve() / "x")
