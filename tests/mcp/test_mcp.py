"""The MCP client against real FastMCP servers, over stdio and over HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nanobot.config import MCPServerConfig
from nanobot.mcp import connection
from nanobot.mcp.manager import MCPManager
from nanobot.tools.approval import ApprovalRequest, Decision
from nanobot.tools.base import ToolContext
from nanobot.tools.registry import ToolRegistry

import forkserver
from mcp_sdk import sdk_env, sdk_forkserver

SERVER = str(Path(__file__).parent / "notes_server.py")
FORKED = str(
    Path(__file__).parent / "forked_notes.py"
)  # runs SERVER forked from a helper that imported the SDK


def notes_command(fresh: bool = False) -> dict:
    """The stdio notes server as a config's command and args: forked_notes.py, which has it forked,
    or (`fresh`) a new interpreter, for a test of what the server's own process holds."""
    if fresh:
        return {"command": sys.executable, "args": [SERVER, "stdio"]}
    return {"command": sys.executable, "args": [FORKED, sdk_forkserver().path, "stdio"]}


class Recorder:
    """An approver that answers as told and remembers what it was asked."""

    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.asked: list[ApprovalRequest] = []

    async def approve(self, request: ApprovalRequest) -> Decision:
        self.asked.append(request)
        return Decision(self.allow, "" if self.allow else "the user said no")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def call_log(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "calls.log"
    monkeypatch.setenv("NOTES_CALL_LOG", str(path))  # inherited by HTTP servers we start
    return path


def calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def http_server(call_log):
    """FastMCP over HTTP on loopback, in its own process; yields a function (transport) -> url."""
    procs: list[subprocess.Popen] = []

    def start(transport: str = "streamable-http") -> str:
        port = free_port()
        procs.append(
            subprocess.Popen(
                [sys.executable, FORKED, sdk_forkserver().path, transport, str(port)],
                env=sdk_env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        return f"http://127.0.0.1:{port}" + ("/sse" if transport == "sse" else "/mcp")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def stdio(call_log: Path, fresh: bool = False, **extra) -> MCPServerConfig:
    return MCPServerConfig(**notes_command(fresh), env={"NOTES_CALL_LOG": str(call_log)}, **extra)


@pytest.fixture(params=["stdio", "streamable-http"])
def notes_server(request, call_log):
    """The notes server over stdio or over HTTP on loopback: a function (**settings) -> MCPServerConfig."""
    if request.param == "stdio":
        return lambda **extra: stdio(call_log, **extra)
    url = request.getfixturevalue("http_server")("streamable-http")
    return lambda **extra: MCPServerConfig(url=url, **extra)


def run(
    servers: dict[str, MCPServerConfig],
    body,
    *,
    approver=None,
    tmp_path: Path,
    startup_timeouts=None,
):
    """Start the servers like the chat does, wait for them, run `body(registry, manager, notices)`."""

    async def go():
        ctx = ToolContext(workspace=tmp_path, **({"approver": approver} if approver else {}))
        registry, notices = ToolRegistry(), []
        manager = MCPManager(servers, tmp_path, ctx, notices.append)
        for conn in manager.connections:
            conn.startup_timeout = (startup_timeouts or {}).get(conn.name, conn.startup_timeout)
        manager.start([registry])
        try:
            await manager.wait_ready()
            return await body(registry, manager, notices)
        finally:
            await manager.aclose()

    return asyncio.run(go())


def test_stdio_server_lists_its_tools_and_a_trusted_call_runs(tmp_path, call_log):
    async def body(registry, manager, notices):
        assert notices == []
        assert {"mcp_notes_add", "mcp_notes_lookup", "mcp_notes_crash"} <= set(registry.names())
        schema = registry.get("mcp_notes_add").schema()["function"]
        assert (
            schema["parameters"]["required"] == ["a", "b"]
            and schema["description"] == "Add two integers."
        )
        return await registry.execute("mcp_notes_add", {"a": 2, "b": 40})

    result = run({"notes": stdio(call_log, trusted=True)}, body, tmp_path=tmp_path)
    assert not result.is_error and "42" in result.content
    assert 'source="MCP server notes, tool add"' in result.content  # fenced: a third party wrote it
    assert calls(call_log) == ["add 2 40"]


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
def test_http_servers_list_and_call(tmp_path, call_log, http_server, transport):
    url = http_server(transport)
    cfg = MCPServerConfig(
        url=url, headers={"X-Test": "yes"}, trusted=True
    )  # type detected from the URL

    async def body(registry, manager, notices):
        assert manager.reports()[0].transport == ("sse" if transport == "sse" else "streamableHttp")
        return (
            await registry.execute("mcp_web_add", {"a": 1, "b": 1}),
            await registry.execute("mcp_web_header", {"name": "x-test"}),
        )

    result, header = run({"web": cfg}, body, tmp_path=tmp_path)
    assert "2" in result.content and not result.is_error
    assert calls(call_log) == ["add 1 1"]
    assert "yes" in header.content  # the configured header reached the server


def test_schema_violations_never_reach_the_server(tmp_path, call_log, notes_server):
    async def body(registry, manager, notices):
        bad_pattern = await registry.execute("mcp_notes_lookup", {"code": "lhr"})
        bad_ref = await registry.execute(
            "mcp_notes_distance", {"p": {"x": 1}, "q": {"x": 0, "y": 0}}
        )
        good = await registry.execute("mcp_notes_lookup", {"code": "LHR", "limit": None})
        return bad_pattern, bad_ref, good

    bad_pattern, bad_ref, good = run({"notes": notes_server(trusted=True)}, body, tmp_path=tmp_path)
    assert (
        bad_pattern.is_error
        and 'code: "lhr" does not match the pattern ^[A-Z]{3}$' in bad_pattern.content
    )
    assert bad_ref.is_error and "p: missing required property 'y'" in bad_ref.content
    assert not good.is_error and "LHR: found" in good.content
    assert calls(call_log) == ["lookup LHR"]


def test_a_call_that_takes_too_long_times_out_and_the_server_stays_usable(
    tmp_path, call_log, notes_server
):
    async def body(registry, manager, notices):
        started = time.monotonic()
        slow = await registry.execute("mcp_notes_slow", {"seconds": 10})
        elapsed = time.monotonic() - started
        after = await registry.execute("mcp_notes_add", {"a": 1, "b": 2})
        return slow, elapsed, after

    slow, elapsed, after = run(
        {"notes": notes_server(trusted=True, tool_timeout=1)}, body, tmp_path=tmp_path
    )
    assert slow.is_error and "within 1s (tools.mcpServers.notes.toolTimeout)" in slow.content
    assert elapsed < 8
    assert not after.is_error and "3" in after.content


def test_a_server_that_crashes_mid_call_is_reported_and_started_again_a_few_times(
    tmp_path, call_log, monkeypatch
):
    monkeypatch.setattr(connection, "MAX_RESTARTS", 1)

    async def body(registry, manager, notices):
        crashed = await registry.execute("mcp_notes_crash", {})
        state_after_crash = manager.reports()[0]
        later = await registry.execute("mcp_notes_add", {"a": 1, "b": 2})  # a fresh server process
        crashed_again = await registry.execute("mcp_notes_crash", {})
        refused = await registry.execute("mcp_notes_add", {"a": 3, "b": 4})
        return crashed, state_after_crash, later, crashed_again, refused

    crashed, report, later, crashed_again, refused = run(
        {"notes": stdio(call_log, trusted=True)}, body, tmp_path=tmp_path
    )
    assert crashed.is_error and "MCP server notes stopped during the call" in crashed.content
    assert "started again for the next call" in crashed.content
    assert report.state == "failed" and "stopped during a call" in report.error
    assert not later.is_error and "3" in later.content
    assert "its tools stay off until nanobot restarts" in crashed_again.content
    assert refused.is_error and "not running" in refused.content
    assert calls(call_log) == ["crash ", "add 1 2", "crash "]  # the last add was never sent


def test_a_stdio_server_never_sees_our_api_keys(tmp_path, call_log, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-never-leaves-0001")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-canary-0002")

    async def body(registry, manager, notices):
        return await registry.execute("mcp_notes_env_names", {})

    # a fresh interpreter: a forked server would carry the fork helper's memory
    result = run({"notes": stdio(call_log, fresh=True, trusted=True)}, body, tmp_path=tmp_path)
    assert (
        "NOTES_CALL_LOG" in result.content and "PATH" in result.content
    )  # its own env, and a usable PATH
    assert "OPENAI_API_KEY" not in result.content and "ANTHROPIC_API_KEY" not in result.content


def test_an_http_server_that_dies_mid_call_is_reported_and_its_tools_then_say_so(
    tmp_path, call_log, http_server
):
    # over HTTP a dead server is silence: the call waits out its toolTimeout (2 s, so that even under
    # load the server has died by then, and does not answer the ping that follows)
    cfg = MCPServerConfig(url=http_server("streamable-http"), trusted=True, tool_timeout=2)

    async def body(registry, manager, notices):
        (conn,) = manager.connections
        conn.startup_timeout = 0.5  # it started; the restart then finds nobody listening
        crashed = await registry.execute("mcp_notes_crash", {})
        later = await registry.execute("mcp_notes_add", {"a": 1, "b": 2})
        return crashed, later

    crashed, later = run({"notes": cfg}, body, tmp_path=tmp_path)
    assert (
        crashed.is_error
        and "and it no longer answers at all; it is started again" in crashed.content
    )
    assert (
        later.is_error and "MCP server notes is not running" in later.content
    )  # nobody listens any more
    assert calls(call_log) == ["crash "]


def test_a_tool_error_is_an_error_result(tmp_path, call_log):
    async def body(registry, manager, notices):
        return await registry.execute("mcp_notes_fail", {})

    result = run({"notes": stdio(call_log, trusted=True)}, body, tmp_path=tmp_path)
    assert result.is_error and "the notebook is locked" in result.content


def test_servers_that_never_start_are_reported_once_and_the_rest_start(
    tmp_path, call_log, isolated_home
):
    servers = {
        "missing": MCPServerConfig(command="/nonexistent/mcp-server"),
        "exits": MCPServerConfig(
            command=sys.executable,
            args=["-c", "import sys; sys.stderr.write('no licence\\n'); sys.exit(2)"],
        ),
        "hangs": MCPServerConfig(
            command=sys.executable, args=["-c", "import time; time.sleep(60)"]
        ),
        "refused": MCPServerConfig(url=f"http://127.0.0.1:{free_port()}/mcp"),
        "notes": stdio(call_log, trusted=True),
    }

    async def body(registry, manager, notices):
        result = await registry.execute("mcp_notes_add", {"a": 5, "b": 5})
        return notices, {r.name: r for r in manager.reports()}, result

    notices, reports, result = run(
        servers, body, tmp_path=tmp_path, startup_timeouts={"hangs": 0.5}
    )
    assert "10" in result.content
    assert reports["notes"].state == "ready"
    for name in ("missing", "exits", "hangs", "refused"):
        assert reports[name].state == "failed", name
        assert sum(f"MCP server {name} failed to start" in n for n in notices) == 1
    assert "command not found" in reports["missing"].error
    assert "no licence" in reports["exits"].error  # the server's own last words
    log = isolated_home / "logs" / "mcp-exits.log"
    assert "no licence" in log.read_text() and log.stat().st_mode & 0o777 == 0o600
    assert "did not start within 0.5s" in reports["hangs"].error
    assert len(notices) == 4


def test_enabled_tools_accepts_raw_and_wrapped_names(tmp_path, call_log):
    async def body(registry, manager, notices):
        return registry.names(), manager.reports()[0]

    names, report = run(
        {"notes": stdio(call_log, enabled_tools=["add", "mcp_notes_lookup", "nope"])},
        body,
        tmp_path=tmp_path,
    )
    assert names == ["mcp_notes_add", "mcp_notes_lookup"]
    assert report.unknown_enabled == ["nope"] and "crash" in report.not_enabled


def test_untrusted_servers_ask_first_and_a_refusal_sends_nothing(tmp_path, call_log):
    user = Recorder(allow=False)

    async def body(registry, manager, notices):
        refused = await registry.execute("mcp_notes_add", {"a": 1, "b": 2})
        seen_after_refusal = calls(call_log)
        user.allow = True  # asked again, the user says yes
        allowed = await registry.execute("mcp_notes_add", {"a": 1, "b": 2})
        return refused, seen_after_refusal, allowed

    refused, seen_after_refusal, allowed = run(
        {"notes": stdio(call_log)}, body, approver=user, tmp_path=tmp_path
    )
    assert refused.is_error and "the user said no" in refused.content
    assert seen_after_refusal == []  # the server never saw the refused call
    first, second = user.asked  # each call asked first
    assert first.kind == "mcp" and first.always_key == "mcp:notes:add"
    assert "tools.mcpServers.notes" in first.allow_hint
    assert second.always_key == "mcp:notes:add"
    assert "3" in allowed.content and calls(call_log) == ["add 1 2"]


def test_the_default_approver_refuses_an_untrusted_server_with_the_way_to_allow_it(
    tmp_path, call_log
):
    async def body(registry, manager, notices):
        return await registry.execute("mcp_notes_add", {"a": 1, "b": 2})

    result = run({"notes": stdio(call_log)}, body, tmp_path=tmp_path)
    assert result.is_error and '"trusted": true in tools.mcpServers.notes' in result.content
    assert calls(call_log) == []


def test_the_agent_and_its_subagents_get_mcp_tools_from_a_nanobot_config(
    configure, fake_llm, call_log, tmp_path
):
    from nanobot.app import open_assistant
    from nanobot.config import load_config
    from nanobot.fakellm import Reply

    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {
        "mcpServers": {
            "notes": {
                **notes_command(),
                "env": {"NOTES_CALL_LOG": str(call_log)},
                "toolTimeout": 20,
                "trusted": True,
            }
        }
    }
    path.write_text(json.dumps(data))
    fake_llm.script(
        Reply.tool_calls([("mcp_notes_add", {"a": 20, "b": 22})]), Reply.text("It is 42.")
    )

    async def go():
        assistant = open_assistant(load_config(), "cli:direct", stream=False)
        try:
            await assistant.mcp_ready()
            outcome = await assistant.conversation.send("what is 20 + 22?")
            return outcome, assistant.subagents.tools.names()  # subagents: see the next test
        finally:
            await assistant.aclose()

    outcome, sub_tools = asyncio.run(go())
    assert outcome.content == "It is 42."
    assert "mcp_notes_add" in [t["function"]["name"] for t in fake_llm.requests[0].tools]
    tool_msg = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"][0]
    assert "42" in tool_msg["content"]
    assert "mcp_notes_add" in sub_tools
    assert calls(call_log) == ["add 20 22"]
    fake_llm.assert_all_valid()


def test_mcp_list_shows_servers_state_and_tools(configure, call_log, nanobot_run, monkeypatch):

    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {
        "mcpServers": {
            "notes": {**notes_command(), "enabledTools": ["add", "lookup"]},
            "broken": {"command": "/nonexistent/mcp-server"},
        }
    }
    path.write_text(json.dumps(data))
    out = nanobot_run("mcp", "list", env={"COLUMNS": "200"})
    assert out.returncode == 1, out.stderr  # one server did not start
    assert "1 of 2 MCP server(s) did not start" in out.stderr and "broken (failed" in out.stderr
    assert "notes" in out.stdout and "ready" in out.stdout
    assert "mcp_notes_add" in out.stdout and "mcp_notes_lookup" in out.stdout
    assert "not enabled: distance" in out.stdout
    assert "broken" in out.stdout and "failed: command not found" in out.stdout


def test_the_chat_prompt_comes_first_then_one_line_for_a_failed_server_and_the_tools(
    configure, fake_llm, call_log
):
    import os

    import pexpect
    from nanobot.fakellm import Reply

    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {
        "mcpServers": {
            "notes": {**notes_command(), "trusted": True, "env": {"NOTES_CALL_LOG": str(call_log)}},
            "broken": {"command": "/nonexistent/mcp-server"},
        }
    }
    path.write_text(json.dumps(data))
    fake_llm.script(Reply.tool_calls([("mcp_notes_add", {"a": 4, "b": 5})]), Reply.text("Nine."))
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "PYTHONUNBUFFERED": "1"}
    child = forkserver.shared().spawn(
        [sys.executable, "-m", "nanobot", "agent"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 160),
    )
    try:
        child.expect_exact("you ›")
        child.expect_exact(
            "MCP server broken failed to start: command not found: /nonexistent/mcp-server"
        )
        child.sendline("4 + 5?")
        child.expect_exact("Nine.")
        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.terminate(force=True)
    assert "mcp_notes_add" in [t["function"]["name"] for t in fake_llm.requests[0].tools]
    assert calls(call_log) == ["add 4 5"]
    fake_llm.assert_all_valid()


def test_a_subagent_calls_an_mcp_tool(configure, fake_llm, call_log):
    from nanobot.app import open_assistant
    from nanobot.config import load_config
    from nanobot.fakellm import Reply

    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {
        "mcpServers": {
            "notes": {**notes_command(), "trusted": True, "env": {"NOTES_CALL_LOG": str(call_log)}}
        }
    }
    path.write_text(json.dumps(data))
    state = {"main": 0, "sub": 0}

    def responder(request):
        if "You are a subagent" in json.dumps(request.body):
            state["sub"] += 1
            if state["sub"] == 1:
                return Reply.tool_calls([("mcp_notes_add", {"a": 7, "b": 8})])
            return Reply.text("Report: 7 + 8 = 15 (from the notes server).")
        state["main"] += 1
        if state["main"] == 1:
            return Reply.tool_calls(
                [("spawn", {"task": "add 7 and 8 with the notes server", "label": "adder"})]
            )
        return Reply.text("Done.")

    fake_llm.responder = responder

    async def go():
        assistant = open_assistant(load_config(), "cli:direct", stream=False)
        try:
            await assistant.mcp_ready()
            await assistant.conversation.send("please delegate the sum")
            assert await assistant.subagents.wait(30)
        finally:
            await assistant.aclose()

    asyncio.run(go())
    assert calls(call_log) == ["add 7 8"]
    sub = [r for r in fake_llm.requests if "You are a subagent" in json.dumps(r.body)]
    assert "mcp_notes_add" in [t["function"]["name"] for t in sub[0].tools]
    assert "15" in json.dumps([m for m in sub[1].messages if m["role"] == "tool"])
    fake_llm.assert_all_valid()


def test_mcp_tokens_count_as_secrets_kept_out_of_exec(tmp_path, monkeypatch):
    from nanobot.app import tool_context
    from nanobot.config import load_config

    monkeypatch.setenv("MY_GITHUB", "ghp_canary_0001")
    monkeypatch.setenv("MY_BEARER", "tok_canary_0002")
    monkeypatch.setenv("HARMLESS_DIR", "/srv/notes")
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "tools": {
                    "mcpServers": {
                        "gh": {
                            "command": "gh-mcp",
                            "env": {"GITHUB_TOKEN": "ghp_canary_0001", "NOTES_DIR": "/srv/notes"},
                        },
                        "web": {
                            "url": "https://mcp.example.invalid/mcp",
                            "headers": {"Authorization": "Bearer tok_canary_0002"},
                        },
                    }
                }
            }
        )
    )
    hidden = tool_context(load_config(path), tmp_path).secret_env_names
    assert {"MY_GITHUB", "MY_BEARER"} <= hidden and "HARMLESS_DIR" not in hidden


