"""SIGKILL a real `nanobot agent -m /new` while it records and archives the conversation.

Each trial says two things in the live conversation, then runs `/new` and kills it: at a random
moment from its start, while its summarising request waits for the reply, or just after the reply
arrived (while HISTORY.md, the pointer and the archive's rename are written). After every kill:

- every message ever said is in exactly one place: the live conversation or one archived one;
- HISTORY.md records no chunk twice;
- the session opens.

A last `/new` runs to its end: the live conversation is then empty, everything said is archived
once, and `history grep` finds the words of a trial whose `/new` was killed.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import subprocess
import time
from collections import Counter

from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import is_consolidation, save_memory_reply
from nanobot.paths import default_workspace, memory_dir
from nanobot.session.store import SessionStore

SEED = int(os.environ.get("NANOBOT_CRASH_SEED", "20260301"))
TRIALS = 6
WORDS = ("harbour", "quartz", "falcon", "saffron", "glacier", "cobalt")
KEY = "cli:direct"


def _run(forkserver, cmd, *args: str) -> subprocess.Popen:
    return forkserver.popen(
        [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )


def _where_said() -> Counter:
    """How many times each user text stands in the live conversation and the archived ones."""
    store = SessionStore()
    found: Counter = Counter()
    for name in [KEY, *(info.key for info in store.archives(KEY))]:
        for m in store.load(name).messages:
            if m.get("role") == "user":
                found[m.get("content")] += 1
    return found


def _history_chunks() -> list[str]:
    path = memory_dir(default_workspace()) / "HISTORY.md"
    text = path.read_text() if path.exists() else ""
    return re.findall(r"<!-- nanobot chunk (\w+) \+\d+ -->", text)


def test_sigkill_during_new_loses_no_message_and_records_none_twice(
    nanobot_forkserver, nanobot_cmd, fake_llm, configure
):
    configure()
    rng = random.Random(SEED)

    def respond(req) -> Reply:
        if is_consolidation(req):
            return dataclasses.replace(save_memory_reply(req), delay=rng.uniform(0.0, 0.3))
        return Reply.text("noted")

    fake_llm.responder = respond
    said: list[str] = []
    kills = 0
    for trial, word in enumerate(WORDS[:TRIALS]):
        for k in range(2):
            text = f"trial {trial}: remember the {word} number {k}"
            turn = _run(nanobot_forkserver, nanobot_cmd, "agent", "-m", text)
            _, err = turn.communicate(timeout=60)
            assert turn.returncode == 0, err
            said.append(text)
        start = len(fake_llm.requests)
        recorded = len(_history_chunks())
        began = time.monotonic()
        new = _run(nanobot_forkserver, nanobot_cmd, "agent", "-m", "/new")
        # 0: a random moment from its start; 1: while the summary is awaited; 2: as soon as its
        # entry is in HISTORY.md (before the pointer and the archive's rename, most times)
        aim = trial % 3
        moment = began + rng.uniform(0.0, 0.4)
        deadline = began + 60
        while new.poll() is None and time.monotonic() < deadline:
            if aim == 0:
                due = time.monotonic() >= moment
            elif aim == 1:
                due = any(is_consolidation(r) for r in fake_llm.requests[start:])
            else:
                due = len(_history_chunks()) > recorded
            if due:
                if aim == 1:
                    time.sleep(rng.uniform(0.0, 0.15))
                if new.poll() is None:
                    new.kill()
                    kills += 1
                break
            time.sleep(0.0005)
        new.communicate(timeout=60)
        where = _where_said()
        assert all(where[text] == 1 for text in said), (trial, aim, where)
        chunks = _history_chunks()
        assert len(chunks) == len(set(chunks)), f"trial {trial}: a chunk was recorded twice"
        SessionStore().open(KEY)._lock.release()  # the session opens after the kill
    assert kills >= TRIALS // 2, kills

    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("noted")
    )
    last = _run(nanobot_forkserver, nanobot_cmd, "agent", "-m", "/new")
    _, err = last.communicate(timeout=60)
    assert last.returncode == 0, err
    assert SessionStore().load(KEY).messages == []
    where = _where_said()
    assert all(where[text] == 1 for text in said), where
    chunks = _history_chunks()
    assert len(chunks) == len(set(chunks))
    grep = _run(nanobot_forkserver, nanobot_cmd, "history", "grep", WORDS[0])
    out, err = grep.communicate(timeout=60)
    assert grep.returncode == 0, err
    assert b"remember the harbour number 0" in out
    fake_llm.assert_all_valid()
