"""SIGKILL a real `nanobot agent -m` during its consolidations: no checkpoint version is ever lost.

Each turn of a long task ends with a consolidation (an 8k window and long answers). Its process is
killed while the consolidation request waits for its reply, or just after the reply arrived (while
HISTORY.md, the new checkpoint version and the pointer are written). After every kill the
working-state file must still hold every version seen before, numbered without gaps, and the
session must open; the last, normal turn must carry the latest version.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import subprocess
import time

from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import is_consolidation, save_memory_reply
from nanobot.session.store import SessionStore
from nanobot.session.working_state import SOURCE, WorkingStateLog
from test_working_state import PLANTED_ITEMS, PLANTED_TURNS, filler, wire_text

from budget_helpers import make_strict

SEED = int(os.environ.get("NANOBOT_CRASH_SEED", "20260301"))
TURNS = 18
WINDOW = 8192


def test_sigkill_during_consolidation_loses_no_checkpoint_version(
    nanobot_forkserver, nanobot_cmd, fake_llm, configure
):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm, WINDOW)
    rng = random.Random(SEED)

    def respond(req) -> Reply:
        if is_consolidation(req):
            return dataclasses.replace(save_memory_reply(req), delay=rng.uniform(0.0, 0.3))
        return Reply.text(f"Working on it. {filler(len(req.messages), WINDOW // 6)}")

    fake_llm.responder = respond
    path = SessionStore().path_for("cli:direct")
    log = WorkingStateLog(path)
    seen: list[tuple[int, str]] = []
    kills = 0
    texts = [
        *PLANTED_TURNS,
        *(f"turn {n}: carry on please" for n in range(len(PLANTED_TURNS), TURNS)),
    ]
    unsaved = False
    for turn in range(2 * TURNS):
        if not texts:
            break
        text = texts[0]
        start = len(fake_llm.requests)
        proc = nanobot_forkserver.popen(
            [*nanobot_cmd, "agent", "-m", text],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        # 0: not killed; 1: killed waiting for the reply; 2: killed while writing it. A message killed
        # before it was saved goes again unkilled, so the task moves on however the kills land.
        aim = 0 if unsaved else turn % 3
        deadline = time.monotonic() + 60
        while aim and proc.poll() is None and time.monotonic() < deadline:
            asked = [r for r in fake_llm.requests[start:] if is_consolidation(r)]
            if asked and (aim == 1 or asked[-1].t_answered is not None):
                time.sleep(rng.uniform(0.0, 0.2 if aim == 1 else 0.1))
                if proc.poll() is None:
                    proc.kill()
                    kills += 1
                break
            time.sleep(0.002)
        proc.communicate(timeout=60)
        unsaved = not any(
            m.get("content") == text for m in SessionStore().load("cli:direct").messages
        )
        if not unsaved:
            texts.pop(
                0
            )  # else it was killed before the message was saved (room was being made): send it again
        versions = [(v.number, v.text) for v in log.read().versions]
        assert versions[: len(seen)] == seen, f"turn {turn}: a checkpoint version was lost"
        assert [n for n, _ in versions] == list(range(1, len(versions) + 1))
        seen = versions
        SessionStore().open("cli:direct")._lock.release()  # the session opens after the kill
    assert not texts and kills >= TURNS // 3 and len(seen) >= 4, (texts, kills, len(seen))

    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("done")
    )
    final = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "where are we?"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    out, err = final.communicate(timeout=60)
    assert final.returncode == 0, err
    last = wire_text([r for r in fake_llm.requests if not is_consolidation(r)][-1])
    block = re.search(
        r'<untrusted-data source="' + re.escape(SOURCE) + r'">\n(.*?)\n</untrusted-data>',
        last,
        re.S,
    )
    assert block is not None and block.group(1) == WorkingStateLog(path).read().text
    assert all(item in block.group(1) for item in PLANTED_ITEMS)
    fake_llm.assert_all_valid()
