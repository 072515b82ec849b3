"""Benchmarks for nanobot: start-up, per-turn overhead, memory, token use and history grep.

    python scripts/bench.py                 # everything (about 6-8 minutes on 2 cores)
    python scripts/bench.py --quick         # a fast smoke run with small sizes and few runs
    python scripts/bench.py --only turn     # one part: startup, turn, memory, tokens, grep
    python scripts/bench.py --markdown      # tables as markdown (for the README)
    python scripts/bench.py --vs ~/venvs/nanobot-0.1.4   # side by side with another nanobot

Everything runs against the local fake LLM server (nanobot.fakellm) in throwaway NANOBOT_HOME
folders; nothing touches the network or ~/.nanobot. These print figures; they are not tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_probe import Probe  # noqa: E402
from bench_workload import (  # noqa: E402
    TOOL_MARK,
    BenchHome,
    is_consolidation,
    nanobot_argv,
    server_seconds,
    user_turns,
    write_session,
)

PARTS = ("startup", "turn", "memory", "tokens", "grep")
MARKDOWN = False


# -- output --------------------------------------------------------------------------------------


def table(title: str, headers: list[str], rows: list[list[Any]], note: str = "") -> None:
    cells = [[str(c) for c in row] for row in rows]
    if MARKDOWN:
        print(f"\n**{title}**\n")
        print("| " + " | ".join(headers) + " |")
        print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|")
        for row in cells:
            print("| " + " | ".join(row) + " |")
        if note:
            print(f"\n{note}")
        sys.stdout.flush()
        return
    widths = [
        max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)
    ]
    print(f"\n== {title}")
    print(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))
        )
    )
    for row in cells:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            )
        )
    if note:
        print(note)
    sys.stdout.flush()


def ms(seconds: float | None) -> str:
    return (
        "-"
        if seconds is None
        else f"{seconds * 1e3:,.1f} ms"
        if seconds < 10
        else f"{seconds:,.1f} s"
    )


def spread(samples: list[float]) -> tuple[str, str, str, str]:
    """median, min, max, IQR of seconds, formatted."""
    if not samples:
        return "-", "-", "-", "-"
    qs = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return ms(statistics.median(samples)), ms(min(samples)), ms(max(samples)), ms(qs[2] - qs[0])


def machine() -> list[str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    ram = "unknown"
    try:
        kb = int(
            next(
                line
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            ).split()[1]
        )
        ram = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"
    return [
        f"cores: {os.cpu_count()}",
        f"RAM: {ram}",
        f"CPU: {cpu}",
        f"Python: {platform.python_version()} ({platform.system()} {platform.machine()})",
        f"load average (1/5/15 min): {load}",
    ]


# -- 1. start-up ---------------------------------------------------------------------------------


def part_startup(args: argparse.Namespace) -> None:
    runs = args.runs or (5 if args.quick else 15)
    argv = nanobot_argv()
    with BenchHome() as home:
        env = home.env
        write_session(home.session_path(), "cli:direct", 10, tail=None)
        subprocess.run([*argv, "--version"], env=env, capture_output=True)  # warm the page cache
        samples: dict[str, list[float]] = {
            "nanobot --version": [],
            "nanobot memory show": [],
            "nanobot agent -m hi (to first request)": [],
            "nanobot agent -m hi (whole run)": [],
        }
        for _ in range(runs):
            for label, extra in (
                ("nanobot --version", ["--version"]),
                ("nanobot memory show", ["memory", "show"]),
            ):
                t = time.monotonic()
                subprocess.run(
                    [*argv, *extra], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                samples[label].append(time.monotonic() - t)
            home.server.reset()
            t = time.monotonic()
            p = subprocess.run(
                [*argv, "agent", "-m", "hi"], env=env, capture_output=True, text=True
            )
            end = time.monotonic()
            recs = home.server.requests
            if p.returncode != 0 or not recs:
                print(f"agent -m failed ({p.returncode}): {p.stderr.strip()[-300:]}")
                continue
            samples["nanobot agent -m hi (to first request)"].append(recs[0].t_received - t)
            samples["nanobot agent -m hi (whole run)"].append(end - t)
    table(
        f"1. Start-up ({runs} runs each; wall time from spawn)",
        ["command", "median", "min", "max", "IQR"],
        [[label, *spread(s)] for label, s in samples.items()],
        note="'to first request' = spawn until the fake server receives the first chat request "
        "(t_received); the session has 10 messages.",
    )


# -- 2. per-turn overhead ------------------------------------------------------------------------


def instrument(probe: Probe) -> None:
    """Time the pieces of a turn; parts that do not exist yet are skipped."""
    import nanobot.agent.loop as loop
    import nanobot.session.store as session
    from nanobot.agent.context import ContextBuilder
    from nanobot.agent.conversation import Conversation
    from nanobot.tools.registry import ToolRegistry

    probe.wrap(session.SessionStore, "open", "session load (open+parse)")
    probe.wrap(Conversation, "build_request", "build request (total)")
    probe.wrap(session.Session, "get_history", "  get_history")
    probe.wrap(ContextBuilder, "system_prompt", "  system prompt")
    probe.wrap(loop, "make_valid", "make_valid in loop", everywhere=False)
    probe.wrap(session.SessionStore, "append", "save (appends+fsync)")
    probe.wrap(session.SessionStore, "set_pointer", "save pointer")
    probe.wrap(ToolRegistry, "execute", "tool execution")
    try:  # the openai SDK converts every message of every request through its TypedDict transform
        import openai.resources.chat.completions.completions as completions

        probe.wrap(
            completions, "async_maybe_transform", "  SDK request transform", everywhere=False
        )
    except ImportError:
        pass
    try:
        import nanobot.agent.consolidation as consolidation

        probe.wrap(consolidation.Consolidator, "maybe_consolidate_by_tokens", "consolidation check")
        probe.wrap(consolidation.Consolidator, "estimate", "  token estimate")
    except ImportError:
        pass
    try:
        import nanobot.agent.budget as budget

        probe.wrap(budget.ContextBudget, "fit", "fit request to budget")
        probe.wrap(budget.ContextBudget, "check_fixed", "fixed-prompt check")
    except ImportError:
        pass


TOP_LEVEL = (
    "build request (total)",
    "make_valid in loop",
    "save (appends+fsync)",
    "save pointer",
    "tool execution",
    "consolidation check",
    "fit request to budget",
    "fixed-prompt check",
    "SDK + HTTP (client side)",
)


def _turn_text(i: int) -> str:
    return f"{TOOL_MARK} Please read notes/{i % 8}.md and tell me what changed in it, turn {i}."


async def _inprocess_turns(home: BenchHome, turns: int, probe: Probe) -> dict[str, Any]:
    """Open the assistant and run `turns` turns (each: read_file call, then an answer)."""
    from nanobot.app import open_assistant

    probe.reset()
    t = time.perf_counter()
    assistant = open_assistant(home.config(), "cli:direct", stream=True)
    open_s = time.perf_counter() - t
    load_s = probe.totals.get("session load (open+parse)", 0.0)
    conv = assistant.conversation
    provider_chat = conv.provider.chat
    probe.wrap(conv.provider, "chat", "provider.chat", everywhere=False)
    per_turn: list[float] = []
    parts: list[dict[str, float]] = []
    try:
        for i in range(turns + 1):  # the first turn is a warm-up (imports, connection, tokenizer)
            probe.reset()
            before = len(home.server.requests)
            t = time.perf_counter()
            out = await conv.send(_turn_text(i))
            wall = time.perf_counter() - t
            recs = home.server.requests[before:]
            if out.error:
                raise RuntimeError(f"turn failed: {out.error}")
            served = server_seconds(recs)
            snap = probe.snapshot()
            snap["SDK + HTTP (client side)"] = snap.pop("provider.chat", 0.0) - served
            if i:
                per_turn.append(wall - served)
                parts.append(snap)
    finally:
        conv.provider.chat = provider_chat
        await assistant.aclose()
    labels = sorted({k for p in parts for k in p})
    return {
        "open": open_s,
        "load": load_s,
        "per_turn": per_turn,
        "parts": {k: statistics.median([p.get(k, 0.0) for p in parts]) for k in labels},
        "messages": len(conv.session.messages),
    }


def _oneshot(home: BenchHome, runs: int) -> dict[str, list[float]]:
    argv = nanobot_argv()
    out: dict[str, list[float]] = {"wall - server": [], "to first request": [], "after answer": []}
    for _ in range(runs):
        before = len(home.server.requests)
        t = time.monotonic()
        p = subprocess.run(
            [*argv, "agent", "-m", _turn_text(0)], env=home.env, capture_output=True, text=True
        )
        end = time.monotonic()
        recs = home.server.requests[before:]
        if p.returncode != 0 or not recs:
            print(f"one-shot failed ({p.returncode}): {p.stderr.strip()[-300:]}")
            continue
        out["wall - server"].append(end - t - server_seconds(recs))
        out["to first request"].append(recs[0].t_received - t)
        out["after answer"].append(end - (recs[-1].t_answered or recs[-1].t_received))
    return out


def part_turn(args: argparse.Namespace) -> None:
    sizes = [10, 1_000, 10_000] if args.quick else [10, 1_000, 10_000, 50_000]
    turns = args.turns or (3 if args.quick else 8)
    runs = args.oneshot_runs or (2 if args.quick else 5)
    variants = [(f"{n:,}", n, 40, None) for n in sizes]
    # informative: a large unconsolidated tail, with a window big enough that nothing consolidates
    variants.append((f"{1_000:,} (all unconsolidated)", 1_000, None, 4_000_000))
    results = []
    probe = Probe()
    for label, size, tail, window in variants:
        with BenchHome(context_window=window) as home:
            home.activate()
            t = time.perf_counter()
            pointer = write_session(home.session_path(), "cli:direct", size, tail=tail)
            build_s = time.perf_counter() - t
            file_mb = home.session_path().stat().st_size / 1e6
            instrument(probe)
            try:
                r = asyncio.run(_inprocess_turns(home, turns, probe))
            finally:
                probe.restore()
            one = _oneshot(home, runs)
            results.append((label, size, pointer, file_mb, build_s, r, one))
    base = statistics.median(results[0][5]["per_turn"])
    rows = []
    for label, size, pointer, file_mb, _, r, one in results:
        med = statistics.median(r["per_turn"])
        rows.append(
            [
                label,
                f"{size - pointer:,}",
                f"{file_mb:.1f} MB",
                ms(med),
                f"{med / base:.2f}x",
                ms(min(r["per_turn"])),
                ms(max(r["per_turn"])),
                ms(r["load"]),
                ms(statistics.median(one["wall - server"])) if one["wall - server"] else "-",
                ms(statistics.median(one["to first request"])) if one["to first request"] else "-",
            ]
        )
    table(
        f"2a. Per-turn local overhead (wall - fake server time; median of {turns} in-process turns, "
        f"{runs} one-shot runs)",
        [
            "session messages",
            "unconsolidated",
            "file",
            "in-process",
            "vs 10",
            "min",
            "max",
            "session load",
            "one-shot",
            "one-shot to 1st req",
        ],
        rows,
        note="A turn = user message -> read_file call -> tool result -> answer (2 requests). In-process: "
        "open_assistant(...).conversation.send() after one warm-up turn. One-shot: `nanobot agent -m` "
        "in a child process (start-up + session load + the turn + exit). Target: 50,000 within 2x of 10.",
    )
    labels = [
        k
        for k in TOP_LEVEL
        + ("  SDK request transform", "  get_history", "  system prompt", "  token estimate")
        if any(k in r["parts"] for *_, r, _ in results)
    ]
    rows = []
    for label in labels:
        rows.append(
            [
                label,
                *[
                    ms(r["parts"].get(label)) if label in r["parts"] else "-"
                    for *_, r, _ in results
                ],
            ]
        )
    accounted = [sum(r["parts"].get(k, 0.0) for k in TOP_LEVEL) for *_, r, _ in results]
    rows.append(
        [
            "unattributed (loop, events, asyncio)",
            *[
                ms(statistics.median(r["per_turn"]) - a)
                for (*_, r, _), a in zip(results, accounted)
            ],
        ]
    )
    table(
        "2b. Where an in-process turn's local time goes (median per turn; indented rows are inside the "
        "row above)",
        ["piece", *[label for label, *_ in results]],
        rows,
    )


# -- 3. peak memory ------------------------------------------------------------------------------

# ru_maxrss of a forked child starts from its parent's size at fork, so a child of this (large)
# bench process would report the bench's memory; a tiny launcher process forks the target instead.
LAUNCHER = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(p.pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}")
"""