def test_in_the_assistant_an_mcp_call_asks_the_session_approver_and_is_recorded(
    configure, fake_llm, call_log
):
    from nanobot.app import open_assistant
    from nanobot.config import load_config
    from nanobot.fakellm import Reply

    path = configure()
    data = json.loads(path.read_text())
    data["tools"] = {
        "mcpServers": {"notes": {**notes_command(), "env": {"NOTES_CALL_LOG": str(call_log)}}}
    }
    path.write_text(json.dumps(data))
    fake_llm.script(
        Reply.tool_calls([("mcp_notes_add", {"a": 1, "b": 1})]), Reply.text("Not allowed, sorry.")
    )
    no = Recorder(allow=False)

    async def go():
        assistant = open_assistant(load_config(), "cli:direct", stream=False, ask=no)
        try:
            await assistant.mcp_ready()
            await assistant.conversation.send("1 + 1 with the notes server?")
        finally:
            await assistant.aclose()

    asyncio.run(go())
    assert [r.kind for r in no.asked] == ["mcp"]
    assert calls(call_log) == []  # refused: the server never saw it
    tool_msg = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"][0]
    assert "the user said no" in tool_msg["content"]
    from nanobot.session.store import SessionStore

    (decision,) = SessionStore().load("cli:direct").decisions
    assert (
        decision["kind"] == "mcp"
        and decision["allowed"] is False
        and "mcp_notes" not in decision["summary"]
    )
    assert "MCP server notes wants to run its tool add" in decision["summary"]


