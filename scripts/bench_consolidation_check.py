"""Time the per-turn consolidation check on a 10-message and a 50,000-message session.

The check runs after every turn: "does the next prompt (system + unconsolidated history + tools +
the coming message) reach the budget?". It must cost in proportion to the new messages, not to
the session. Three sessions are built in a temporary folder (never the real ~/.nanobot):

  small        10 messages, nothing consolidated
  large        50,000 messages, all but the last 10 consolidated
  large-tail   50,000 messages, only the first half consolidated (25,000 unconsolidated: a session
               from an older version, or one whose consolidation kept failing)

For each, a turn (one user + one assistant message) is appended and the check timed, many times:
`Consolidator.estimate` (incremental prefix sums over cached per-message counts) against the naive
check that counts `get_history()` every time. The first check on a session (cold cache) is shown too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nanobot.messages import assistant, tool_call, tool_result, user


def build(store, key: str, size: int, pointer: int):
    """Create, fill and open a session of `size` messages with the pointer at `pointer`."""
    session = store.open(key)
    pattern = [
        lambda i: user(f"question {i}: what is in file {i}.txt? please summarise it briefly"),
        lambda i: assistant(None, [tool_call(f"call_{i}", "read_file", {"path": f"{i}.txt"})]),
        lambda i: tool_result(f"call_{i - 1}", "read_file", f"line {i}: some file content " * 20),
        lambda i: assistant(f"File {i} holds some content, repeated twenty times, nothing else."),
    ]
    stamp = "2026-03-01T10:00:00"
    store.append(session, [{**pattern[i % 4](i), "timestamp": stamp} for i in range(size)])
    store.set_pointer(session, pointer)
    return session


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--small", type=int, default=10, help="messages in the small session (default 10)"
    )
    parser.add_argument(
        "--large", type=int, default=50_000, help="messages in the large sessions (default 50000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=100, help="turns timed per session (default 100)"
    )
    parser.add_argument(
        "--naive-rounds",
        type=int,
        default=10,
        help="turns timed with the naive get_history count (default 10; it is slow)",
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NANOBOT_HOME"] = str(Path(tmp) / "home")  # before nanobot reads any path
        from nanobot.agent.budget import ContextBudget
        from nanobot.agent.consolidation import Consolidator
        from nanobot.app import build_context, build_tools
        from nanobot.cli.setup import copy_templates
        from nanobot.config import load_config
        from nanobot.memory.store import MemoryStore
        from nanobot.session.store import SessionStore
        from nanobot.tokens import default_counter, estimator_name

        workspace = Path(tmp) / "ws"
        copy_templates(workspace)
        cfg = load_config(None, overrides={"agents.defaults.workspace": str(workspace)})
        context, schemas = build_context(cfg, workspace), build_tools(cfg, workspace).schemas()
        store = SessionStore(Path(tmp) / "sessions")
        counter = default_counter()
        cases = [
            ("small", args.small, 0),
            ("large", args.large, args.large - 10),
            ("large-tail", args.large, args.large // 2),
        ]
        rows = []
        for name, size, pointer in cases:
            session = build(store, f"bench:{name}", size, pointer)
            # a window so large the check never triggers a consolidation: only the check is timed
            cons = Consolidator(
                None,
                MemoryStore(workspace),
                store,
                ContextBudget(window=10**9, max_tokens=8192, counter=counter),
            )

            def check() -> int:
                return cons.estimate(
                    session, system_prompt=context.system_prompt, tool_schemas=schemas
                )

            def naive() -> int:
                return (
                    counter.count_text(context.system_prompt())
                    + counter.count_messages(session.get_history())
                    + counter.count_tools(schemas)
                )

            tail = len(session.messages) - session.last_consolidated
            start = time.perf_counter()
            check()
            cold = time.perf_counter() - start
            fast, slow = [], []
            for i in range(args.rounds):
                store.append(
                    session,
                    [user(f"one more question {name} {i}"), assistant(f"one more answer {i}")],
                )
                start = time.perf_counter()
                check()
                fast.append(time.perf_counter() - start)
                if i < args.naive_rounds:
                    start = time.perf_counter()
                    naive()
                    slow.append(time.perf_counter() - start)
            rows.append((name, size, tail, cold * 1000, median_ms(fast), median_ms(slow)))
            store.close(session)

    print(
        f"estimator: {estimator_name()}; {args.rounds} turns per session (naive: {args.naive_rounds})"
    )
    print(
        f"{'session':<12} {'messages':>9} {'unconsol.':>10} {'first check':>12} {'per-turn check':>15} "
        f"{'naive get_history':>18}"
    )
    for name, size, tail, cold, fast, slow in rows:
        print(f"{name:<12} {size:>9,} {tail:>10,} {cold:>10.2f}ms {fast:>13.3f}ms {slow:>16.2f}ms")
    small, large = rows[0][4], rows[1][4]
    print(
        f"per-turn check, 50k mostly consolidated vs 10 messages: x{large / small:.2f}; "
        f"50k with a {rows[2][2]:,}-message tail: x{rows[2][4] / small:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
