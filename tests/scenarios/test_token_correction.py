"""A correction learned from the provider's counts never locks a small-window chat out for good.

Through the real `nanobot` command against a strict fake server (cl100k counts, prompt + max_tokens
rejected over the window): one odd usage report teaches a correction under which the fixed prompt no
longer fits; the refusal says so and names the way back, and that way back works.
"""

from __future__ import annotations

import json

from nanobot.fakellm import Reply

from budget_helpers import is_consolidation, make_strict, over_window, save_memory_reply

WINDOW = 6800


def _answers(*replies: Reply):
    queue = list(replies)
    return lambda req: save_memory_reply(req) if is_consolidation(req) else queue.pop(0)


def test_a_one_off_count_that_locks_the_chat_out_is_named_and_forgotten(
    nanobot_run, fake_llm, configure, isolated_home
):
    configure(contextWindowTokens=WINDOW, maxTokens=1000)
    make_strict(fake_llm, WINDOW)
    # a proxy's odd usage report: 6,600 prompt tokens for a request cl100k counts at about 4,200
    fake_llm.responder = _answers(
        Reply.text("first answer", usage={"prompt_tokens": 6600, "completion_tokens": 3}),
        Reply.text("second answer"),
        Reply.text("third answer"),
    )
    first = nanobot_run("agent", "-m", "hello")
    assert first.returncode == 0 and "first answer" in first.stdout
    learned = json.loads((isolated_home / "calibration.json").read_text())
    assert learned["custom/test-model"]["ratios"][0] > 1.4

    locked = nanobot_run("agent", "-m", "are you there?")
    sent = len(fake_llm.requests)
    assert locked.returncode != 0 and sent == 1  # nothing the window cannot take was sent
    assert "fits the context window by nanobot's own count, but not at the x1.5" in locked.stderr
    assert "nanobot doctor --forget-correction" in locked.stderr
    again = nanobot_run("agent", "-m", "are you there?")
    assert (
        again.returncode != 0 and len(fake_llm.requests) == 1
    )  # still locked: nothing re-learns it

    status = " ".join(nanobot_run("status", env={"COLUMNS": "200"}).stdout.split())
    assert "corrected x1.5" in status and "`nanobot doctor --forget-correction` forgets" in status
    shown = nanobot_run("doctor", "--offline")
    assert "corrected x1.5" in shown.stdout and "--forget-correction" in shown.stdout
    forgot = nanobot_run("doctor", "--offline", "--forget-correction")
    assert "forgot the token correction learned for custom/test-model" in forgot.stdout
    assert not (isolated_home / "calibration.json").exists()

    for text, answer in (("are you there?", "second answer"), ("and now?", "third answer")):
        turn = nanobot_run("agent", "-m", text)
        assert turn.returncode == 0, turn.stderr
        assert answer in turn.stdout
    turns = [r for r in fake_llm.requests if not is_consolidation(r)]
    assert "and now?" in json.dumps(turns[-1].messages)
    # the provider's real counts taught a correction the fixed prompt fits under
    ratio = json.loads((isolated_home / "calibration.json").read_text())["custom/test-model"]
    assert max(ratio["ratios"]) < 1.2
    assert over_window(fake_llm, WINDOW) == []
    fake_llm.assert_all_valid()
