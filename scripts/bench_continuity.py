"""Continuity through compaction: what a long task keeps, before and after the working-state checkpoint.

A session plants a goal, three identifiers, a decision and a next step in its first four turns, then
long answers push it through compaction after compaction. Each turn is a real `nanobot agent -m`
process against a local fake LLM server that answers consolidation requests as a model would
(nanobot/fakellm/summariser.py: it fills `session_checkpoint` from the request; a nanobot that does
not know the field ignores it). Printed, for this tree and for a baseline commit (default: main):

- items kept: how many of the 6 planted items the last request still carries, after N compactions;
- prompt tokens per turn (cl100k, counted as a provider would);
- prefix-cache reuse of the main lane: the share of each turn request's tokens that repeats the
  previous turn request's prefix byte for byte (what a provider's prompt cache can serve), averaged.

    .venv/bin/python scripts/bench_continuity.py [--window 8192] [--turns 16] [--baseline main]

The baseline is exported with `git archive` into a temp folder (the repository is not touched).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

from nanobot.fakellm import FakeLLMServer, Reply
from nanobot.fakellm.rules import count_prompt_tokens
from nanobot.fakellm.summariser import is_consolidation
from nanobot.provider_table import scrubbed_env_names
from nanobot.tokens import load_offline_encoding

REPO = Path(__file__).resolve().parent.parent
PLANTED_TURNS = [
    "Goal: migrate the billing service to Postgres 16. The ticket is BILL-4821",
    "We work on the branch feat/pg16-migration and the config lives in /srv/billing/config.yaml",
    "Decision: keep the old replica until Friday",
    "Next step: run the schema diff against staging",
]
PLANTED_ITEMS = [
    "migrate the billing service to Postgres 16",
    "BILL-4821",
    "feat/pg16-migration",
    "/srv/billing/config.yaml",
    "keep the old replica until Friday",
    "run the schema diff against staging",
]
_VOCAB = [
    a + b
    for a in ("ka", "lo", "mi", "ne", "pu", "ro", "sa", "ti", "vu", "ze")
    for b in ("ber", "dan", "fol", "gim", "hup", "jas", "kor", "lum", "mep", "nix")
]


@dataclass
class Run:
    label: str
    prompt_tokens: list[int] = field(default_factory=list)
    reused_tokens: list[int] = field(default_factory=list)
    compactions: int = 0
    items_kept: int = 0
    invalid: int = 0


def filler(seed: int, tokens: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_VOCAB) for _ in range(tokens // 2)) + "."


def request_text(req) -> str:
    """A turn request as the provider reads it, in order: system prompt, then each message's JSON."""
    parts = [json.dumps(req.system, ensure_ascii=False)] if req.system else []
    parts += [json.dumps(m, ensure_ascii=False, sort_keys=True) for m in req.messages]
    return "\n".join(parts)