HALF_IMPORTED_HTTPX = r'''
import asyncio, importlib.machinery, sys, threading, time
from pathlib import Path

started = threading.Event()

class SlowHttpx:
    """Holds httpx half-imported for a second, in whichever thread imports it."""
    def find_spec(self, name, path=None, target=None):
        if name != "httpx":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def slow(module):
            started.set()
            time.sleep(1.0)
            run(module)
        spec.loader.exec_module = slow
        return spec

sys.meta_path.insert(0, SlowHttpx())
from nanobot.config import MCPServerConfig
from nanobot.fakellm import FakeLLMServer, Reply
from nanobot.mcp.connection import ServerConnection
from nanobot.providers.openai_compat import OpenAICompatProvider

async def main():
    server = FakeLLMServer().start()
    server.script(Reply.text("answered"))
    provider = OpenAICompatProvider("m", api_key="k", api_base=server.openai_base_url)
    work = Path(sys.argv[1])
    conn = ServerConnection("late", MCPServerConfig(command=sys.executable, args=["-c", "pass"]), work, work / "late.log")
    conn.start()  # loads the MCP SDK (and with it httpx) while the first request is under way
    assert await asyncio.to_thread(started.wait, 20)
    reply = await provider.chat([{"role": "user", "content": "hi"}])
    print("REPLY", reply.content)
    conn._stop.set()
    await provider.aclose()
    server.stop()

asyncio.run(main())
'''


def test_a_request_while_an_mcp_server_is_starting_gets_its_answer(tmp_path):
    # the openai SDK looks up a loaded httpx on every response; one half-imported by the MCP SDK's
    # background load made the user's first answer fail with AttributeError (seen in CI)
    script = tmp_path / "race.py"
    script.write_text(HALF_IMPORTED_HTTPX)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert "REPLY answered" in done.stdout, done.stderr[-2000:]
