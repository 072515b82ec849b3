"""A user turn (nanobot/agent/conversation.py): what the user typed is on disk before anything else runs.

The crash test SIGKILLs a real `nanobot agent -m` while the consolidation that makes room for the
turn waits on a summariser that never answers; the typed message must be in the session file,
and the next run must carry on with it exactly once, in a valid request.
"""

from __future__ import annotations

import subprocess
import time

from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import save_memory_reply
from nanobot.session.store import SessionStore
from test_working_state import filler, wire_text

from budget_helpers import is_consolidation, make_strict, write_session

WINDOW = 8192
TYPED = "please keep the invoice numbers from the March report, I typed this once"
NEXT = "carry on with the invoices"


def _long_history(turns: int = 12) -> list[dict]:
    """More unconsolidated turns than an 8k window holds: the next turn must make room first."""
    out: list[dict] = []
    for n in range(turns):
        out += [
            {"role": "user", "content": f"question {n}: {filler(n, 40)}"},
            {"role": "assistant", "content": f"answer {n}: {filler(100 + n, 1200)}"},
        ]
    return out


def _occurrences(messages: list[dict], text: str) -> int:
    return sum(1 for m in messages if m.get("role") == "user" and m.get("content") == text)


def test_sigkill_while_making_room_keeps_the_typed_message(
    nanobot_forkserver, nanobot_cmd, fake_llm, configure
):
    configure(contextWindowTokens=WINDOW)
    make_strict(fake_llm, WINDOW)
    write_session(SessionStore(), "cli:direct", _long_history())
    # the summariser hangs: the turn is still making room when the process dies
    fake_llm.responder = lambda req: (
        Reply.text("late", delay=120) if is_consolidation(req) else Reply.text("early")
    )
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", TYPED],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not any(is_consolidation(r) for r in fake_llm.requests) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    assert [is_consolidation(r) for r in fake_llm.requests] == [True], "room was not being made"
    proc.kill()
    proc.communicate(timeout=30)

    on_disk = SessionStore().load("cli:direct").messages
    assert _occurrences(on_disk, TYPED) == 1, "the typed message was lost with the process"
    assert on_disk[-1].get("content") == TYPED

    fake_llm.reset()
    fake_llm.responder = lambda req: (
        save_memory_reply(req) if is_consolidation(req) else Reply.text("carried on")
    )
    again = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", NEXT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    assert "carried on" in out.decode()
    chat = [r for r in fake_llm.requests if not is_consolidation(r)]
    assert len(chat) == 1
    assert wire_text(chat[0]).count(NEXT) == 1
    # the message typed before the kill reaches the model once: in the chat request, or (as here, where
    # making room archives everything before the new message) in the transcript the summariser records
    assert sum(wire_text(r).count(TYPED) for r in fake_llm.requests) == 1
    fake_llm.assert_all_valid()
    after = SessionStore().load("cli:direct").messages
    assert _occurrences(after, TYPED) == 1 and _occurrences(after, NEXT) == 1
    assert (after[-1].get("role"), after[-1].get("content")) == ("assistant", "carried on")
