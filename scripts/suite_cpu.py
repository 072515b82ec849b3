"""Where the test suite's CPU goes: every process a test starts, counted, per folder and per test.

    python scripts/suite_cpu.py                      # the whole suite, -n 2
    python scripts/suite_cpu.py -- tests/agent -n 0  # any pytest arguments after --
    python scripts/suite_cpu.py --save rows.jsonl -- -q  # also keep each test's row

Runs pytest inside a cpuacct cgroup of its own (cgroup v1, as root); each pytest process (the
xdist controller, each worker) then moves into a child cgroup, so the CPU of everything a test
starts is counted, whether or not it is ever reaped. Per test, the worker's cgroup is read before
and after it, and so is the worker's own CPU (`time.process_time`): the difference is what the
processes the test started spent. The CLI runs the controller's fork servers fork for a test run
in the controller's cgroup: they count in the total, and each server reports its child's CPU
(tests/forkserver.py), which is the test's third figure. Prints the yardstick (a 10-million-step
loop) and the load average before and after, the wall time, the total CPU seconds, the CPU seconds
per folder and the slowest tests, each split three ways. On a shared machine compare CPU seconds:
the wall time moves with the load.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup/cpuacct")
OUT = "SUITE_CPU_OUT"


def _own_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(","):
            return CGROUPS / path.lstrip("/")
    raise SystemExit("no cpuacct cgroup (cgroup v1) here")


def _join(cgroup: Path) -> None:
    cgroup.mkdir(exist_ok=True)
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))


def _usage(cgroup: Path) -> float:
    return int((cgroup / "cpuacct.usage").read_text()) / 1e9


# -- the pytest plugin (`-p suite_cpu`): each pytest process in a cgroup of its own ---------------

_mine: Path | None = None


def pytest_configure(config: object) -> None:
    global _mine
    if os.environ.get(OUT):
        _mine = _own_cgroup() / f"pytest-{os.getpid()}"
        _join(_mine)


def _forked_cpu() -> float:
    """CPU of the CLI runs this process collected from the controller's fork servers so far."""
    forkserver = sys.modules.get("forkserver")
    return getattr(forkserver, "attached_children_cpu", 0.0)


def _record(row: dict) -> None:
    with open(os.environ[OUT], "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item: pytest.Item, nextitem: object):  # type: ignore[no-untyped-def]
        if _mine is None:
            yield
            return
        before, own, forked = _usage(_mine), time.process_time(), _forked_cpu()
        yield
        _record(
            {
                "test": item.nodeid,
                "cpu": _usage(_mine) - before,
                "own": time.process_time() - own,
                "forked": _forked_cpu() - forked,
                "pid": str(os.getpid()),
            }
        )
except ImportError:  # run as a script outside the test venv: the plugin part is not needed
    pass


# -- the runner -----------------------------------------------------------------------------------


YARDSTICK = (
    "import time;t=time.time()\nfor i in range(10_000_000): pass\nprint(f'{time.time()-t:.2f}')"
)


def yardstick() -> str:
    """The 10-million-step loop at module level (0.59 s on the idle machine), and the load."""
    took = subprocess.run(
        [sys.executable, "-c", YARDSTICK], capture_output=True, text=True
    ).stdout.strip()
    return f"yardstick {took} s, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}"


def _split(row: dict) -> tuple[float, float, float]:
    """A test's CPU: in its pytest process, in processes it started, in CLI runs forked for it."""
    own = min(row.get("own", row["cpu"]), row["cpu"])
    return own, row["cpu"] - own, row.get("forked", 0.0)


def _remove(cgroup: Path) -> None:
    """The emptied cgroups, children first (best effort: a process left running keeps its own)."""
    for child in sorted((p for p in cgroup.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        try:
            child.rmdir()
        except OSError:
            pass


def main(pytest_args: list[str], save: str | None = None) -> int:
    root = _own_cgroup() / f"suite-{os.getpid()}"
    _join(root)
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as out:
        env = {
            **os.environ,
            OUT: out.name,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")])
            ),
        }
        print(yardstick(), flush=True)
        started = time.monotonic()
        code = subprocess.call(
            [sys.executable, "-m", "pytest", "-p", "suite_cpu", *pytest_args], env=env
        )
        wall = time.monotonic() - started
        print(yardstick())
        rows = [json.loads(line) for line in out]
    folders: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for row in rows:
        parts = row["test"].split("::")[0].split("/")
        folder = "/".join(parts[:2]) if len(parts) > 2 else "tests/ itself"
        for i, value in enumerate((1, *_split(row))):
            folders[folder][i] += value
    print(
        f"pytest exit {code}; {len(rows)} tests; {wall:.1f} s wall; {_usage(root):.1f} CPU-s in all "
        f"(every process); {sum(r['cpu'] for r in rows):.1f} CPU-s inside the tests"
    )
    own, started, forked = (sum(_split(r)[i] for r in rows) for i in range(3))
    print(
        f"the tests' CPU-s: {own:.1f} in the pytest processes, {started:.1f} in processes they "
        f"started themselves, {forked:.1f} in CLI runs forked for them by the controller's fork "
        f"servers (these count in the total, not inside the tests)"
    )
    print(f"  {'folder':24} {'tests':>5} {'pytest':>8} {'started':>8} {'forked':>8}  (CPU-s)")
    for folder, (count, *cpu) in sorted(folders.items(), key=lambda kv: -sum(kv[1][1:])):
        print(f"  {folder:24} {count:5.0f} {cpu[0]:8.1f} {cpu[1]:8.1f} {cpu[2]:8.1f}")
    print("slowest tests (CPU-s: in all, in pytest, started, forked):")
    for row in sorted(rows, key=lambda r: -sum(_split(r)))[:30]:
        mine, started, forked = _split(row)
        print(
            f"  {mine + started + forked:6.2f} {mine:6.2f} {started:6.2f} {forked:6.2f}  {row['test']}"
        )
    inside = collections.Counter[str]()
    for row in rows:
        inside[row.get("pid", "")] += row["cpu"]
    print("per pytest process (CPU-s in all, of which inside its tests):")
    for cgroup in sorted(root.rglob("pytest-*"), key=lambda c: len(c.parts)):
        pid = cgroup.name.removeprefix("pytest-")
        nested = sum(_usage(c) for c in cgroup.glob("pytest-*"))  # a worker's, in the controller's
        print(f"  {cgroup.name:16} {_usage(cgroup) - nested:8.1f} {inside[pid]:8.1f}")
    if save:
        Path(save).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"each test's row: {save}")
    _join(root.parent)
    _remove(root)
    try:
        root.rmdir()
    except OSError:
        pass
    return code


if __name__ == "__main__":
    args = sys.argv[1:]
    mine = args[: args.index("--")] if "--" in args else args
    save = mine[mine.index("--save") + 1] if "--save" in mine else None
    sys.exit(main(args[args.index("--") + 1 :] if "--" in args else ["-q", "-n", "2"], save))
