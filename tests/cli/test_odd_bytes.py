"""Bytes that are not UTF-8 (argv, stdin, a model's tool arguments, file names) never crash a turn."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from nanobot.fakellm import Reply


def stored_lines(home):
    return [
        json.loads(line)
        for p in (home / "sessions").glob("*.jsonl")
        for line in p.read_text(encoding="utf-8").splitlines()
    ]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_invalid_utf8_in_argv_tool_arguments_and_file_names(
    nanobot_cmd, nanobot_run, fake_llm, configure, isolated_home, protocol
):
    configure(protocol)
    workspace = isolated_home / "workspace"
    (workspace / "odd").mkdir(parents=True)
    os.close(
        os.open(
            os.path.join(os.fsencode(workspace / "odd"), b"caf\xe9.txt"), os.O_CREAT | os.O_WRONLY
        )
    )
    fake_llm.script(
        Reply.tool_calls(
            [
                ("write_file", '{"path": "note\\ud800.txt", "content": "hi \\udfff there"}'),
                ("list_dir", {"path": "odd"}),
            ]
        ),
        Reply.text("done"),
    )
    argv = ["agent", "-m", b"r\xe9sum\xe9 of \xff"]
    if protocol == "openai":  # a real process: Python itself decodes the argv bytes
        done = subprocess.run(
            [*nanobot_cmd, *argv], capture_output=True, env=dict(os.environ), timeout=60
        )
        returncode, stdout, stderr = (
            done.returncode,
            done.stdout.decode(),
            done.stderr.decode("utf-8", "replace"),
        )
    else:  # in this process, given the str Python makes of those bytes (os.fsdecode: surrogateescape)
        ran = nanobot_run(*(os.fsdecode(arg) for arg in argv))
        returncode, stdout, stderr = ran.returncode, ran.stdout, ran.stderr
    assert returncode == 0, stderr
    assert "Traceback" not in stderr and "not valid UTF-8" in stderr
    assert stdout.strip() == "done"
    lines = stored_lines(isolated_home)
    user = [m for m in lines if m.get("role") == "user"]
    assert user[0]["content"] == "r\ufffdsum\ufffd of \ufffd"
    results = [m for m in lines if m.get("role") == "tool"]
    assert len(results) == 2 and "caf\ufffd.txt" in results[1]["content"]  # the step was saved
    calls = [m for m in lines if m.get("tool_calls")][0]["tool_calls"]
    assert "\ufffd" in calls[0]["function"]["arguments"]
    assert (workspace / "note\ufffd.txt").read_text() == "hi \ufffd there"
    assert (
        json.dumps(fake_llm.requests[1].messages[-1], ensure_ascii=False).count("caf\ufffd.txt")
        == 1
    )
    fake_llm.assert_all_valid()


def test_invalid_utf8_on_piped_stdin(nanobot_run, fake_llm, configure, isolated_home):
    configure()
    fake_llm.script(Reply.text("read it"))
    result = nanobot_run("agent", input=b"price: 5\x80 \xc3(\n")
    stderr = result.stderr
    assert result.returncode == 0, stderr
    assert "2 byte(s) in the message read from stdin were not valid UTF-8" in stderr
    assert [m["content"] for m in stored_lines(isolated_home) if m.get("role") == "user"] == [
        "price: 5\ufffd \ufffd(\n"
    ]
    assert fake_llm.requests[0].messages[-1]["content"].endswith("price: 5\ufffd \ufffd(\n")
