"""Per-request client overhead of the provider adapters, in-process, against the fake server.

    python scripts/bench_request.py                  # both protocols, 40 and 1,000 messages
    python scripts/bench_request.py --messages 40 --runs 50

"Overhead" is a call's wall time, from the moment the adapter is called until the whole
streamed answer is parsed, minus the time the fake server spent answering (arrival to last
byte). It is what the client side costs: building the body, the SDK, HTTP and SSE parsing.
These print figures; they are not tests.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nanobot.fakellm.replies import Reply  # noqa: E402

from bench_workload import TimedFakeLLMServer  # noqa: E402


def history(n: int) -> list[dict]:
    """n messages shaped like a working session: user turns, tool calls, results, answers."""
    msgs: list[dict] = [{"role": "system", "content": "You are nanobot. " * 200}]
    i = 0
    while len(msgs) < n:
        i += 1
        msgs.append(
            {
                "role": "user",
                "content": f"Please look at notes/{i}.md and tell me what changed. " * 3,
            }
        )
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": f'{{"path": "notes/{i}.md"}}',
                        },
                    }
                ],
            }
        )
        msgs.append(
            {"role": "tool", "tool_call_id": f"call_{i}", "content": ("line of the file\n" * 40)}
        )
        msgs.append(
            {"role": "assistant", "content": "It changed in three places: " + "detail. " * 30}
        )
    msgs = msgs[:n]
    while msgs[-1]["role"] != "assistant" or msgs[-1].get("tool_calls"):
        msgs.pop()
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{k}",
            "description": "does a thing " * 10,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
    for k in range(10)
]


async def measure(protocol: str, n: int, runs: int) -> tuple[float, float]:
    from nanobot.providers.anthropic import AnthropicProvider
    from nanobot.providers.openai_compat import OpenAICompatProvider

    server = TimedFakeLLMServer().start()
    try:
        if protocol == "openai":
            provider = OpenAICompatProvider(
                "gpt-bench", name="custom", api_key="x", api_base=server.openai_base_url
            )
        else:
            provider = AnthropicProvider(
                "claude-bench", api_key="x", api_base=server.anthropic_base_url
            )
        msgs = history(n)
        samples = []
        for i in range(runs + 3):
            server.script(Reply.text("Here is a short answer with a few words in it. " * 4))
            before = len(server.requests)
            t0 = time.perf_counter()
            await provider.chat(msgs, tools=TOOLS, max_tokens=1024, on_delta=lambda _d: None)
            wall = time.perf_counter() - t0
            rec = server.requests[before]
            spent = (rec.t_answered or rec.t_received) - getattr(rec, "t_arrived", rec.t_received)
            if i >= 3:  # warm-up: imports, connection, caches
                samples.append(wall - spent)
        await provider.aclose()
        return statistics.median(samples), min(samples)
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--messages", type=int, action="append", help="history sizes (default 40 and 1000)"
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--protocol", choices=("openai", "anthropic"), action="append")
    args = parser.parse_args()
    print(f"{'protocol':<10} {'messages':>8} {'median':>10} {'min':>10}")
    for protocol in args.protocol or ["openai", "anthropic"]:
        for n in args.messages or [40, 1000]:
            med, low = asyncio.run(measure(protocol, n, args.runs))
            print(f"{protocol:<10} {n:>8} {med * 1e3:>8.1f} ms {low * 1e3:>8.1f} ms", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
