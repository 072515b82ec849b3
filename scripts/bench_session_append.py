"""Time appending one turn to a small and a very large session: the per-turn cost must not grow with size.

Builds the sessions in a temporary folder (never the real ~/.nanobot), then times
`save_turn` (one write + one fsync) many times on each and prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from nanobot.messages import assistant, tool_call, tool_result, user
from nanobot.session.save_policy import save_turn
from nanobot.session.store import SessionStore


def build(store: SessionStore, key: str, size: int) -> None:
    """Write a session of `size` messages directly (building it turn by turn would take minutes)."""
    meta = {
        "_type": "metadata",
        "key": key,
        "created_at": "2026-03-01T10:00:00",
        "updated_at": "2026-03-01T10:00:00",
        "metadata": {},
        "last_consolidated": 0,
    }
    lines = [json.dumps(meta)]
    stamp = "2026-03-01T10:00:00"
    pattern = [
        lambda i: user(f"question {i}: what is in file {i}.txt?"),
        lambda i: assistant(None, [tool_call(f"call_{i}", "read_file", {"path": f"{i}.txt"})]),
        lambda i: tool_result(f"call_{i - 1}", "read_file", "some file content " * 20),
        lambda i: assistant(f"File {i} holds some content, repeated twenty times."),
    ]
    for i in range(size):
        lines.append(json.dumps({**pattern[i % 4](i), "timestamp": stamp}, ensure_ascii=False))
    store.directory.mkdir(parents=True, exist_ok=True)
    store.path_for(key).write_text("\n".join(lines) + "\n", encoding="utf-8")


def time_appends(store: SessionStore, keys: list[str], rounds: int) -> dict[str, list[float]]:
    """Alternate appends between the sessions so both see the same disk and background load."""
    sessions = {key: store.open(key) for key in keys}
    try:
        turn = [user("one more question"), assistant("one more answer")]
        samples: dict[str, list[float]] = {key: [] for key in keys}
        for _ in range(rounds):
            for key, session in sessions.items():
                start = time.perf_counter()
                save_turn(store, session, turn)
                samples[key].append(time.perf_counter() - start)
        return samples
    finally:
        for session in sessions.values():
            store.close(session)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--small", type=int, default=10, help="messages in the small session (default 10)"
    )
    parser.add_argument(
        "--large", type=int, default=50_000, help="messages in the large session (default 50000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=200, help="appends timed per session (default 200)"
    )
    parser.add_argument(
        "--dir", type=Path, default=None, help="folder for the sessions (default: a temp folder)"
    )
    args = parser.parse_args(argv)

    sizes = {"small": args.small, "large": args.large}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = SessionStore(Path(tmp))
        for name, size in sizes.items():
            build(store, name, size)
        time_appends(store, list(sizes), 5)  # warm-up: first fsyncs of a fresh file are slower
        samples = time_appends(store, list(sizes), args.rounds)
        start = time.perf_counter()
        large = store.load("large")
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        large.get_history()
        history_s = time.perf_counter() - start
        rows = [
            (
                name,
                size,
                store.path_for(name).stat().st_size,
                statistics.median(samples[name]),
                max(samples[name]),
            )
            for name, size in sizes.items()
        ]

    print(
        f"{args.rounds} appends of one turn (user + assistant) per session, in {args.dir or tempfile.gettempdir()}"
    )
    print(
        f"{'session':<8} {'messages':>9} {'file size':>12} {'median append':>15} {'max append':>12}"
    )
    for name, loaded, file_size, median, worst in rows:
        print(
            f"{name:<8} {loaded:>9} {file_size / 1e6:>10.2f}MB {median * 1e3:>13.3f}ms {worst * 1e3:>10.3f}ms"
        )
    print(
        f"for scale (once per process / per request): loading the large session {load_s * 1e3:.0f}ms, "
        f"get_history over all its messages {history_s * 1e3:.0f}ms"
    )
    ratio = rows[1][3] / rows[0][3]
    print(f"large/small median ratio: {ratio:.2f}x (target: within 2x)")
    return 0 if ratio <= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
