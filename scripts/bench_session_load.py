"""Time loading a long session: through its load index (from the consolidation pointer on) and in full.

    python scripts/bench_session_load.py                 # 50,000 messages, 40 unconsolidated
    python scripts/bench_session_load.py --messages 10000 --runs 15

Writes the session in a temporary folder (never ~/.nanobot), opens it once (a file read in full
gets its index then), and times `SessionStore.open` + `get_history` (what a turn needs) on a copy
with the index and on one without, alternating. These print figures; they are not tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nanobot.session.store import SessionStore  # noqa: E402

from bench_workload import write_session  # noqa: E402

KEY = "cli:direct"


def strip_index(path: Path) -> None:
    out = []
    for line in path.read_bytes().split(b"\n"):
        if line.startswith(b'{"_type": "metadata"'):
            record = json.loads(line)
            record.pop("index", None)
            line = json.dumps(record).encode()
        out.append(line)
    path.write_bytes(b"\n".join(out))


def timed_open(store: SessionStore) -> float:
    t = time.perf_counter()
    session = store.open(KEY)
    session.get_history()
    elapsed = time.perf_counter() - t
    store.close(session)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--tail", type=int, default=40, help="unconsolidated messages (default 40)")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nanobot-bench-load-"))
    try:
        indexed, full = SessionStore(root / "indexed"), SessionStore(root / "full")
        write_session(indexed.path_for(KEY), KEY, args.messages, tail=args.tail)
        indexed.close(indexed.open(KEY))  # read in full once: the index is recorded
        full.directory.mkdir(parents=True)
        shutil.copyfile(indexed.path_for(KEY), full.path_for(KEY))
        times: dict[str, list[float]] = {"through the index": [], "in full": []}
        for _ in range(args.runs):
            times["through the index"].append(timed_open(indexed))
            strip_index(full.path_for(KEY))  # opening a large file read in full records its index
            times["in full"].append(timed_open(full))
        size = indexed.path_for(KEY).stat().st_size / 1e6
        print(
            f"session: {args.messages:,} messages ({size:.1f} MB), {args.tail} unconsolidated; "
            f"open + get_history, median of {args.runs} (min-max)"
        )
        for label, samples in times.items():
            print(
                f"  {label:18} {statistics.median(samples) * 1e3:7.1f} ms  "
                f"({min(samples) * 1e3:.1f}-{max(samples) * 1e3:.1f})"
            )
        print("load average: " + " / ".join(f"{x:.2f}" for x in os.getloadavg()))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
