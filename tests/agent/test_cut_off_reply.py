"""A reply the length limit cut off never acts (issue 32, attack 7): its tool calls are answered
with an error telling the model to retry with less, none is run, and the turn goes on."""

from __future__ import annotations

import json

import pytest
from nanobot.fakellm import Reply

from cli_runner import run_cli


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_tool_calls_of_a_cut_off_reply_are_not_run(configure, fake_llm, isolated_home, protocol):
    configure(protocol)
    ws = isolated_home / "workspace"
    fake_llm.script(
        # the arguments happen to parse, but the reply ended at the limit: it may be missing a call or a line
        Reply.tool_calls(
            [
                ("write_file", {"path": "planted.txt", "content": "half of it"}),
                ("exec", {"command": "touch exec-ran"}),
            ],
            finish_reason="length",
        ),
        Reply.tool_calls([("write_file", {"path": "notes.txt", "content": "short"})]),
        Reply.text("done"),
    )
    result = run_cli("agent", "-m", "write my notes")
    assert result.returncode == 0, result.stderr
    assert not (ws / "planted.txt").exists() and not (ws / "exec-ran").exists()
    assert (ws / "notes.txt").read_text() == "short"  # the retry with less went through
    assert "none was run" in result.stderr  # the person running it is told too
    # the model was told, in the request after the cut-off reply, for each call
    results = json.dumps(fake_llm.requests[1].body)
    assert results.count("no call of that reply was run") == 2
    fake_llm.assert_all_valid()
