"""The working state survives compaction: a long task through the real `nanobot` command.

A goal, three identifiers, a decision and a next step are planted in the first turns of a session;
then long answers push it through several consolidations. The fake server answers each
consolidation request as a model would (nanobot/fakellm/summariser.py): it fills
`session_checkpoint` from the excerpt and the previous checkpoint the request carries. The last
request must still carry every planted item, inside the one working-state block, while the
planted turns themselves have left the prompt.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from budget_helpers import make_strict, over_window
from nanobot.fakellm import Reply
from nanobot.fakellm.summariser import is_consolidation
from nanobot.session.store import SessionStore
from nanobot.session.working_state import SOURCE, WorkingStateLog

PLANTED_TURNS = [
    "Goal: migrate the billing service to Postgres 16. The ticket is BILL-4821",
    "We work on the branch feat/pg16-migration and the config lives in /srv/billing/config.yaml",
    "Decision: keep the old replica until Friday",
    "Next step: run the schema diff against staging",
]
PLANTED_ITEMS = ["migrate the billing service to Postgres 16", "BILL-4821", "feat/pg16-migration",
                 "/srv/billing/config.yaml", "keep the old replica until Friday",
                 "run the schema diff against staging"]
TURNS = 16
_VOCAB = [a + b for a in ("ka", "lo", "mi", "ne", "pu", "ro", "sa", "ti", "vu", "ze")
          for b in ("ber", "dan", "fol", "gim", "hup", "jas", "kor", "lum", "mep", "nix")]
_BLOCK = re.compile(r'<untrusted-data source="' + re.escape(SOURCE) + r'">\n(.*?)\n</untrusted-data>', re.S)


def filler(seed: int, tokens: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_VOCAB) for _ in range(tokens // 2)) + "."


def _texts(content) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [p.get("text", "") for p in content or [] if isinstance(p, dict)]


def wire_text(req) -> str:
    """Every text of a request as the model reads it (system prompt and messages), one after another."""
    parts = _texts(req.system) if req.system else []
    for msg in req.messages:
        parts += _texts(msg.get("content"))
    return "\n".join(parts)


def run_long_task(nanobot_run, fake_llm, configure, *, protocol: str, window: int) -> list[str]:
    configure(protocol, contextWindowTokens=window)
    make_strict(fake_llm, window)
    fake_llm.summarise = True
    answer_tokens = window // 6
    fake_llm.responder = lambda req: Reply.text(f"Working on it. {filler(len(req.messages), answer_tokens)}")
    stderr = []
    for turn in range(TURNS):
        text = PLANTED_TURNS[turn] if turn < len(PLANTED_TURNS) else f"turn {turn}: carry on please"
        result = nanobot_run("agent", "-m", text)
        assert result.returncode == 0, result.stderr
        stderr.append(result.stderr)
    return stderr


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("window", [8192, 32768])
def test_planted_items_reach_the_last_request_after_compactions(nanobot_run, fake_llm, configure, isolated_home,
                                                               protocol, window):
    stderr = run_long_task(nanobot_run, fake_llm, configure, protocol=protocol, window=window)
    fake_llm.assert_all_valid()  # includes prompt + max_tokens over the window
    assert over_window(fake_llm, window) == []
    consolidations = [r for r in fake_llm.requests if is_consolidation(r)]
    turns = [r for r in fake_llm.requests if not is_consolidation(r)]
    assert len(consolidations) >= 2
    session_path = SessionStore().path_for("cli:direct")
    state = WorkingStateLog(session_path).read()
    assert len(state.versions) >= 2, "every consolidation wrote a version"

    last = wire_text(turns[-1])
    blocks = _BLOCK.findall(last)
    assert len(blocks) == 1, "one working-state block in the request"
    for item in PLANTED_ITEMS:
        assert item in blocks[0], f"{item!r} was lost from the working state"
    # the planted turns have left the prompt: only the block carries them now
    outside = _BLOCK.sub("", last)
    assert not any(item in outside for item in PLANTED_ITEMS)
    # the later consolidations got the previous checkpoint to merge
    assert "BILL-4821" in "".join(_texts(consolidations[-1].messages[-1]["content"])).split("## Current MEMORY")[0]
    # between two consolidations the system prompt stays byte-identical (the block is not in it)
    system = None
    for req in fake_llm.requests:
        if is_consolidation(req):
            system = None
            continue
        now = json.dumps(req.system) if protocol == "anthropic" else req.messages[0]["content"]
        assert system is None or now == system, "the system prompt changed between two consolidations"
        assert SOURCE not in now
        system = now
    # each compaction said when it started and what it kept
    said = "\n".join(stderr)
    assert "compacting" in said and re.search(r"compaction done: kept 6 items of working state; \d+ messages? "
                                              r"archived", said), said[-2000:]


def test_session_show_prints_every_version_and_json_carries_them(nanobot_run, fake_llm, configure, isolated_home):
    run_long_task(nanobot_run, fake_llm, configure, protocol="openai", window=8192)
    versions = WorkingStateLog(SessionStore().path_for("cli:direct")).read().versions
    shown = nanobot_run("session", "show", "cli:direct")
    assert shown.returncode == 0, shown.stderr
    assert "working state" in shown.stdout and "BILL-4821" in shown.stdout
    assert f"version {versions[-1].number}" in shown.stdout
    as_json = json.loads(nanobot_run("session", "show", "cli:direct", "--json").stdout)
    assert [v["version"] for v in as_json["working_state"]["versions"]] == [v.number for v in versions]
    assert as_json["working_state"]["current"]["text"] == versions[-1].text
    assert as_json["messages"][0]["content"] == PLANTED_TURNS[0]
