"""The benign corpus through the fake LLM: under the default policy at most 2% of everyday
commands may need approval or fail, and those are listed (benign_corpus.KNOWN_FAILURES)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from benign_corpus import COMMANDS, KNOWN_FAILURES, NETWORK_COMMANDS, prepare, runnable
from nanobot.app import open_assistant
from nanobot.config import load_config
from nanobot.fakellm import Reply

from canaries import MECHANISMS, confinement_or_skip


def _run_corpus(cfg_path, fake_llm, commands: list[str]) -> dict[str, str]:
    """One turn whose model calls exec once per command; returns command -> tool result."""
    fake_llm.script(
        Reply.tool_calls([("exec", {"command": c}) for c in commands]), Reply.text("done")
    )

    async def turn():
        assistant = open_assistant(load_config(cfg_path), "cli:direct", stream=False)
        try:
            await assistant.conversation.send("do my chores")
            messages = list(assistant.conversation.session.messages)
        finally:
            await assistant.aclose()
        return messages

    messages = asyncio.run(turn())
    calls = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            calls[call["id"]] = json.loads(call["function"]["arguments"])["command"]
    return {calls[m["tool_call_id"]]: m["content"] for m in messages if m.get("role") == "tool"}


def _write_exec_config(cfg_path, **exec_cfg) -> None:
    data = json.loads(cfg_path.read_text())
    data.setdefault("tools", {})["exec"] = exec_cfg
    # the corpus comes as one step; the default cap of 32 calls per step would leave most unrun
    data["agents"]["defaults"]["maxToolCallsPerStep"] = 1000
    cfg_path.write_text(json.dumps(data))


# "auto" runs the whole corpus under what the default picks here (bwrap or Landlock where one
# works); each mechanism by name is the thorough tier's (tests/conftest.py).
@pytest.mark.parametrize(
    "mechanism", ["auto", *(pytest.param(m, marks=pytest.mark.thorough) for m in MECHANISMS)]
)
def test_benign_corpus_runs_under_the_default_policy(
    configure, fake_llm, isolated_home, mechanism, capsys
):
    if mechanism != "auto":
        confinement_or_skip(mechanism)
    cfg_path = configure()
    _write_exec_config(
        cfg_path, confinement=mechanism
    )  # everything else: the defaults (network "ask", ...)
    ws = isolated_home / "workspace"
    prepare(ws)
    commands = runnable(COMMANDS)
    assert len(commands) >= 150, f"only {len(commands)} of the corpus's programs are installed here"
    started = time.monotonic()
    results = _run_corpus(cfg_path, fake_llm, commands)
    took = time.monotonic() - started
    failed = {c: r[-300:] for c, r in results.items() if not r.rstrip().endswith("[exit code: 0]")}
    with capsys.disabled():
        print(
            f"\nbenign corpus [{mechanism}]: {len(commands)} commands in {took:.1f} s, {len(failed)} failed"
        )
    assert len(results) == len(commands)
    assert set(failed) == set(KNOWN_FAILURES) & set(commands), (
        failed
    )  # the list in benign_corpus.py is the truth
    assert len(failed) <= 0.02 * len(commands)
    fake_llm.assert_all_valid()


def test_curl_works_where_network_is_allowed(
    configure, fake_llm, isolated_home, canary_tcp, loopback_egress
):
    """Through exec's egress proxy, to a domain tools.web.allowDomains lists (the canary's address)."""
    cfg_path = configure()
    _write_exec_config(cfg_path, network=True)
    data = json.loads(cfg_path.read_text())
    data["tools"]["web"] = {"allowDomains": [loopback_egress]}
    cfg_path.write_text(json.dumps(data))
    url = f"http://{loopback_egress}:{canary_tcp.port}/"
    commands = [c.format(url=url) for c in runnable(NETWORK_COMMANDS)]
    results = _run_corpus(cfg_path, fake_llm, commands)
    failed = {c: r for c, r in results.items() if not r.rstrip().endswith("[exit code: 0]")}
    assert failed == {} and canary_tcp.connections >= len(commands)
