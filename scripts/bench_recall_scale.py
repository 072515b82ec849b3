"""The recall index at scale: build time, query latency, index size, the cost of a turn's append.

Writes a synthetic archive (session files through the real SessionStore, a HISTORY.md through the
real MemoryStore) of about --mb megabytes of JSONL, builds the index from nothing, and prints:

- build time (wall and CPU seconds of both processes, with the load average) and throughput; below
  1 GB, also extrapolated linearly to 1 GB (target: <= 5 min on 2 cores);
- query latency p50 / p95 over --queries queries of 1-3 words (common and rare), at this size, wall
  and CPU: the search alone, and what search_history pays per call (the tool itself: a new
  connection, the catch-up through the journal of written files, the search, the rendering);
  and one full scan of the folder (what a call pays when the journal cannot vouch: at most every
  5 minutes, or after a file was created, deleted or replaced);
- the index size against the session files and HISTORY.md it covers (target: <= 1.5x);
- what one turn costs: SessionStore.append of a user + assistant message with the journal line and
  without it (turns alternate), the journal line alone, and the catch-up the next search pays for
  that turn.

    .venv/bin/python scripts/bench_recall_scale.py --mb 100
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any


def _vocabulary(rng: random.Random, size: int) -> tuple[list[str], list[float]]:
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    words = sorted(
        {
            "".join(rng.choice(letters[: 10 + i % 16]) for _ in range(rng.randint(2, 10)))
            for i in range(size * 2)
        }
    )[:size]
    rng.shuffle(words)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]  # Zipf, like a natural language
    return words, weights


def build_archive(home: Path, megabytes: float, seed: int = 1) -> tuple[int, list[str]]:
    """Session files and a HISTORY.md of about `megabytes` MB; (bytes written, the vocabulary)."""
    os.environ["NANOBOT_HOME"] = str(home)
    from nanobot.memory.store import MemoryStore
    from nanobot.session.store import SessionStore

    rng = random.Random(seed)
    words, weights = _vocabulary(rng, 30_000)
    cum = list(
        itertools.accumulate(weights)
    )  # (what choices() computes from weights on every call)
    store = SessionStore(home / "sessions")
    memory = MemoryStore(home / "workspace")
    target = int(megabytes * 1e6)
    written = 0
    start = datetime(2025, 1, 1, 9, 0)
    session_no = 0
    while written < target:
        session = store.open(f"cli:s{session_no}")
        when = start + timedelta(hours=7 * session_no)
        batch = []
        for i in range(200):
            text = " ".join(rng.choices(words, cum_weights=cum, k=rng.randint(8, 120)))
            role = "user" if i % 2 == 0 else "assistant"
            batch.append(
                {
                    "role": role,
                    "content": text,
                    "timestamp": (when + timedelta(minutes=i)).isoformat(),
                }
            )
        store.append(session, batch)
        written = (
            written + session.path.stat().st_size if session_no else session.path.stat().st_size
        )
        store.close(session)
        if session_no % 10 == 0:
            summary = " ".join(rng.choices(words, cum_weights=cum, k=150))
            memory.append_history(f"[{when:%Y-%m-%d %H:%M}] {summary}")
        session_no += 1
    return written + memory.history_file.stat().st_size, words


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mb", type=float, default=100.0, help="size of the synthetic archive in MB"
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--dir", type=Path, default=None, help="keep the archive here (default: a temp folder)"
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="use the archive already in --dir (its index is rebuilt)",
    )
    parser.add_argument(
        "--keep-index", action="store_true", help="with --reuse: keep its index too (queries only)"
    )
    args = parser.parse_args()
    home = args.dir or Path(tempfile.mkdtemp(prefix="bench-recall-"))
    t0 = time.perf_counter()
    if args.reuse and (home / "sessions").is_dir():
        os.environ["NANOBOT_HOME"] = str(home)
        words, _ = _vocabulary(random.Random(1), 30_000)
        source_bytes = sum(p.stat().st_size for p in (home / "sessions").glob("*.jsonl"))
        source_bytes += (home / "workspace/memory/HISTORY.md").stat().st_size
        for stale in home.glob("recall.sqlite3*"):
            if not args.keep_index:
                stale.unlink()
    else:
        source_bytes, words = build_archive(home, args.mb)
    print(
        f"archive: {source_bytes / 1e6:,.1f} MB of session JSONL + HISTORY.md in {home} "
        f"(ready in {time.perf_counter() - t0:.0f} s)"
    )

    from nanobot.memory.recall_index import RecallIndex
    from nanobot.session.store import SessionStore

    index_path = home / "recall.sqlite3"
    index = RecallIndex(
        index_path, sessions=home / "sessions", history=home / "workspace/memory/HISTORY.md"
    )
    t0 = time.perf_counter()
    c0 = time.process_time()
    k0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = [0.0]
    print(f"load average before the build: {os.getloadavg()[0]:.1f}")

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 5:
            last[0] = time.perf_counter()
            print(f"  indexing: {done / 1e6:,.0f} / {total / 1e6:,.0f} MB", file=sys.stderr)

    index.refresh(progress=progress)
    build = time.perf_counter() - t0
    main_cpu = time.process_time() - c0
    k1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    helper_cpu = k1.ru_utime + k1.ru_stime - k0.ru_utime - k0.ru_stime
    cpu = main_cpu + helper_cpu
    rate = source_bytes / build
    print(
        f"build: {build:.1f} s wall, {cpu:.1f} s CPU ({main_cpu:.1f} inserting, {helper_cpu:.1f} in the "
        f"helper process that parses and masks); {rate / 1e6:.2f} MB/s wall -> 1 GB in {1e9 / rate / 60:.1f} "
        f"min; on 2 free cores the wall is about the larger of the two: 1 GB in "
        f"{1e9 / source_bytes * max(main_cpu, helper_cpu) / 60:.1f} min (linear extrapolation)"
    )
    load = os.getloadavg()
    print(
        f"load average at the end of the build: {load[0]:.1f} (1 min) / {load[1]:.1f} (5 min) / {load[2]:.1f} "
        f"(15 min) on {os.cpu_count()} cores"
    )
    stats = index.stats()
    index.close()
    index = RecallIndex(
        index_path, sessions=home / "sessions", history=home / "workspace/memory/HISTORY.md"
    )
    index.refresh()  # nothing new: the steady state
    size = sum(os.path.getsize(p) for p in home.glob("recall.sqlite3*"))
    print(
        f"index: {size / 1e6:,.1f} MB = {size / source_bytes:.2f}x the {source_bytes / 1e6:,.1f} MB it covers "
        f"({stats['units']:,} units)"
    )

    rng = random.Random(2)
    queries = []
    for _ in range(args.queries):
        k = rng.randint(1, 3)
        queries.append(
            " ".join(rng.choice(words[:200] if rng.random() < 0.3 else words) for _ in range(k))
        )

    def figures(values: list[float]) -> str:
        values = sorted(values)
        return (
            f"p50 {statistics.median(values):.1f}, p95 {values[max(0, int(len(values) * 0.95) - 1)]:.1f}, "
            f"max {values[-1]:.1f}"
        )

    import asyncio

    from nanobot.memory import recall_index as recall_module
    from nanobot.tools.base import ToolContext
    from nanobot.tools.recall import SearchHistoryTool

    tool = SearchHistoryTool(ToolContext(workspace=home / "workspace"))
    scans = [0]
    plan = recall_module.RecallIndex._plan

    def counted_plan(self: Any, db: Any, *, for_refresh: bool) -> Any:
        found = plan(self, db, for_refresh=for_refresh)
        scans[0] += bool(for_refresh and found[3])
        return found

    recall_module.RecallIndex._plan = counted_plan  # type: ignore[method-assign]  # (counts full scans)
    for label, call in (
        (
            "search alone (find, read the hits and neighbours back)",
            lambda q: index.search(q, limit=10),
        ),
        (
            "what search_history pays per call (the tool: catch-up through the journal, search, rendering)",
            lambda q: asyncio.run(tool.run(query=q, limit=10)),
        ),
    ):
        wall, cpu = [], []
        scans[0] = 0
        for query in queries:
            q0, c0 = time.perf_counter(), time.process_time()
            call(query)
            wall.append((time.perf_counter() - q0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        print(
            f"query, {label}: wall {figures(wall)} ms; CPU {figures(cpu)} ms; over {len(queries)} queries "
            f"at {source_bytes / 1e6:,.0f} MB ({scans[0]} full scans of the folder among them), "
            f"load average {os.getloadavg()[0]:.1f}"
        )
    wall, cpu = [], []
    for _ in range(5):
        q0, c0 = time.perf_counter(), time.process_time()
        db = index._connect()  # (what _plan does when the journal cannot vouch, without the mark)
        index._changed(
            {p: (i, d) for p, i, d in db.execute("SELECT path, inode, done FROM sources")}
        )
        wall.append((time.perf_counter() - q0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
    print(
        f"one full scan of the folder (a call pays it at most every 5 minutes, or after a session file "
        f"was created, deleted or replaced): wall {statistics.median(wall):.0f} ms, CPU "
        f"{statistics.median(cpu):.0f} ms (median of 5), load average {os.getloadavg()[0]:.1f}"
    )

    from nanobot.memory.recall_journal import note_change
    from nanobot.session import store as store_module

    store = SessionStore(home / "sessions")
    session = store.open("cli:s0")
    appends: dict[bool, list[float]] = {True: [], False: []}
    catchups, notes = [], []
    for i in range(100):
        journal = i % 2 == 0  # turns alternate: with the journal line, and without it (as before)
        store_module.note_change = note_change if journal else (lambda path: None)  # type: ignore[attr-defined]
        turn = [
            {"role": "user", "content": f"turn {i} " + " ".join(rng.choices(words, k=40))},
            {"role": "assistant", "content": " ".join(rng.choices(words, k=80))},
        ]
        a0 = time.perf_counter()
        store.append(session, turn)
        appends[journal].append((time.perf_counter() - a0) * 1000)
        if journal:
            r0 = time.perf_counter()
            report = index.refresh()
            catchups.append((time.perf_counter() - r0) * 1000)
        else:
            note_change(session.path)  # (the line the other turn wrote; kept out of its time)
            report = index.refresh()
        assert report.complete
    store_module.note_change = note_change
    for _ in range(200):
        n0 = time.perf_counter()
        note_change(session.path)
        notes.append((time.perf_counter() - n0) * 1000)
    store.close(session)
    index.close()

    def p95(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.95) - 1]

    print(
        f"per turn: SessionStore.append with the journal line {statistics.median(appends[True]):.2f} ms "
        f"(p95 {p95(appends[True]):.2f}), without it (before) {statistics.median(appends[False]):.2f} ms "
        f"(p95 {p95(appends[False]):.2f}) (medians of 50 alternating turns; one write + fsync each); the "
        f"journal line alone {statistics.median(notes) * 1000:.0f} us (median of 200, p95 "
        f"{p95(notes) * 1000:.0f} us); the next search's catch-up for one turn "
        f"{statistics.median(catchups):.2f} ms (median, p95 {p95(catchups):.2f} ms); load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    if args.dir is None:
        shutil.rmtree(home, ignore_errors=True)  # (an archive of --mb megabytes and its index)


if __name__ == "__main__":
    main()
