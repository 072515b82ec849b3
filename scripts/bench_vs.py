"""`bench.py --vs PATH`: the same one-shot figures for nanobot and another nanobot, side by side.

PATH is another nanobot's venv (its bin/nanobot is used) or its executable. Each command runs
alternately, ours then the peer, in two throwaway homes with the same config and session, both
pointed at the local fake LLM server, so the load of the moment hits both alike. The peer is
started with HOME set to its home's parent, so it finds ~/.nanobot there (nanobot 0.1.x and
0.3.x read ~/.nanobot/config.json); its session file is written where those versions keep it
(workspace/sessions/). These print figures; they are not tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench_workload import BenchHome, nanobot_argv, write_session


def peer_argv(path: str) -> list[str]:
    p = Path(path).expanduser()
    exe = p / "bin" / "nanobot" if p.is_dir() else p
    if not exe.exists():
        raise SystemExit(
            f"--vs {path}: no nanobot executable at {exe} (give a venv folder or the executable)"
        )
    return [str(exe)]


def _prepare(home: BenchHome, size: int, peer: bool) -> None:
    ours = home.session_path()
    write_session(ours, "cli:direct", size, tail=40)
    if peer:
        theirs = home.workspace / "sessions" / "cli_direct.jsonl"
        theirs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ours, theirs)


def _anthropic(home: BenchHome) -> BenchHome:
    """`home` with the model `nanobot onboard` sets up: Anthropic's protocol, through its SDK."""
    path = home.home / "config.json"
    cfg = json.loads(path.read_text())
    cfg["agents"]["defaults"] = {"model": "anthropic/claude-bench"}
    cfg["providers"] = {
        "anthropic": {
            "apiKey": "sk-ant-bench-key-123456",
            "apiBase": home.server.anthropic_base_url,
        }
    }
    path.write_text(json.dumps(cfg))
    return home


def _one_shot(argv: list[str], home: BenchHome) -> tuple[float, float | None]:
    """(whole run, spawn to first request) of `agent -m hi`, in seconds."""
    before = len(home.server.requests)
    t = time.monotonic()
    p = subprocess.run(
        [*argv, "agent", "-m", "hi", "--no-markdown"], env=home.env, capture_output=True, text=True
    )
    end = time.monotonic()
    recs = home.server.requests[before:]
    if p.returncode != 0 or not recs:
        raise RuntimeError(
            f"{argv[0]} agent -m failed ({p.returncode}): {(p.stderr or p.stdout).strip()[-400:]}"
        )
    return end - t, recs[0].t_received - t


def _timed(argv: list[str], home: BenchHome, extra: list[str]) -> float:
    t = time.monotonic()
    subprocess.run(
        [*argv, *extra], env=home.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.monotonic() - t


def _floor(home: BenchHome, *flags: str) -> tuple[float, float]:
    """Wall time of scripts/startup_floor.py against the same fake server, and its time to the request."""
    script = Path(__file__).with_name("startup_floor.py")
    target = home.root / "floor.jsonl"
    home.server.reset()
    t = time.monotonic()
    p = subprocess.run(
        [sys.executable, str(script), home.server.openai_base_url, str(target), *flags],
        env=home.env,
        capture_output=True,
        text=True,
    )
    end = time.monotonic()
    if p.returncode != 0 or not home.server.requests:
        raise RuntimeError(f"startup_floor.py failed: {p.stderr.strip()[-400:]}")
    return end - t, home.server.requests[0].t_received - t


def part_vs(args: argparse.Namespace, table: Callable, ms: Callable, maxrss: Callable) -> None:
    runs = args.runs or (5 if args.quick else 15)
    big = 10_000 if args.quick else 50_000
    argvs = {"ours": nanobot_argv(), "peer": peer_argv(args.vs)}
    homes = {"ours": BenchHome(), "peer": BenchHome()}
    big_homes = {"ours": BenchHome(), "peer": BenchHome()}
    claude = _anthropic(BenchHome())
    try:
        _prepare(claude, 10, False)
        for name in argvs:
            _prepare(homes[name], 10, name == "peer")
            _prepare(big_homes[name], big, name == "peer")
        samples: dict[str, dict[str, list[float]]] = {}

        def add(label: str, who: str, value: float | None) -> None:
            if value is not None:
                samples.setdefault(label, {"ours": [], "peer": []})[who].append(value)

        for name in argvs:  # warm the page cache and the peer's first-run setup
            _timed(argvs[name], homes[name], ["--version"])
            _one_shot(argvs[name], homes[name])
        _one_shot(argvs["ours"], claude)
        for _ in range(runs):
            for name, argv in argvs.items():
                add("`--version`", name, _timed(argv, homes[name], ["--version"]))
                whole, first = _one_shot(argv, homes[name])
                add("`agent -m hi`, whole run", name, whole)
                add("`agent -m hi`, spawn to first request", name, first)
                whole, _ = _one_shot(argv, big_homes[name])
                add(f"`agent -m hi` on a {big:,}-message session", name, whole)
            whole, first = _one_shot(argvs["ours"], claude)
            add(
                "`agent -m hi`, Anthropic protocol (onboard's default model): whole run",
                "ours",
                whole,
            )
            add("`agent -m hi`, Anthropic protocol: spawn to first request", "ours", first)
            for flags, how in (
                ((), "as shipped"),
                (("--on-demand",), "re-exports on demand, as nanobot"),
            ):
                whole, first = _floor(homes["ours"], *flags)
                add(
                    f"floor ({how}): python + `import openai` + one SDK request + fsync",
                    "ours",
                    whole,
                )
                add(f"floor ({how}): spawn to first request", "ours", first)
        for _ in range(max(3, runs // 5)):
            for name, argv in argvs.items():
                code, rss = maxrss([*argv, "agent", "-m", "hi", "--no-markdown"], homes[name].env)
                if code == 0:
                    add("peak memory, `agent -m hi` (MiB)", name, rss / 1024)
        rows = []
        for label, by in samples.items():
            fmt = (lambda v: f"{v:.0f} MiB") if "MiB" in label else ms
            ours = statistics.median(by["ours"])
            if not by["peer"]:  # the floor: ours only
                rows.append([label, fmt(ours), "-", "-"])
                continue
            peer = statistics.median(by["peer"])
            rows.append([label, fmt(ours), fmt(peer), f"{ours / peer:.2f}"])
        table(
            f"vs. {argvs['peer'][0]} (median of {runs} paired runs; ratio = ours / peer)",
            ["measure", "ours", "peer", "ratio"],
            rows,
            note="Runs alternate ours and the peer. 'first request' = spawn until the fake server "
            "received the chat request. The floor (scripts/startup_floor.py) is what any one-shot "
            "turn on the official openai SDK costs at least: with the SDK imported as shipped, "
            "and imported as nanobot imports it (providers/_sdk_on_demand.py). The Anthropic rows "
            "are ours only: the same turn with the model `nanobot onboard` configures.",
        )
    finally:
        for home in (*homes.values(), *big_homes.values(), claude):
            home.close()
