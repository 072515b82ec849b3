"""Benchmark `nanobot history grep` against `grep -c` on a generated HISTORY.md.

    python scripts/bench_history_grep.py --size-mb 100

Writes a synthetic HISTORY.md (dated entries separated by blank lines) into a temp folder,
then times, for a few patterns: the in-process Python engine (nanobot.memory.history.grep), the
ripgrep engine in process (history_log.grep_fast_output: what the command prints when piped), the
real command in a subprocess (`nanobot history grep`, output to /dev/null), `grep -c` and `rg -c`.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

WORDS = (
    "user asked about the project deadline and we discussed options for the release "
    "notes meeting calendar python rust memory tokens budget weather lisbon porto trains "
    "coffee tea review tests refactor database migration server logs error fix deploy"
).split()


def generate(path: Path, size_mb: float, seed: int = 1) -> int:
    """Write about `size_mb` MB of entries; returns the entry count."""
    rng = random.Random(seed)
    target = int(size_mb * 1024 * 1024)
    when = datetime(2020, 1, 1, 8, 0)
    written = count = 0
    with open(path, "w", encoding="utf-8") as fh:
        batch = []
        while written < target:
            when += timedelta(minutes=rng.randint(5, 600))
            sentences = []
            for _ in range(rng.randint(2, 6)):
                sentences.append(
                    " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 18))).capitalize()
                    + "."
                )
            if rng.random() < 0.0005:
                sentences.append("The needle-in-the-haystack marker XYZZY was mentioned.")
            entry = f"[{when:%Y-%m-%d %H:%M}] " + " ".join(sentences) + "\n\n"
            batch.append(entry)
            written += len(entry)
            count += 1
            if len(batch) >= 5000:
                fh.write("".join(batch))
                batch.clear()
        fh.write("".join(batch))
    return count


def timed(runs: int, fn) -> tuple[float, float, object]:
    """(best, median, last result) of `runs` calls."""
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times), result


def best_of(runs: int, fn) -> tuple[float, object]:
    best, _, result = timed(runs, fn)
    return best, result


def command_argv() -> list[str]:
    """The real `nanobot` command if the main CLI mounts history; else the sub-app module."""
    probe = subprocess.run(
        [sys.executable, "-m", "nanobot", "history", "--help"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        return [sys.executable, "-m", "nanobot", "history", "grep"]
    return [sys.executable, "-m", "nanobot.cli.memory_cmd", "history", "grep"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size-mb", type=float, default=100.0, help="size of the generated file (default 100)"
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="best of N runs per measurement (default 3)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the generated file and print its path"
    )
    args = parser.parse_args()

    from nanobot.memory import history as history_log

    tmp = Path(tempfile.mkdtemp(prefix="nanobot-bench-"))
    workspace = tmp / "workspace"
    path = workspace / "memory" / "HISTORY.md"
    path.parent.mkdir(parents=True)
    t = time.perf_counter()
    entries = generate(path, args.size_mb)
    size = path.stat().st_size
    print(
        f"generated {size / 1e6:.1f} MB, {entries:,} entries in {time.perf_counter() - t:.1f}s: {path}"
    )

    argv = command_argv()
    print(f"command: {' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))}")
    grep_bin = shutil.which("grep")
    env = {**os.environ, "LC_ALL": "C"}
    cases = [
        ("rare literal", "XYZZY", []),
        ("rare literal -i", "xyzzy", ["-i"]),
        ("common word", "lisbon", []),
        ("regex", r"deadline \w+ release", []),
        ("no match", "qqqzzz", []),
    ]
    rows = []
    for label, pattern, flags in cases:
        ic = "-i" in flags
        t_fn, found = best_of(args.runs, lambda: history_log.grep(path, pattern, ignore_case=ic))
        t_fast, fast = best_of(
            args.runs, lambda: history_log.grep_fast_output(path, pattern, ignore_case=ic)
        )
        assert fast is None or fast[0] == "".join(e.text + "\n\n" for e in found).encode(), (
            "engines differ"
        )
        t_cmd, med_cmd, _ = timed(
            args.runs,
            lambda: subprocess.run(
                [*argv, pattern, *flags, "-w", str(workspace)], stdout=subprocess.DEVNULL, env=env
            ),
        )
        t_grep, out = (
            best_of(
                args.runs,
                lambda: subprocess.run(
                    [grep_bin, "-c", "-E", *flags, pattern, str(path)],
                    capture_output=True,
                    text=True,
                    env=env,
                ),
            )
            if grep_bin
            else (float("nan"), None)
        )
        lines = out.stdout.strip() if out is not None else "-"
        rg_bin = history_log._rg_binary()
        t_rg, _ = (
            best_of(
                args.runs,
                lambda: subprocess.run(
                    [rg_bin, "-c", *flags, pattern, str(path)], capture_output=True
                ),
            )
            if rg_bin
            else (float("nan"), None)
        )
        rows.append(
            (
                label,
                len(found),
                lines,
                t_fn,
                t_fast if fast is not None else float("nan"),
                t_cmd,
                med_cmd,
                t_grep,
                t_rg,
            )
        )

    t_iter, n_iter = best_of(1, lambda: sum(1 for _ in history_log.iter_entries(path)))
    t_tail, _ = best_of(args.runs, lambda: history_log.tail(path, 10))

    print()
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"{'pattern':<17}{'entries':>9}{'grep lines':>12}{'python':>9}{'rg engine':>11}{'command':>10}"
        f"{'(median)':>10}{'grep -c':>10}{'rg -c':>8}"
    )
    for label, n, lines, t_fn, t_fast, t_cmd, med_cmd, t_grep, t_rg in rows:
        print(
            f"{label:<17}{n:>9,}{lines:>12}{t_fn:>8.3f}s{t_fast:>10.3f}s{t_cmd:>9.3f}s{med_cmd:>9.3f}s"
            f"{t_grep:>9.3f}s{t_rg:>7.3f}s"
        )
    print(
        f"\niter_entries over all {n_iter:,} entries: {t_iter:.2f}s; tail -n 10: {t_tail * 1000:.1f} ms"
    )
    t_ver, _ = best_of(
        args.runs,
        lambda: subprocess.run([sys.executable, "-m", "nanobot", "--version"], capture_output=True),
    )
    print(
        f"best of {args.runs} (and the command's median); the command includes Python start-up "
        f"(`nanobot --version`: {t_ver:.3f}s)"
    )
    if args.keep:
        print(f"kept: {path}")
    else:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
