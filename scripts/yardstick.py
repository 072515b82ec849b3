"""The machine's speed right now: seconds a plain 10-million-step Python loop takes.

    python scripts/yardstick.py

Quote it beside any timing (the suite's, a benchmark's): this shared VM's speed drifts by up to a
factor of two from hour to hour, and the loop shows which state it is in.
"""

from __future__ import annotations

import time


def loop_seconds(steps: int = 10_000_000) -> float:
    start = time.perf_counter()
    i = 0
    while i < steps:
        i += 1
    return time.perf_counter() - start


if __name__ == "__main__":
    print(f"10-million-step loop: {loop_seconds():.2f} s")
