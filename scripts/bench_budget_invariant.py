"""The budget's invariant on the 150-turn workload: requests asking for prompt + max_tokens above the window.

The workload of `scripts/bench.py --only tokens` (8,192-token window, 40-70% of turns reading a file),
against a fake server that counts prompts its own way and rejects prompt + max_tokens over the window,
as a strict API does. `--counter chars4` is the fake's default count (JSON characters / 4): not
proportional to nanobot's cl100k count, as another tokenizer or a gateway's own estimate is not, so
each request lands at its own ratio. `--compact` makes the model write tool arguments compact, as
OpenAI-style models do.

    .venv/bin/python scripts/bench_budget_invariant.py --seeds 5-10 --protocol openai --counter chars4 --compact

Prints, per run: requests, the largest prompt + max_tokens, the requests over the window (index,
prompt, max_tokens, by how much) and how often the last check lowered max_tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nanobot.fakellm import Reply  # noqa: E402
from nanobot.fakellm.rules import count_prompt_tokens, estimate_tokens  # noqa: E402
from nanobot.tokens import load_offline_encoding  # noqa: E402

from bench import _asked, _scripted_conversation  # noqa: E402
from bench_workload import TOOL_MARK, BenchHome, ScriptedModel, _text, is_consolidation, user_turns  # noqa: E402


class CompactModel(ScriptedModel):
    """The bench's model, writing tool arguments without spaces (`{"path":"a"}`)."""

    def __call__(self, rec: Any) -> Reply:
        last = rec.messages[-1] if rec.messages else {}
        body = _text(last.get("content")) if last.get("role") == "user" else ""
        if not is_consolidation(rec) and TOOL_MARK in body:
            m = re.search(r"read (\S+)", body)
            args = {"path": m.group(1) if m else "notes.md", "offset": 1, "limit": 400}
            return Reply.tool_calls([("read_file", json.dumps(args, separators=(",", ":")))])
        return super().__call__(rec)


def run(seed: int, args: argparse.Namespace) -> str:
    window = args.window
    with BenchHome(context_window=window, server_window=window) as home:
        if args.compact:
            home.server.responder = home.model = CompactModel(seed=seed)
        if args.protocol == "anthropic":
            cfg = json.loads((home.home / "config.json").read_text())
            cfg["agents"]["defaults"].update(model="anthropic/claude-test", provider="anthropic")
            cfg["providers"] = {
                "anthropic": {
                    "apiKey": "sk-ant-bench-123456",
                    "apiBase": home.server.anthropic_base_url,
                }
            }
            (home.home / "config.json").write_text(json.dumps(cfg))
        home.activate()
        if args.counter == "cl100k":
            encode = load_offline_encoding()[0]
            home.server.prompt_counter = lambda prompt: count_prompt_tokens(prompt, encode)
        else:
            home.server.prompt_counter = estimate_tokens
        home.server.count_max_tokens = True
        _, errors = asyncio.run(
            _scripted_conversation(
                home, user_turns(args.turns, seed=seed, tool_share=args.tool_share)
            )
        )
        recs = home.server.requests
    over = [
        (r.index, r.estimated_tokens, _asked(r), r.estimated_tokens + _asked(r) - window)
        for r in recs
        if r.estimated_tokens + _asked(r) > window
    ]
    chat = [_asked(r) for r in recs if not is_consolidation(r)]
    full = max(chat, default=0)
    return (
        f"seed {seed}: {len(recs)} requests ({sum(is_consolidation(r) for r in recs)} consolidation), "
        f"largest prompt + max_tokens {max(r.estimated_tokens + _asked(r) for r in recs):,}, "
        f"over the window: {len(over)} {over}; chat max_tokens below {full:,}: {sum(m < full for m in chat)} "
        f"(least {min(chat, default=0):,}); turns with an error: {len(errors)}"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="5-7", help="a seed or a range, e.g. 5-10")
    p.add_argument("--turns", type=int, default=150)
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--protocol", choices=("openai", "anthropic"), default="openai")
    p.add_argument("--counter", choices=("cl100k", "chars4"), default="chars4")
    p.add_argument("--compact", action="store_true", help="the model writes tool arguments compact")
    p.add_argument("--tool-share", type=float, default=0.7)
    args = p.parse_args()
    lo, _, hi = args.seeds.partition("-")
    print(
        f"{args.turns} turns, window {args.window:,}, {args.protocol}, provider count {args.counter}"
        f"{', compact arguments' if args.compact else ''}"
    )
    for seed in range(int(lo), int(hi or lo) + 1):
        print(run(seed, args), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
