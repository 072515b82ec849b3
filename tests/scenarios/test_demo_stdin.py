"""`nanobot demo` with a stdin that is not a terminal: piped text is the message (as for `agent`),
an empty or closed stdin shows one scripted turn and says how to chat, and the throwaway home is
always removed."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

NOT_A_TERMINAL = "Input is not a terminal"  # prompt_toolkit's own warning: never shown


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory the demo makes its home in, ours alone (not the shared /tmp)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_piped_text_is_the_demo_message_and_the_home_is_removed(
    nanobot_run, isolated_home, temp_root
):
    demo = nanobot_run("demo", "--no-markdown", input="hello there\n")
    assert demo.returncode == 0, demo.stderr
    assert "(scripted demo)" in demo.stdout and '"hello there"' in demo.stdout
    assert NOT_A_TERMINAL not in demo.stderr + demo.stdout
    banner = [line for line in demo.stderr.splitlines() if "scripted demo:" in line]
    assert len(banner) == 1 and "(removed at the end)" in banner[0]  # piped: one whole line
    named = re.search(r"Home for this demo:\s+(\S+)", demo.stderr)
    assert named is not None, demo.stderr
    assert Path(named.group(1)).parent == temp_root
    assert not Path(named.group(1)).exists() and list(temp_root.iterdir()) == []
    assert not isolated_home.exists() or not any(isolated_home.iterdir())


def test_piped_list_my_files_runs_the_tool(nanobot_run, isolated_home, temp_root):
    demo = nanobot_run("demo", "--no-markdown", input="list my files")
    assert demo.returncode == 0, demo.stderr
    assert "AGENTS.md" in demo.stdout and "list_dir" in demo.stderr
    assert list(temp_root.iterdir()) == []


def test_empty_stdin_shows_one_scripted_turn_and_says_how_to_chat(
    nanobot_run, isolated_home, temp_root
):
    demo = nanobot_run("demo", "--no-markdown", input="  \n")
    assert demo.returncode == 0, demo.stderr
    assert "AGENTS.md" in demo.stdout and "list_dir" in demo.stderr  # the tool ran for real
    assert "bye" not in demo.stdout  # no chat ran
    assert "shows one scripted turn" in demo.stderr
    assert "in a terminal for the chat" in demo.stderr
    assert 'echo "hello" | nanobot demo' in demo.stderr
    assert NOT_A_TERMINAL not in demo.stderr
    assert list(temp_root.iterdir()) == []  # its home was removed


@pytest.mark.parametrize("stdin", ["devnull", "closed"])
def test_dev_null_or_closed_stdin_in_a_real_process(nanobot_cmd, isolated_home, tmp_path, stdin):
    root = tmp_path / "tmp"
    root.mkdir()
    command = [*nanobot_cmd, "demo"]
    if stdin == "closed":  # `nanobot demo <&-`: descriptor 0 is not open at all
        command = ["sh", "-c", 'exec "$@" <&-', "sh", *command]
    done = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(root)},
    )
    assert done.returncode == 0, done.stderr
    assert NOT_A_TERMINAL not in done.stderr + done.stdout
    assert "bye" not in done.stdout and "Traceback" not in done.stderr
    assert "shows one scripted turn" in done.stderr and "AGENTS.md" in done.stdout
    assert list(root.iterdir()) == []  # the demo's home was removed
