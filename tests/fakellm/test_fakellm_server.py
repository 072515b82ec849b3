"""Server behaviour: the script queue, responder, recording, rule checks, context window, timing."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import anthropic
import openai
import pytest
from nanobot.fakellm import FakeLLMServer, RecordedRequest, Reply

HI = [{"role": "user", "content": "hi"}]


def post(
    server: FakeLLMServer, protocol: str, body: dict, timeout: float = 5.0
) -> tuple[int, dict]:
    """A bare HTTP client, so these tests don't depend on either SDK's behaviour."""
    path = "/v1/chat/completions" if protocol == "openai" else "/v1/messages"
    req = urllib.request.Request(
        server.base_url + path,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def oa(messages=HI, **kw) -> dict:
    return {"model": "m", "messages": messages, **kw}


def an(messages=HI, **kw) -> dict:
    return {"model": "m", "max_tokens": 50, "messages": messages, **kw}


def test_urls_and_lifecycle():
    server = FakeLLMServer()
    with pytest.raises(RuntimeError):
        _ = server.base_url
    with server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.openai_base_url == server.base_url + "/v1"
        assert server.anthropic_base_url == server.base_url
        assert post(server, "openai", oa())[0] == 200
    with pytest.raises(RuntimeError):
        _ = server.base_url


def test_script_is_shared_across_protocols_in_arrival_order(fake_llm):
    fake_llm.script(Reply.text("first"), Reply.text("second"), Reply.text("third"))
    assert fake_llm.queued == 3
    assert post(fake_llm, "anthropic", an())[1]["content"][0]["text"] == "first"
    assert post(fake_llm, "openai", oa())[1]["choices"][0]["message"]["content"] == "second"
    assert post(fake_llm, "anthropic", an())[1]["content"][0]["text"] == "third"
    assert fake_llm.queued == 0
    assert [r.protocol for r in fake_llm.requests] == ["anthropic", "openai", "anthropic"]
    assert [r.index for r in fake_llm.requests] == [0, 1, 2]


def test_responder_answers_when_queue_is_empty(fake_llm):
    seen: list[RecordedRequest] = []

    def responder(req: RecordedRequest) -> Reply:
        seen.append(req)
        return Reply.text(f"turn {len(req.messages)}")

    fake_llm.script(Reply.text("scripted"))
    fake_llm.responder = responder
    assert post(fake_llm, "openai", oa())[1]["choices"][0]["message"]["content"] == "scripted"
    three = HI + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
    assert post(fake_llm, "openai", oa(three))[1]["choices"][0]["message"]["content"] == "turn 3"
    assert [r.index for r in seen] == [1]
    assert not any(r.unscripted for r in fake_llm.requests)


def test_unscripted_request_gets_ok_and_is_marked(fake_llm):
    status, body = post(fake_llm, "anthropic", an())
    assert status == 200 and body["content"][0]["text"] == "ok"
    assert fake_llm.requests[0].unscripted
    assert fake_llm.violations() == []  # unscripted is not a rule violation


def test_responder_that_raises_gives_500_and_a_violation(fake_llm):
    def responder(req):
        raise KeyError("boom")

    fake_llm.responder = responder
    status, body = post(fake_llm, "openai", oa())
    assert status == 500 and "boom" in body["error"]["message"]
    assert any("responder raised KeyError" in v for v in fake_llm.violations())


def test_invalid_requests_are_recorded_but_still_answered(fake_llm):
    bad_openai = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "and?"},
    ]
    bad_anthropic = [{"role": "user", "content": "q"}, {"role": "user", "content": "again"}]
    assert post(fake_llm, "openai", oa(bad_openai))[0] == 200
    assert post(fake_llm, "anthropic", an(bad_anthropic))[0] == 200
    assert post(fake_llm, "openai", oa())[0] == 200

    assert fake_llm.requests[0].violations == [
        "message 2 (assistant): two consecutive assistant messages"
    ]
    assert fake_llm.requests[2].violations == []
    assert fake_llm.violations() == [
        "request 0: message 2 (assistant): two consecutive assistant messages",
        "request 1: message 1 (user): two consecutive user messages (roles must alternate)",
    ]
    with pytest.raises(AssertionError, match="request 1: message 1"):
        fake_llm.assert_all_valid()


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_request_ending_with_an_assistant_message_is_flagged_and_a_strict_server_rejects_it(
    fake_llm, protocol
):
    seed_report = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "[Subagent 'x'] report"},
    ]
    build = oa if protocol == "openai" else an
    assert post(fake_llm, protocol, build(seed_report))[0] == 200  # lenient: answered, but flagged
    assert any("ends with an assistant message" in v for v in fake_llm.requests[0].violations)
    with FakeLLMServer(strict=True) as strict:
        strict.script(Reply.text("kept for the valid request"))
        status, body = post(strict, protocol, build(seed_report))
        assert status == 400 and "assistant message prefill" in json.dumps(body)
        status, body = post(
            strict, protocol, build(seed_report + [{"role": "user", "content": "well?"}])
        )
        assert status == 200 and "kept for the valid request" in json.dumps(body)


def test_request_level_checks(fake_llm):
    post(fake_llm, "anthropic", {"model": "m", "messages": HI})  # no max_tokens
    post(
        fake_llm,
        "openai",
        oa(
            tool_choice={"type": "function", "function": {"name": "nope"}},
            tools=[{"type": "function", "function": {"name": "yes"}}],
        ),
    )
    post(
        fake_llm,
        "anthropic",
        an(
            tool_choice={"type": "tool", "name": "save_memory"},
            tools=[{"name": "save_memory", "input_schema": {}}],
        ),
    )
    v = fake_llm.violations()
    assert v == [
        "request 0: max_tokens is required by the Anthropic API",
        "request 1: tool_choice names undeclared tool 'nope'",
    ]


def test_records_everything_a_test_needs(fake_llm):
    tools = [{"name": "t", "input_schema": {"type": "object"}}]
    post(
        fake_llm,
        "anthropic",
        an(system=[{"type": "text", "text": "sys"}], tools=tools, tool_choice={"type": "auto"}),
    )
    (r,) = fake_llm.requests
    assert r.system == [{"type": "text", "text": "sys"}] and r.tools == tools
    assert r.tool_choice == {"type": "auto"} and r.stream is False
    assert r.body["max_tokens"] == 50 and r.headers["content-type"] == "application/json"
    assert r.estimated_tokens > 0 and r.t_answered >= r.t_received


def test_unknown_route_and_bad_json_get_errors(fake_llm):
    req = urllib.request.Request(fake_llm.base_url + "/v1/embeddings")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as info:  # a model it does not serve
        urllib.request.urlopen(fake_llm.base_url + "/v1/models/nope", timeout=5)
    assert info.value.code == 404
    listed = json.loads(urllib.request.urlopen(fake_llm.base_url + "/v1/models", timeout=5).read())
    assert [m["id"] for m in listed["data"]] == fake_llm.models
    req = urllib.request.Request(
        fake_llm.openai_base_url + "/chat/completions",
        data=b"{nope",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=5)
    assert info.value.code == 400
    assert fake_llm.requests == []


def test_context_window_exceeded_is_a_400_and_a_violation_in_both_sdks():
    big = [{"role": "user", "content": "word " * 400}]
    with FakeLLMServer(context_window=200) as server:
        server.script(Reply.text("kept for the retry"))

        async def go():
            oc = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x", max_retries=0)
            ac = anthropic.AsyncAnthropic(
                base_url=server.anthropic_base_url, api_key="x", max_retries=0
            )
            with pytest.raises(openai.BadRequestError) as o_err:
                await oc.chat.completions.create(model="m", messages=big)
            with pytest.raises(anthropic.BadRequestError) as a_err:
                await ac.messages.create(model="m", max_tokens=10, messages=big)
            small = await oc.chat.completions.create(model="m", messages=HI)
            return o_err.value, a_err.value, small

        o_err, a_err, small = asyncio.run(go())
        assert o_err.status_code == 400 and o_err.code == "context_length_exceeded"
        assert "maximum context length is 200 tokens" in o_err.message
        assert a_err.status_code == 400 and "prompt is too long" in a_err.message
        assert small.choices[0].message.content == "kept for the retry"
        assert [len(r.violations) for r in server.requests] == [1, 1, 0]
        assert "context window exceeded" in server.violations()[0]


def test_delay_and_wait_for_requests(fake_llm):
    fake_llm.script(Reply.text("slow", delay=0.3))
    result = {}
    t = threading.Thread(target=lambda: result.update(r=post(fake_llm, "openai", oa())))
    t.start()
    assert fake_llm.wait_for_requests(1, timeout=2)
    assert "r" not in result  # still sleeping: a test can press Ctrl-C here
    t.join(5)
    assert result["r"][0] == 200
    (r,) = fake_llm.requests
    assert r.t_answered - r.t_received >= 0.3
    assert not fake_llm.wait_for_requests(2, timeout=0.05)


def test_client_disconnect_during_delay_does_not_break_the_server(fake_llm):
    fake_llm.script(Reply.text("late", delay=0.4), Reply.text("next"))
    with pytest.raises(OSError):  # urllib's timeout, like a user hitting Ctrl-C
        post(fake_llm, "openai", oa(), timeout=0.1)
    time.sleep(0.4)
    assert post(fake_llm, "openai", oa())[1]["choices"][0]["message"]["content"] == "next"


def test_stop_does_not_wait_for_a_long_delay():
    server = FakeLLMServer().start()
    server.script(Reply.text("never", delay=30))
    t = threading.Thread(
        target=lambda: pytest.raises(Exception, post, server, "openai", oa()),  # noqa: B017
        daemon=True,
    )
    t.start()
    assert server.wait_for_requests(1)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 3


def test_concurrent_requests_each_get_one_reply(fake_llm):
    fake_llm.script(*(Reply.text(f"r{i}") for i in range(8)))
    answers = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(
                post(fake_llm, "openai", oa())[1]["choices"][0]["message"]["content"]
            )
        )
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert sorted(answers) == [f"r{i}" for i in range(8)]
    assert sorted(r.index for r in fake_llm.requests) == list(range(8))


def test_reset_clears_queue_and_requests(fake_llm):
    fake_llm.script(Reply.text("a"), Reply.text("b"))
    post(fake_llm, "openai", oa())
    fake_llm.reset()
    assert fake_llm.requests == [] and fake_llm.queued == 0
    post(fake_llm, "openai", oa())
    assert fake_llm.requests[0].index == 0 and fake_llm.requests[0].unscripted


def test_forced_tool_call_ids_allow_provoking_duplicates(fake_llm):
    fake_llm.script(Reply.tool_calls([("a", {}, "call_same"), ("b", {}, "call_same")]))
    body = post(fake_llm, "openai", oa())[1]
    assert [c["id"] for c in body["choices"][0]["message"]["tool_calls"]] == ["call_same"] * 2


def test_reply_validation():
    with pytest.raises(ValueError):
        Reply.text("abc", chunks=["a", "b"])
    with pytest.raises(ValueError):
        Reply.tool_calls([])
    with pytest.raises(TypeError):
        Reply.tool_calls([("x", 3)])
    assert Reply.text("abcdef", chunks=3).text_pieces() == ["ab", "cd", "ef"]
    assert "".join(Reply.text("w " * 1000).text_pieces()) == "w " * 1000
    assert len(Reply.text("w " * 1000).text_pieces()) <= 100


def test_reply_from_script_entries():
    assert Reply.from_dict({"text": "hi", "delay": 1}) == Reply.text("hi", delay=1.0)
    call = Reply.from_dict({"tool_calls": [["read_file", {"path": "a"}]], "text": "t"})
    assert call.calls[0].name == "read_file" and call.content == "t"
    err = Reply.from_dict({"error": 429, "retry_after": 2})
    assert (err.kind, err.status, err.retry_after) == ("error", 429, 2)
    assert Reply.from_dict({"cut_stream": "par"}).kind == "cut"
    with pytest.raises(ValueError):
        Reply.from_dict({"what": 1})


def _as_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `... &` in a non-interactive shell does


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm-in-background"])
def test_standalone_command_serves_a_script_until_ctrl_c_or_sigterm(tmp_path, stop):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "scripted hello"}]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "nanobot.fakellm", "--port", "0", "--script", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_background_job if stop != "ctrl-c" else None,
    )
    try:
        base_url = proc.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        req = urllib.request.Request(
            base_url + "/v1/chat/completions",
            data=json.dumps(oa()).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert json.loads(resp.read())["choices"][0]["message"]["content"] == "scripted hello"
        proc.send_signal(signal.SIGINT if stop == "ctrl-c" else signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert "1 requests, 0 unscripted" in err
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_standalone_script_answers_turns_and_a_consolidation_gets_its_summary():
    # `python -m nanobot.fakellm --script`: a consolidation between two turns used to take the
    # second turn's reply (no save_memory call: a RAW archive, then every answer one turn late)
    from nanobot.fakellm.__main__ import standalone_server

    summarise = oa(
        [{"role": "user", "content": "summarise this"}],
        tools=[{"type": "function", "function": {"name": "save_memory", "parameters": {}}}],
        tool_choice={"type": "function", "function": {"name": "save_memory"}},
    )
    with standalone_server([{"text": "first answer"}, {"text": "second answer"}]) as server:
        _, one = post(server, "openai", oa())
        _, summary = post(server, "openai", summarise)
        _, two = post(server, "openai", oa())
        _, three = post(server, "openai", oa())
    assert one["choices"][0]["message"]["content"] == "first answer"
    [call] = summary["choices"][0]["message"]["tool_calls"]
    assert (
        call["function"]["name"] == "save_memory"
        and "history_entry" in call["function"]["arguments"]
    )
    assert two["choices"][0]["message"]["content"] == "second answer"
    assert three["choices"][0]["message"]["content"] == "ok"  # past the script
    assert [r.unscripted for r in server.requests] == [False, False, False, True]


def test_stop_closes_pooled_connections():
    server = FakeLLMServer().start()

    async def go():
        c = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x", max_retries=0)
        await c.chat.completions.create(model="m", messages=HI)
        server.stop()
        with pytest.raises(openai.APIConnectionError):
            await c.chat.completions.create(model="m", messages=HI)

    asyncio.run(go())
    assert len(server.requests) == 1


def test_a_json_script_can_pace_a_stream_and_cut_it_in_pieces():
    from nanobot.fakellm import Reply

    slow = Reply.from_dict({"text": "one two three", "pace": 0.5, "chunks": 3})
    cut = Reply.from_dict({"cut_stream": "half an", "pace": 0.25, "chunks": ["half ", "an"]})
    assert (
        slow.pace == 0.5
        and len(slow.text_pieces()) == 3
        and "".join(slow.text_pieces()) == "one two three"
    )
    assert (cut.kind, cut.pace, cut.text_pieces()) == ("cut", 0.25, ["half ", "an"])
