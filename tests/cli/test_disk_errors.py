"""Full and read-only disks: a clear message, no traceback, no torn line, the user told what was saved."""

from __future__ import annotations

import errno
import os
import time

import pytest
from nanobot.errors import StorageError
from nanobot.fakellm import Reply
from nanobot.fsio import append_durably
from nanobot.session.store import SessionStore
from tests.cli.disks import fill, remount_read_only, tmpfs


def session_bytes(sessions) -> dict:
    return {p.name: p.read_bytes() for p in sessions.glob("*.jsonl")}


def test_full_disk_during_the_session_append(nanobot_run, fake_llm, configure, isolated_home):
    configure()
    fake_llm.script(Reply.text("first answer"), Reply.text("saved this time"))
    with tmpfs(isolated_home / "sessions", size="64k") as sessions:
        assert nanobot_run("agent", "-m", "hello").returncode == 0
        before = session_bytes(sessions)
        filler = fill(sessions, leave=4096)  # room for part of the next message only
        big = "please remember this: " + "x" * 20_000
        full = nanobot_run("agent", "-m", big)
        assert full.returncode == 1
        assert "Traceback" not in full.stderr
        assert (
            "error: could not save the session" in full.stderr
            and "No space left on device" in full.stderr
        )
        assert "hint: Free some disk space" in full.stderr
        assert "your message was not saved and was not sent to the model" in full.stderr
        assert session_bytes(sessions) == before  # no torn partial line
        assert len(fake_llm.requests) == 1  # the model was not called with an unsaved message
        filler.unlink()
        again = nanobot_run("agent", "-m", big)
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "saved this time"
        assert fake_llm.requests[-1].messages[-1]["content"].endswith(big)


def test_read_only_home_for_onboard_and_agent(nanobot_run, fake_llm, configure, isolated_home):
    with tmpfs(isolated_home, size="1m"):
        configure()
        assert nanobot_run("onboard").returncode == 0
        remount_read_only(isolated_home)
        (isolated_home / "config.json")  # stays readable
        for args, what in (
            (["onboard", "-w", str(isolated_home / "other")], "could not"),
            (["agent", "-m", "hi"], "could not open the session"),
        ):
            result = nanobot_run(*args)
            assert result.returncode in (1, 2), result.stderr
            assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) <= 4, (
                result.stderr
            )
            assert what in result.stderr and "Read-only file system" in result.stderr
            assert "hint:" in result.stderr and "NANOBOT_HOME" in result.stderr
        assert fake_llm.requests == []


def test_a_failed_append_is_cut_back_to_the_last_whole_line(tmp_path, monkeypatch):
    """Where no small file system can be mounted: the OS error injected at the write itself."""
    store = SessionStore(tmp_path / "sessions")
    session = store.open("cli:direct")
    store.append(session, [{"role": "user", "content": "kept"}])
    before = session.path.read_bytes()
    real_write = os.write
    calls = []

    def short_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))  # half a record reaches the file...
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # ...then the disk is full

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(StorageError) as caught:
        store.append(session, [{"role": "user", "content": "lost " * 100}])
    monkeypatch.setattr(os, "write", real_write)
    assert caught.value.errno == errno.ENOSPC and str(session.path) in caught.value.message
    assert session.path.read_bytes() == before
    assert [m["content"] for m in session.messages] == ["kept"]
    store.append(session, [{"role": "user", "content": "next"}])
    store.close(session)
    reopened = SessionStore(tmp_path / "sessions").load("cli:direct")
    assert [m["content"] for m in reopened.messages] == ["kept", "next"] and not reopened.warnings


def test_append_durably_reports_the_error_and_leaves_the_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "log"
    append_durably(path, "one\n")
    monkeypatch.setattr(
        os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error"))
    )
    with pytest.raises(OSError):
        append_durably(path, "two\n")
    assert path.read_bytes() == b"one\n"


def test_chat_puts_an_unsaved_message_back_at_the_prompt(fake_llm, configure, isolated_home):
    from tests.cli.terminal import Terminal

    configure()
    fake_llm.script(Reply.text("saved now"))
    with tmpfs(isolated_home / "sessions", size="64k") as sessions:
        term = Terminal("agent", rows=30, columns=100)
        try:
            term.wait_for("you ›")
            filler = fill(sessions)
            term.paste("remember: " + "y" * 6000)  # more than the session file's last page holds
            term.wait_for("your message was not saved and was not sent to the model")
            time.sleep(0.5)
            assert fake_llm.requests == []
            filler.unlink()
            term.send("")  # Enter alone sends the text offered again at the prompt
            term.wait_for("saved now\nyou ›")
            term.send("/exit")
            assert term.finish() == 0
        finally:
            term.close()
        assert "No space left on device" in term.text() and "Traceback" not in term.text()
        assert fake_llm.requests[0].messages[-1]["content"].endswith("y" * 6000)
