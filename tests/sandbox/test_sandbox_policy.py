"""The pure policy: what is hidden, what stays visible, and how an allow-list covers "all but"."""

from __future__ import annotations

from pathlib import Path

from nanobot.sandbox.policy import CREDENTIAL_STORES, beneath_except, build_policy


def test_hidden_covers_home_nanobot_home_and_credential_stores(tmp_path, isolated_home):
    home = isolated_home.parent
    ws = isolated_home / "workspace"
    ws.mkdir(parents=True)
    policy = build_policy(ws, restrict=False, network=False)
    for path in (
        home,
        isolated_home,
        home / ".ssh",
        home / ".config" / "gh",
        Path("/root"),
        Path("/home"),
    ):
        assert policy.is_hidden(path / "x"), path
    assert not policy.is_hidden(
        ws / "notes.md"
    )  # the workspace inside the hidden nanobot home is shown
    assert (
        policy.read_only == ()
    )  # exec passes the protected paths (nanobot.policy.protected.exec_read_only)
    assert len(CREDENTIAL_STORES) >= 10


def test_workspace_that_is_home_still_hides_the_credential_stores(isolated_home):
    home = isolated_home.parent
    policy = build_policy(home, restrict=False, network=False)
    inside = set(policy.hidden_inside_workspace())
    assert home.resolve() / ".ssh" in inside and isolated_home.resolve() in inside
    assert policy.is_hidden(home / ".aws" / "credentials") and not policy.is_hidden(
        home / "notes.md"
    )


def test_path_folders_in_home_are_shown_unless_they_would_show_a_secret(isolated_home, monkeypatch):
    home = isolated_home.parent
    for d in ("bin", ".ssh/bin", ".nanobot"):
        (home / d).mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(
        "PATH", f"{home / 'bin'}:{home}:{home / '.ssh' / 'bin'}:{isolated_home}:/usr/bin"
    )
    shown = build_policy(home / "ws", restrict=False, network=False).toolchains
    assert home.resolve() / "bin" in shown
    assert home.resolve() not in shown and home.resolve() / ".ssh" / "bin" not in shown
    assert isolated_home.resolve() not in shown


def test_beneath_except_grants_siblings_along_the_path_to_each_hole(tmp_path):
    tmp_path = tmp_path / "tree"
    for d in ("a/keep", "a/hole/x", "b", "c/deep/hole2", "c/deep/ok"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "hole")
    got = set(
        beneath_except(tmp_path, [tmp_path / "a" / "hole", tmp_path / "c" / "deep" / "hole2"])
    )
    assert got == {
        tmp_path / "a" / "keep",
        tmp_path / "b",
        tmp_path / "c" / "deep" / "ok",
    }  # the link is not followed in
