"""Run the fake LLM standalone: `python -m nanobot.fakellm --port 0 [--script replies.json]`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections import deque

from nanobot.fakellm import FakeLLMServer, Reply


def standalone_server(
    script: list[dict], *, context_window: int | None = None, port: int = 0
) -> FakeLLMServer:
    """The server `main` runs: the script's replies answer the turns, in order, and consolidation
    requests get a save_memory call built from what they carry, as from a real model. (A queued
    script would hand a consolidation request the next turn's reply: a RAW archive, and every later
    answer one turn late.)"""
    server = FakeLLMServer(context_window=context_window, port=port)
    server.summarise = True
    replies = deque(Reply.from_dict(d) for d in script)
    server.responder = lambda request: replies.popleft() if replies else None
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nanobot.fakellm", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    parser.add_argument(
        "--script",
        help='JSON list of replies, e.g. [{"text": "hi"}, '
        '{"tool_calls": [["read_file", {"path": "a"}]]}, {"error": 429}]',
    )
    parser.add_argument(
        "--context-window",
        type=int,
        default=None,
        help="reject prompts estimated larger than this many tokens",
    )
    args = parser.parse_args(argv)

    script: list[dict] = []
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            script = json.load(f)
    server = standalone_server(script, context_window=args.context_window, port=args.port)
    # SIGTERM stops it like Ctrl-C: a background job (`... &` in a script) has SIGINT ignored.
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    server.start()
    try:  # before the URL is printed: a Ctrl-C right after it still stops cleanly
        # The first line is the base URL alone, so a script can read it with `head -1`.
        print(server.base_url, flush=True)
        print(
            f"  openai:    {server.openai_base_url}\n  anthropic: {server.anthropic_base_url}\n"
            "  Ctrl-C or SIGTERM to stop",
            file=sys.stderr,
            flush=True,
        )
        # Wake now and then: the kernel may hand Ctrl-C's SIGINT to a server thread, and a wait
        # without a timeout would then never return to let the main thread raise KeyboardInterrupt.
        while not stopped.wait(0.2):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        reqs = server.requests
        print(
            f"{len(reqs)} requests, {sum(r.unscripted for r in reqs)} unscripted", file=sys.stderr
        )
        for line in server.violations():
            print(f"  violation: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
