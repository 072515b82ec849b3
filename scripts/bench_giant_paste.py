"""What a pasted giant "word" costs: token counting, and a whole one-shot turn with it as the message.

    python scripts/bench_giant_paste.py [--mb 1 5] [--no-turn]

For each size it prints the seconds and the peak memory (a fresh process each) of counting
(a) one line of that many bytes without a space, and (b) ordinary prose of the same size, with
the real cl100k encoder; then, unless --no-turn, the same two pasted into `nanobot agent` on stdin
against the local fake LLM server (whole process). A run of GIANT_RUN_CHARS characters or more
with no whitespace is counted by its bytes (nanobot/tokens.py), so (a) costs about what (b) does.
These print figures; they are not tests.
"""

from __future__ import annotations

import argparse
import random
import string
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import _maxrss_of  # noqa: E402
from bench_workload import BenchHome, nanobot_argv, prose  # noqa: E402

COUNT_CHILD = r"""
import random, resource, string, sys, time
from bench_workload import prose
from nanobot.tokens import TokenCounter, load_offline_encoding
kind, size = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
if kind == "word":
    text = "".join(rng.choices(string.ascii_letters + string.digits, k=size))
else:
    text = prose(rng, size)
encode, reason = load_offline_encoding()
assert encode is not None, reason
start = time.perf_counter()
n = TokenCounter(encode).count_text(text)
took = time.perf_counter() - start
print(f"{n} {took:.3f} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}")
"""


def text_of(kind: str, size: int) -> str:
    rng = random.Random(1)
    if kind == "word":
        return "".join(rng.choices(string.ascii_letters + string.digits, k=size))
    return prose(rng, size)


def count(kind: str, size: int) -> str:
    done = subprocess.run(
        [sys.executable, "-c", COUNT_CHILD, kind, str(size)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
        check=True,
    )
    n, took, rss = done.stdout.split()
    return f"{int(n):>10,} tokens counted in {float(took):6.2f} s, peak {int(rss) / 1024:6.0f} MiB"


def turn(kind: str, size: int) -> str:
    with BenchHome() as home:
        start = time.monotonic()
        code, rss = _maxrss_of(
            [*nanobot_argv(), "agent", "--no-markdown"],
            home.env,
            stdin=text_of(kind, size).encode(),
        )
        took = time.monotonic() - start
    return f"exit {code}, {took:6.2f} s, peak {rss / 1024:6.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mb", type=float, nargs="+", default=[1, 5], help="sizes in MB (default 1 5)"
    )
    parser.add_argument("--no-turn", action="store_true", help="only count; no whole `agent` turn")
    args = parser.parse_args()
    for mb in args.mb:
        size = int(mb * 1_000_000)
        for kind, label in (("word", "one line, no spaces"), ("prose", "ordinary prose")):
            print(f"{mb:g} MB {label:<20} count: {count(kind, size)}", flush=True)
            if not args.no_turn:
                print(f"{mb:g} MB {label:<20} agent: {turn(kind, size)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
