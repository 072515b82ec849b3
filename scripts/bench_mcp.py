"""What MCP costs: the SDK's import time, and the chat's time to its prompt with servers configured.

    python scripts/bench_mcp.py [--runs 7]

The chat is the real `nanobot agent` REPL in a pseudo-terminal (pexpect); the clock runs from
spawn until "you ›" is on the screen, and, with servers configured, until the first request
the fake server receives lists the MCP tools (a message typed at once waits for the servers).
The MCP server is the tests' FastMCP server over stdio. These print figures; they are not tests.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_workload import BenchHome, nanobot_argv  # noqa: E402

SERVER = Path(__file__).resolve().parent.parent / "tests" / "mcp" / "notes_server.py"


def import_ms(statement: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True
        )
        totals = [int(m.group(1)) for m in re.finditer(r"\|\s+(\d+) \|", out.stderr)]
        samples.append(max(totals) / 1000)
    return statistics.median(samples)


def time_to_prompt(servers: int, runs: int) -> tuple[float, float | None]:
    import pexpect

    prompt, tools_seen = [], []
    with BenchHome() as home:
        config = json.loads((home.home / "config.json").read_text())
        config["tools"] = {
            "mcpServers": {
                f"s{i}": {
                    "command": sys.executable,
                    "args": [str(SERVER), "stdio"],
                    "trusted": True,
                }
                for i in range(servers)
            }
        }
        (home.home / "config.json").write_text(json.dumps(config))
        for _ in range(runs):
            home.server.reset()
            t = time.monotonic()
            child = pexpect.spawn(
                nanobot_argv()[0],
                nanobot_argv()[1:] + ["agent"],
                env=home.env,
                encoding="utf-8",
                timeout=60,
                dimensions=(40, 160),
            )
            child.expect("you ›")
            prompt.append(time.monotonic() - t)
            child.sendline("hi")
            deadline = time.monotonic() + 60
            while not home.server.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            recs = home.server.requests
            names = [tool["function"]["name"] for tool in (recs[0].tools or [])] if recs else []
            if servers and any(n.startswith("mcp_") for n in names):
                tools_seen.append(recs[0].t_received - t)
            time.sleep(1.0)  # let the answer render, then leave with Ctrl-D
            child.sendcontrol("d")
            try:
                child.expect(pexpect.EOF, timeout=30)
            except pexpect.TIMEOUT:
                child.terminate(force=True)
    return statistics.median(prompt), statistics.median(tools_seen) if tools_seen else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    load = (
        Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    )
    print(f"load average {' '.join(load)}; {args.runs} runs each, medians")
    print(
        f"import mcp + its three client transports: {import_ms('import mcp, mcp.client.stdio, mcp.client.sse, mcp.client.streamable_http', args.runs):.0f} ms"
    )
    print(f"import jsonschema: {import_ms('import jsonschema', args.runs):.0f} ms")
    for servers in (0, 1, 3):
        prompt, tools = time_to_prompt(servers, args.runs)
        extra = (
            f"; first request with the MCP tools {tools:.2f} s after spawn"
            if tools is not None
            else ""
        )
        print(f"chat with {servers} MCP server(s): prompt after {prompt:.2f} s{extra}")


if __name__ == "__main__":
    main()