def common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def export(ref: str, into: Path) -> Path:
    # the package and the bundled folders beside it (skills/ and workspace/ shape the system prompt)
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "nanobot", "skills", "workspace"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run(label: str, tree: Path | None, *, window: int, turns: int, protocol: str, encode) -> Run:
    out = Run(label)
    with (
        tempfile.TemporaryDirectory(prefix="nanobot-continuity-") as tmp,
        FakeLLMServer() as server,
    ):
        home = Path(tmp) / "home"
        home.mkdir()
        server.summarise = True
        server.context_window = window
        server.count_max_tokens = True
        server.prompt_counter = lambda prompt: count_prompt_tokens(prompt, encode)
        server.responder = lambda req: Reply.text(
            f"Working on it. {filler(len(req.messages), window // 6)}"
        )
        if protocol == "anthropic":
            cfg = {
                "agents": {
                    "defaults": {"model": "anthropic/claude-test", "contextWindowTokens": window}
                },
                "providers": {
                    "anthropic": {
                        "apiKey": "sk-ant-test-key-123456",
                        "apiBase": server.anthropic_base_url,
                    }
                },
            }
        else:
            cfg = {
                "agents": {
                    "defaults": {
                        "model": "custom/test-model",
                        "provider": "custom",
                        "contextWindowTokens": window,
                    }
                },
                "providers": {
                    "custom": {"apiKey": "sk-test-key-123456", "apiBase": server.openai_base_url}
                },
            }
        (home / "config.json").write_text(json.dumps(cfg))
        (home / "config.json").chmod(0o600)
        env = {k: v for k, v in os.environ.items() if k not in scrubbed_env_names(os.environ)}
        env.update(
            NANOBOT_HOME=str(home),
            HOME=str(home),
            NO_PROXY="127.0.0.1,localhost",
            PYTHONDONTWRITEBYTECODE="1",
        )
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        for turn in range(turns):
            text = (
                PLANTED_TURNS[turn]
                if turn < len(PLANTED_TURNS)
                else f"turn {turn}: carry on please"
            )
            done = subprocess.run(
                [sys.executable, "-m", "nanobot", "agent", "-m", text],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if done.returncode != 0:
                print(
                    f"  [{label}] turn {turn} exited {done.returncode}: {done.stderr.strip()[-300:]}"
                )
        requests = server.requests
        main = [r for r in requests if not is_consolidation(r)]
        out.compactions = sum(1 for r in requests if is_consolidation(r))
        out.invalid = sum(1 for r in requests if r.violations)
        previous = ""
        for req in main:
            text = request_text(req)
            out.prompt_tokens.append(req.estimated_tokens)
            shared = common_prefix(previous, text)
            out.reused_tokens.append(len(encode(shared)) if shared else 0)
            previous = text
        last = "\n".join(json.dumps(m, ensure_ascii=False) for m in main[-1].messages).replace(
            "\\/", "/"
        )
        out.items_kept = sum(1 for item in PLANTED_ITEMS if item in last)
    return out


def report(r: Run) -> None:
    reuse = [u / t for u, t in zip(r.reused_tokens[1:], r.prompt_tokens[1:], strict=False) if t]
    print(f"\n{r.label}")
    print(
        f"  items kept in the last request: {r.items_kept}/{len(PLANTED_ITEMS)} after {r.compactions} compactions;"
        f" invalid requests: {r.invalid}"
    )
    print("  prompt tokens per turn: " + " ".join(f"{t:,}" for t in r.prompt_tokens))
    print(
        f"  mean prompt tokens per turn: {sum(r.prompt_tokens) / max(1, len(r.prompt_tokens)):,.0f}"
    )
    print("  prefix reused from the previous turn: " + " ".join(f"{x:.0%}" for x in reuse))
    print(
        f"  mean prefix-cache reuse of the main lane: {sum(reuse) / max(1, len(reuse)):.1%}"
        f" ({sum(r.reused_tokens):,} of {sum(r.prompt_tokens[1:]):,} tokens after the first turn)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--protocol", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--baseline", default="main", help="git ref to compare with ('' to skip)")
    args = parser.parse_args()
    encode, reason = load_offline_encoding()
    if encode is None:
        print(f"cl100k is not available offline: {reason}")
        return 1
    print(
        f"window {args.window:,}, {args.turns} turns, {args.protocol} protocol, answers of ~{args.window // 6:,} tokens"
    )
    runs = []
    if args.baseline:
        with tempfile.TemporaryDirectory(prefix="nanobot-baseline-") as base:
            ref = subprocess.run(
                ["git", "-C", str(REPO), "rev-parse", "--short", args.baseline],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            runs.append(
                run(
                    f"before ({args.baseline} {ref})",
                    export(args.baseline, Path(base)),
                    window=args.window,
                    turns=args.turns,
                    protocol=args.protocol,
                    encode=encode,
                )
            )
    runs.append(
        run(
            "after (this tree)",
            None,
            window=args.window,
            turns=args.turns,
            protocol=args.protocol,
            encode=encode,
        )
    )
    for r in runs:
        report(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
