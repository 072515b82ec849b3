"""The table of protected paths (nanobot.policy.protected): what each path needs, and what exec
gets read-only."""

from __future__ import annotations

from nanobot.policy.protected import entry_for, exec_read_only, git_config_is_safe


def test_each_kind_of_protected_path_names_what_a_change_needs(tmp_path):
    ws = tmp_path
    needs = {
        rel: (e.kind, e.door) if (e := entry_for(ws, ws / rel)) else None
        for rel in (
            "memory/MEMORY.md",
            "memory/HISTORY.md",
            "USER.md",
            "HEARTBEAT.md",
            "skills/x/SKILL.md",
            "cron/jobs.json",
            ".git/config",
            ".envrc",
            ".vscode/tasks.json",
            ".bashrc",
            "notes.md",
            "src/USER.md",
        )
    }
    assert needs == {
        "memory/MEMORY.md": ("memory-edit", "memory"),
        "memory/HISTORY.md": ("", "never"),
        "USER.md": ("prompt-edit", "prompt"),
        "HEARTBEAT.md": ("persistence", "prompt"),
        "skills/x/SKILL.md": ("skill-edit", "plain"),
        "cron/jobs.json": ("", "never"),
        ".git/config": ("persistence", "plain"),
        ".envrc": ("persistence", "plain"),
        ".vscode/tasks.json": ("persistence", "plain"),
        ".bashrc": ("persistence", "plain"),
        "notes.md": None,
        "src/USER.md": None,
    }


def test_exec_gets_existing_protected_paths_read_only_but_git_data_stays_writable(tmp_path):
    ws = tmp_path
    for folder in (".git/hooks", ".git/objects", "skills", ".vscode"):
        (ws / folder).mkdir(parents=True)
    (ws / "USER.md").write_text("me\n")
    (ws / ".git" / "config").write_text("[core]\n")
    assert set(exec_read_only(ws)) == {
        ws / ".git/hooks",
        ws / ".git/config",
        ws / "skills",
        ws / ".vscode",
        ws / "USER.md",
    }


def test_a_git_config_change_is_safe_only_in_keys_that_run_nothing():
    base = {"core.bare": ["false"]}
    assert git_config_is_safe(base, {**base, "user.email": ["me@example.com"]})
    assert not git_config_is_safe(base, {**base, "core.fsmonitor": ["touch /tmp/x"]})
    assert not git_config_is_safe(base, {**base, "alias.st": ["!sh -c evil"]})
    assert not git_config_is_safe(base, None)  # unreadable: not safe
