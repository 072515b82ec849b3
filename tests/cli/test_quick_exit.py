"""How the `nanobot` command ends (cli/app.run): exit statuses, output flushed into a pipe,
threads waited for, atexit hooks run, and the turn on disk."""

from __future__ import annotations

import json
import subprocess
import sys

from nanobot.fakellm import Reply

# main() replaced by a stand-in: a non-daemon thread that finishes late, an atexit hook, buffered
# output larger than a pipe holds, then the exit the stand-in chooses
STAND_IN = r"""
import atexit, sys, threading, time
import nanobot.cli.app as app

def late():
    time.sleep(0.3)
    open(sys.argv[1] + "/thread", "w").write("done")

def main():
    threading.Thread(target=late).start()
    atexit.register(lambda: open(sys.argv[1] + "/atexit", "w").write("ran"))
    sys.stdout.write("x" * 200_000)
    sys.exit(eval(sys.argv[2]))

app.main = main
app.run()
"""


def stand_in(tmp_path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path), code],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_exit_statuses_output_threads_and_atexit_hooks_hold_at_the_end(tmp_path):
    for code, status, err in (
        ("None", 0, ""),
        ("3", 3, ""),
        ("256 + 7", 7, ""),
        ("'went wrong'", 1, "went wrong\n"),
    ):
        (tmp_path / "thread").unlink(missing_ok=True)
        (tmp_path / "atexit").unlink(missing_ok=True)
        done = stand_in(tmp_path, code)
        assert (done.returncode, done.stderr) == (status, err), code
        assert done.stdout == "x" * 200_000  # all of it, through a pipe
        assert (tmp_path / "thread").read_text() == "done"  # the late thread was waited for
        assert (tmp_path / "atexit").read_text() == "ran"


def test_a_real_one_shot_turn_prints_saves_and_exits_0(
    configure, fake_llm, nanobot_cmd, isolated_home
):
    configure()
    fake_llm.script(Reply.text("The answer, in full."))
    done = subprocess.run(
        [*nanobot_cmd, "agent", "-m", "hi"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "The answer, in full." in done.stdout
    (session,) = (isolated_home / "sessions").glob("*.jsonl")
    lines = [json.loads(x) for x in session.read_text().splitlines()]
    assert [m.get("content") for m in lines if m.get("role") == "assistant"] == [
        "The answer, in full."
    ]
    bad = subprocess.run([*nanobot_cmd, "nosuch"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "No such command 'nosuch'" in bad.stderr
