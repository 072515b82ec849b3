"""`nanobot mcp list`: its exit code and what it says when servers do not start."""

from __future__ import annotations

import json


def _servers(config, servers: dict) -> None:
    data = json.loads(config.read_text())
    data["tools"] = {"mcpServers": servers}
    config.write_text(json.dumps(data))


def test_mcp_list_exits_1_and_names_each_failure_on_stderr_when_servers_fail(
    nanobot_run, configure, isolated_home
):
    _servers(
        configure(),
        {
            "files": {"command": "/nonexistent/mcp-files"},
            "web": {"command": "/nonexistent/mcp-web"},
        },
    )
    result = nanobot_run("mcp", "list", env={"COLUMNS": "200"})
    assert result.returncode == 1
    assert "files" in result.stdout and "web" in result.stdout  # the table still shows both
    err = result.stderr
    assert "2 of 2 MCP server(s) did not start" in err
    assert "files (failed: command not found: /nonexistent/mcp-files)" in err
    assert "web (failed: command not found: /nonexistent/mcp-web)" in err
    assert f"hint: each server's output is logged in {isolated_home / 'logs'}" in err
    assert "tools.mcpServers" in err


def test_mcp_list_with_no_server_configured_exits_0(nanobot_run, configure):
    configure()
    result = nanobot_run("mcp", "list")
    assert result.returncode == 0, result.stderr
    assert "No MCP servers configured" in result.stdout and result.stderr == ""


def test_a_server_that_exits_at_once_is_said_to_have_closed_the_connection(nanobot_run, configure):
    _servers(configure(), {"quits": {"command": "false"}})  # exits 1 at once, says nothing
    result = nanobot_run("mcp", "list", env={"COLUMNS": "200"})
    assert result.returncode == 1
    assert "quits (failed: the server closed the connection (did it exit?))" in result.stderr
    assert "BrokenResourceError" not in result.stdout + result.stderr
