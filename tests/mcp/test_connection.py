"""MCP servers reached by URL, as `nanobot mcp list` and `doctor` report them."""

from __future__ import annotations

import json
import socket


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_url_server_that_does_not_answer_is_named_by_its_url_without_secrets(
    nanobot_run, configure
):
    config = configure()
    port = _closed_port()
    data = json.loads(config.read_text())
    data["tools"] = {
        "mcpServers": {
            "search": {"url": f"http://me:pw-secret-1@127.0.0.1:{port}/mcp?token=tk-secret-2"}
        }
    }
    config.write_text(json.dumps(data))
    listed = nanobot_run("mcp", "list", env={"COLUMNS": "300"})
    doctor = nanobot_run("doctor", "--offline")
    for said in (listed.stdout, doctor.stdout):
        assert f"(http://127.0.0.1:{port}/mcp)" in said
        assert "pw-secret-1" not in said and "tk-secret-2" not in said
