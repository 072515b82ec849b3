"""Finding the workspace's git repositories (nanobot.policy.repos), and what exec gets read-only in them."""

from __future__ import annotations

from pathlib import Path

from nanobot.policy import repos
from nanobot.policy.protected import GIT_ENTRY, entry_for, exec_read_only
from nanobot.policy.repos import find_repos


def _git_dir(path: Path, *, config: str = "[core]\n") -> Path:
    for folder in ("objects", "refs", "hooks"):
        (path / folder).mkdir(parents=True, exist_ok=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text(config)
    return path


def test_every_kind_of_repository_folder_is_found_and_dependency_folders_are_skipped(tmp_path):
    ws = tmp_path
    _git_dir(ws / ".git")
    _git_dir(ws / "sub" / ".git")
    _git_dir(ws / "a" / "b" / "c" / ".git")
    _git_dir(ws / "bare.git")
    _git_dir(ws / "store" / "linked.git")
    (ws / "linked").mkdir()
    (ws / "linked" / ".git").write_text("gitdir: ../store/linked.git\n")
    _git_dir(
        ws / "node_modules" / "pkg" / ".git"
    )  # skipped: dependencies, not a repository people work in
    (ws / ".git" / "modules").mkdir()
    _git_dir(
        ws / ".git" / "modules" / "x"
    )  # inside a repository folder: read-only as a whole (modules/)
    found = find_repos(ws)
    assert found.git_dirs == (".git", "a/b/c/.git", "bare.git", "store/linked.git", "sub/.git")
    assert found.git_files == ("linked/.git",) and found.complete and found.note() == ""


def test_a_cut_short_search_says_so_and_still_finds_the_repositories_near_the_top(tmp_path):
    ws = tmp_path
    for i in range(40):
        (ws / f"d{i}" / "deeper").mkdir(parents=True)
    _git_dir(ws / "zz" / ".git")
    found = find_repos(ws, max_entries=30)
    assert not found.complete and "too large" in found.note()
    assert find_repos(ws, max_depth=1).complete is False
    assert "zz/.git" in find_repos(ws).git_dirs


def test_a_search_again_sees_a_repository_made_since(tmp_path, monkeypatch):
    monkeypatch.setattr(
        repos, "_SETTLED_NS", 0
    )  # cache every listing at once, as an old workspace would be
    ws = tmp_path
    (ws / "sub").mkdir()
    assert find_repos(ws).git_dirs == ()
    _git_dir(ws / "sub" / ".git")
    assert find_repos(ws).git_dirs == ("sub/.git",)


def test_exec_gets_the_settings_and_hooks_of_every_repository_read_only_but_not_their_data(
    tmp_path,
):
    ws = tmp_path
    _git_dir(ws / ".git")
    _git_dir(ws / "sub" / ".git")
    (ws / "sub" / ".git" / "config.worktree").write_text("")
    _git_dir(ws / "store" / "linked.git")
    (ws / "linked").mkdir()
    (ws / "linked" / ".git").write_text("gitdir: ../store/linked.git\n")
    assert set(exec_read_only(ws)) == {
        ws / ".git/hooks",
        ws / ".git/config",
        ws / "sub/.git/hooks",
        ws / "sub/.git/config",
        ws / "sub/.git/config.worktree",
        ws / "store/linked.git/hooks",
        ws / "store/linked.git/config",
        ws / "linked/.git",
    }


def test_the_file_tools_find_a_nested_repository_protected(tmp_path):
    ws = tmp_path
    _git_dir(ws / "store" / "linked.git")
    for rel in (
        "sub/.git/config",
        "sub/.git/hooks/pre-commit",
        "store/linked.git/config",
        "linked/.git",
    ):
        assert entry_for(ws, ws / rel) is GIT_ENTRY, rel
    assert entry_for(ws, ws / "store" / "notes.md") is None