def _maxrss_of(
    argv: list[str], env: dict, stdin: Any = None, on_running: Callable | None = None
) -> tuple[int, int]:
    """(exit code, ru_maxrss in KiB) of a child process, started through a small launcher."""
    out = Path(tempfile.mkstemp(prefix="nanobot-bench-rss-")[1])
    p = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(out), *argv],
        env=env,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if stdin is not None:
        threading.Thread(
            target=lambda: (p.stdin.write(stdin), p.stdin.close()), daemon=True
        ).start()
    err_chunks: list[bytes] = []
    threading.Thread(target=lambda: err_chunks.append(p.stderr.read()), daemon=True).start()
    if on_running:
        on_running(p)
    p.wait()
    try:
        code, rss = (int(x) for x in out.read_text().split())
    finally:
        out.unlink(missing_ok=True)
    if code:
        time.sleep(0.1)
        print(f"child failed ({code}): {b''.join(err_chunks).decode(errors='replace')[-400:]}")
    return code, rss


def _child_pid(launcher_pid: int) -> int:
    """The pid of the launcher's child (the process being measured), or the launcher's own."""
    try:
        kids = Path(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read_text().split()
        return int(kids[0]) if kids else launcher_pid
    except (OSError, ValueError):
        return launcher_pid


def _vm(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB, or zeros once the process is gone."""
    try:
        fields = dict(
            line.split(":", 1)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if ":" in line
        )
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return 0, 0


REPL_CHILD = """
import sys
import threading
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from nanobot.cli.chat import run_agent

# the real chat (prompt_toolkit included), typed into through prompt_toolkit's own pipe input;
# a thread types, since the OS pipe fills long before 1,000 lines are read
def type_lines(keys):
    for line in sys.stdin:
        keys.send_text(line.rstrip("\\n") + "\\r")
    keys.send_text("\\x04")  # Ctrl-D leaves

with create_pipe_input() as keys:
    threading.Thread(target=type_lines, args=(keys,), daemon=True).start()
    with create_app_session(input=keys, output=DummyOutput()):
        code = run_agent(message=None, session_key="cli:direct", workspace=None, config_path=None, model=None,
                         markdown=True, json_out=False)
sys.exit(code)
"""


def part_memory(args: argparse.Namespace) -> None:
    argv = nanobot_argv()
    rows = []
    for size in (10, 10_000) if args.quick else (10, 50_000):
        with BenchHome() as home:
            write_session(home.session_path(), "cli:direct", size)
            code, rss = _maxrss_of([*argv, "agent", "-m", _turn_text(0)], home.env)
            rows.append(
                [
                    f"one-shot `nanobot agent -m` ({size:,}-message session)",
                    f"{rss / 1024:.0f} MiB",
                    "",
                    "",
                ]
            )
    n = args.repl_turns or (100 if args.quick else 1_000)
    marks = sorted({1, 10, 100, n // 4, n // 2, n})
    samples: dict[int, tuple[int, int]] = {}
    with BenchHome() as home:
        lines = "".join(
            ("" if i % 4 else TOOL_MARK + f" read notes/{i % 8}.md ")
            + f"question {i}: "
            + "what should we do about the release notes and the failing tests?\n"
            for i in range(n)
        )
        t0 = time.monotonic()

        def watch(p: subprocess.Popen) -> None:
            def run() -> None:
                done = 0
                while p.poll() is None and done < len(marks):
                    user_turns_seen = sum(
                        1
                        for r in home.server.requests
                        if not is_consolidation(r)
                        and r.messages
                        and r.messages[-1].get("role") == "user"
                    )
                    while done < len(marks) and user_turns_seen >= marks[done]:
                        samples[marks[done]] = _vm(_child_pid(p.pid))
                        done += 1
                    time.sleep(0.02)

            threading.Thread(target=run, daemon=True).start()

        code, rss = _maxrss_of(
            [sys.executable, "-c", REPL_CHILD], home.env, stdin=lines.encode(), on_running=watch
        )
        elapsed = time.monotonic() - t0
        recs = home.server.requests
        consolidations = sum(1 for r in recs if is_consolidation(r))
        stored = (
            sum(1 for _ in open(home.session_path())) - 1 if home.session_path().exists() else 0
        )
    for mark in marks:
        rss_now, hwm = samples.get(mark, (0, 0))
        rows.append(
            [
                f"REPL after turn {mark:,} (VmRSS; peak so far)",
                f"{rss_now / 1024:.0f} MiB; {hwm / 1024:.0f} MiB" if rss_now else "-",
                "",
                "",
            ]
        )
    rows.append(
        [
            f"REPL, {n:,} turns: peak (ru_maxrss)",
            f"{rss / 1024:.0f} MiB",
            f"{n / elapsed:.1f} turns/s",
            f"{consolidations} consolidations, {stored:,} lines stored",
        ]
    )
    table(
        "3. Peak resident memory",
        ["process", "memory", "rate", "notes"],
        rows,
        note="REPL: the real chat (nanobot.cli.chat.Chat.run with prompt_toolkit) in a child process, its input "
        "typed through prompt_toolkit's pipe input, every 4th turn a read_file call, "
        "default 65,536-token window. ru_maxrss from os.wait4, taken by a small launcher process (a child forked from the big bench process would report the bench's own size).",
    )


# -- 4. token use over a scripted conversation --------------------------------------------------


def _serial(rec: Any, *, strip_context: bool = False) -> list[str]:
    """The request as a list of serialized blocks, in the order a prompt cache sees them.

    `strip_context`: as if user messages had been sent without their runtime-context block
    (the form the session stores), to show what the prefix share would be if the request and
    the stored message matched.
    """
    from nanobot.session.runtime_context import strip_runtime_context

    head = [json.dumps(rec.tools, sort_keys=True)] if rec.tools else []
    if rec.system is not None:
        head.append(json.dumps(rec.system, sort_keys=True))
    msgs = rec.messages
    if strip_context:
        msgs = [
            {**m, "content": strip_runtime_context(m["content"])}
            if m.get("role") == "user" and isinstance(m.get("content"), str)
            else m
            for m in msgs
        ]
    return head + [json.dumps(m, sort_keys=True, ensure_ascii=False) for m in msgs]


def common_prefix(prev: list[str], cur: list[str]) -> tuple[int, int]:
    """(characters of `cur` equal to the start of `prev`, index of the first differing block)."""
    same = 0
    for k, (a, b) in enumerate(zip(prev, cur)):
        if a != b:
            return same + len(os.path.commonprefix([a, b])), k
        same += len(a)
    return same, min(len(prev), len(cur))


def break_reason(prev_rec: Any, rec: Any, block: int) -> str:
    """Why the prefix broke at `block`, in words."""
    offset = (1 if rec.tools else 0) + (1 if rec.system is not None else 0)
    if block < offset:
        return "tool schemas or system changed"
    k = block - offset
    if k >= len(prev_rec.messages):
        return "none (previous request fully reused)"
    before, after = prev_rec.messages[k], rec.messages[k] if k < len(rec.messages) else {}
    role = before.get("role")
    if role == "system":
        return "system prompt changed"
    text = before.get("content") if isinstance(before.get("content"), str) else ""
    if (
        role == "user"
        and text.startswith("[Runtime Context]")
        and not str(after.get("content")).startswith("[Runtime Context]")
    ):
        return "previous user message re-sent without its runtime-context block"
    if role == "tool" and after.get("role") == "tool":
        return "an earlier tool result changed (shrunk to fit?)"
    if k == 0 or (after.get("role") != role):
        return f"history start moved (a {role} message was dropped)"
    return f"a {role} message changed"


async def _scripted_conversation(home: BenchHome, texts: list[str]) -> tuple[int, list[str]]:
    from nanobot.app import open_assistant

    errors: list[str] = []
    assistant = open_assistant(home.config(), "cli:direct", stream=True)
    try:
        for text in texts:
            out = await assistant.conversation.send(text)
            if out.error:
                errors.append(out.error.splitlines()[0][:160])
        # let a background consolidation finish, if the product runs one
        await asyncio.sleep(0)
    finally:
        await assistant.aclose()
    return len(assistant.conversation.session.messages), errors


def _asked(rec: Any) -> int:
    return rec.body.get("max_tokens") or rec.body.get("max_completion_tokens") or 0


def part_tokens(args: argparse.Namespace) -> None:
    n = args.token_turns or (60 if args.quick else 300)
    window = 8_192
    with BenchHome(context_window=window, server_window=window) as home:
        home.activate()
        from nanobot.fakellm.rules import count_prompt_tokens
        from nanobot.tokens import load_offline_encoding

        # a strict server: prompts counted with cl100k like a provider, and prompt + max_tokens checked
        encode = load_offline_encoding()[0]
        home.server.prompt_counter = lambda prompt: count_prompt_tokens(prompt, encode)
        home.server.count_max_tokens = True
        t = time.perf_counter()
        stored, errors = asyncio.run(_scripted_conversation(home, user_turns(n)))
        elapsed = time.perf_counter() - t
        recs = home.server.requests
    main = [r for r in recs if not is_consolidation(r)]
    cons = [r for r in recs if is_consolidation(r)]
    rejected = [r for r in recs if any("context window exceeded" in v for v in r.violations)]
    other_violations = [v for r in recs for v in r.violations if "context window exceeded" not in v]
    shares_clean, shares_after_cons, reused_clean, shares_if_matched = [], [], [], []
    reasons: dict[str, int] = {}
    cached_tokens = 0
    prev_main = None
    for i, r in enumerate(recs):
        if is_consolidation(r):
            continue
        if prev_main is not None:
            prev, cur = _serial(recs[prev_main]), _serial(r)
            same, block = common_prefix(prev, cur)
            share = same / max(1, sum(len(b) for b in cur))
            cached_tokens += int(share * r.estimated_tokens)
            if any(is_consolidation(x) for x in recs[prev_main + 1 : i]):
                shares_after_cons.append(share)
            else:
                shares_clean.append(share)
                reused_clean.append(same / max(1, sum(len(b) for b in prev)))
                same_fixed, _ = common_prefix(_serial(recs[prev_main], strip_context=True), cur)
                shares_if_matched.append(max(same, same_fixed) / max(1, sum(len(b) for b in cur)))
                why = break_reason(recs[prev_main], r, block)
                reasons[why] = reasons.get(why, 0) + 1
        prev_main = i

    def pct(xs: list[float], f: Callable) -> str:
        return f"{100 * f(xs):.1f}%" if xs else "-"

    total = sum(r.estimated_tokens for r in recs)
    rows = [
        [
            "user turns / requests sent",
            f"{n} / {len(recs)} ({len(main)} chat, {len(cons)} consolidation)",
        ],
        ["total prompt tokens (all requests)", f"{total:,}"],
        [
            "  chat requests / consolidation requests",
            f"{sum(r.estimated_tokens for r in main):,} / {sum(r.estimated_tokens for r in cons):,}",
        ],
        [
            "largest prompt (window 8,192)",
            f"{max((r.estimated_tokens for r in recs), default=0):,}",
        ],
        [
            "largest prompt + max_tokens",
            f"{max((r.estimated_tokens + _asked(r) for r in recs), default=0):,}",
        ],
        ["requests over the window (rejected)", f"{len(rejected)}"],
        ["consolidation calls (save_memory requests)", f"{len(cons)}"],
        [
            "unchanged prefix vs previous request, turns w/o consolidation: median / mean / min",
            f"{pct(shares_clean, statistics.median)} / {pct(shares_clean, statistics.mean)} / {pct(shares_clean, min)}"
            f" (n={len(shares_clean)})",
        ],
        [
            "  share of the previous request reused unchanged: median / mean / min",
            f"{pct(reused_clean, statistics.median)} / {pct(reused_clean, statistics.mean)} / {pct(reused_clean, min)}",
        ],
        *[
            [f"  where the prefix broke: {why}", f"{n} requests"]
            for why, n in sorted(reasons.items(), key=lambda x: -x[1])
        ],
        [
            "  what-if: earlier user messages re-sent byte-identical (median / mean)",
            f"{pct(shares_if_matched, statistics.median)} / {pct(shares_if_matched, statistics.mean)}",
        ],
        [
            "  right after a consolidation: median",
            f"{pct(shares_after_cons, statistics.median)} (n={len(shares_after_cons)})",
        ],
        [
            "prompt tokens in an unchanged prefix (cacheable)",
            f"{cached_tokens:,} ({100 * cached_tokens / max(1, total):.0f}%)",
        ],
        [
            "turns that ended in an error",
            f"{len(errors)}" + (f" (first: {errors[0]})" if errors else ""),
        ],
        [
            "other rule violations",
            f"{len(other_violations)}"
            + (f" (first: {other_violations[0]})" if other_violations else ""),
        ],
        ["messages stored / wall time", f"{stored:,} / {elapsed:.1f} s"],
    ]
    table(
        f"4. Token use over a scripted {n}-turn conversation, 8,192-token window",
        ["measure", "value"],
        rows,
        note="Token counts are cl100k counts of each request's texts, ids and arguments (+4 per message, "
        "+8 per tool), as the fake server's strict mode counts them; they are also the usage it reports. 40% of turns ask to read a 0.5-4 KB file (2 requests). Prefix share: characters of "
        "the serialized request (tools, then messages) equal to the previous chat request's, block by "
        "block.",
    )


# -- 5. history grep -----------------------------------------------------------------------------


def part_grep(args: argparse.Namespace) -> None:
    import shutil

    from bench_history_grep import generate

    size_mb = args.grep_mb or (10.0 if args.quick else 100.0)
    runs = 2 if args.quick else 3
    root = Path(tempfile.mkdtemp(prefix="nanobot-bench-grep-"))
    try:
        workspace = root / "workspace"
        path = workspace / "memory" / "HISTORY.md"
        path.parent.mkdir(parents=True)
        t = time.perf_counter()
        entries = generate(path, size_mb)
        gen_s = time.perf_counter() - t
        env = {**os.environ, "NANOBOT_HOME": str(root / "home"), "LC_ALL": "C"}
        argv = nanobot_argv()
        grep = shutil.which("grep")
        rows = []
        for label, pattern, flags in (
            ("rare literal", "XYZZY", []),
            ("rare literal, -i", "xyzzy", ["-i"]),
            ("common word", "lisbon", []),
            ("regex", r"deadline \w+ release", []),
            ("no match", "qqqzzz", []),
        ):

            def best(cmd: list[str]) -> tuple[float, str]:
                times, out = [], ""
                for _ in range(runs):
                    t = time.perf_counter()
                    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                    times.append(time.perf_counter() - t)
                    out = p.stdout
                return min(times), out

            t_nb, out_nb = best([*argv, "history", "grep", pattern, *flags, "-w", str(workspace)])
            t_grep, out_grep = (
                best([grep, "-c", "-E", *flags, pattern, str(path)]) if grep else (float("nan"), "")
            )
            found = sum(1 for line in out_nb.splitlines() if line.startswith("["))
            rows.append(
                [
                    label,
                    f"{found:,}",
                    out_grep.strip() or "-",
                    ms(t_nb),
                    ms(t_grep),
                    f"{t_nb / t_grep:.1f}x",
                ]
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table(
        f"5. `nanobot history grep` over a {size_mb:.0f} MB HISTORY.md ({entries:,} entries; best of {runs})",
        ["pattern", "entries printed", "grep -c lines", "nanobot history grep", "grep -c", "ratio"],
        rows,
        note=f"File generated in {gen_s:.1f} s by scripts/bench_history_grep.py. The nanobot time includes "
        "Python start-up; 'entries printed' counts output lines starting with '['.",
    )


# -- main ----------------------------------------------------------------------------------------


def _compile_ours() -> None:
    """Bytecode for our package, as `pip install` leaves it (a peer installed by pip has its own):
    otherwise a checkout run with PYTHONDONTWRITEBYTECODE is timed compiling its source."""
    import compileall

    import nanobot

    compileall.compile_dir(str(Path(nanobot.__file__).parent), quiet=1)


def main(argv: list[str] | None = None) -> int:
    global MARKDOWN
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and few runs (a smoke run, ~1 min)"
    )
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run only this part (repeatable)"
    )
    parser.add_argument("--markdown", action="store_true", help="print tables as markdown")
    parser.add_argument("--runs", type=int, help="start-up runs per command (default 15; quick 5)")
    parser.add_argument(
        "--turns", type=int, help="timed in-process turns per session size (default 8)"
    )
    parser.add_argument(
        "--oneshot-runs", type=int, help="one-shot runs per session size (default 5)"
    )
    parser.add_argument(
        "--repl-turns", type=int, help="REPL turns for the memory part (default 1000)"
    )
    parser.add_argument(
        "--token-turns", type=int, help="turns of the scripted conversation (default 300)"
    )
    parser.add_argument(
        "--grep-mb", type=float, help="size of the generated HISTORY.md (default 100)"
    )
    parser.add_argument(
        "--vs",
        metavar="PATH",
        help="also run the one-shot figures for another nanobot (its venv "
        "or executable) side by side, alternating runs, and print the ratios",
    )
    args = parser.parse_args(argv)
    MARKDOWN = args.markdown

    print("nanobot benchmarks: " + " · ".join(machine()))
    print(
        "command: python scripts/bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    )
    _compile_ours()
    started = time.perf_counter()
    parts = {
        "startup": part_startup,
        "turn": part_turn,
        "memory": part_memory,
        "tokens": part_tokens,
        "grep": part_grep,
    }
    chosen = [p for p in PARTS if not args.only or p in args.only]
    if args.vs and not args.only:
        chosen = []  # --vs alone runs the side-by-side table; add --only PART for more
    for name in chosen:
        t = time.perf_counter()
        parts[name](args)
        print(f"({name}: {time.perf_counter() - t:.0f} s)")
    if args.vs:
        from bench_vs import part_vs

        t = time.perf_counter()
        part_vs(args, table, ms, _maxrss_of)
        print(f"(vs: {time.perf_counter() - t:.0f} s)")
    print(
        f"\ntotal {time.perf_counter() - started:.0f} s; load average at the end: "
        + " / ".join(f"{x:.2f}" for x in os.getloadavg())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
