"""The first hour, second round (issue 34): what a new user still hit, through the real command."""

from __future__ import annotations

import json

from nanobot.messages import assistant, user
from nanobot.session.store import SessionStore


def _session(key: str, messages: list[dict], pointer: int = 0) -> None:
    store = SessionStore()
    session = store.open(key)
    store.append(session, messages)
    if pointer:
        store.set_pointer(session, pointer)
    store.close(session)


def test_session_show_json_prints_a_consolidated_session(nanobot_run, configure):
    configure()
    _session("cli:direct", [user("old question"), assistant("old answer"), user("new question"),
                            assistant("new answer")], pointer=2)
    shown = nanobot_run("session", "show", "cli:direct", "--json")
    assert shown.returncode == 0, shown.stderr
    assert "Traceback" not in shown.stderr
    assert [m["content"] for m in json.loads(shown.stdout)] == ["old question", "old answer", "new question",
                                                               "new answer"]
