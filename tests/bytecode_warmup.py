"""Writes the bytecode caches a fresh clone lacks, once, before the whole suite's workers start.

Without them each of the xdist workers rewrites the asserts of every test module and compiles
it (pytest keeps the result in `__pycache__/<module>.<tag>-pytest-<version>.pyc`), and compiles the
nanobot modules it imports: about 3 CPU-s more collection per worker. Here the rewriting is done
once, by pytest's own rewriter, split between two processes (this file, run with a list of files)
while the controller compiles nanobot; the workers then find every cache written and only load it.
A checkout whose caches are there (every run after the first) skips it. The rewriter is pytest's
private function: if it is missing or fails, there is no warm-up and the workers compile as before.
"""

from __future__ import annotations

import compileall
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

TESTS = Path(__file__).parent
PACKAGE = TESTS.parent / "nanobot"
PROCESSES = 2  # the machine the suite is sized for has two cores
WORTH_IT = 10  # test modules without a cache; fewer (a few edited files) are left to the workers


def _pytest_cache(source: Path) -> Path | None:
    try:
        from _pytest.assertion.rewrite import PYC_TAIL, get_cache_dir
    except ImportError:
        return None
    return get_cache_dir(source) / (source.stem + PYC_TAIL)


def uncached_test_modules(root: Path = TESTS) -> list[Path]:
    """Test modules and conftest files under `root` whose assert-rewritten cache does not exist yet."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if not (path.name.startswith("test_") or path.name == "conftest.py"):
            continue
        cache = _pytest_cache(path)
        if cache is None:
            return []
        if not cache.exists():
            found.append(path)
    return found


def _groups(paths: list[Path], parts: int) -> list[list[Path]]:
    """The files in `parts` groups of about the same size (rewriting costs by the byte)."""
    groups: list[list[Path]] = [[] for _ in range(parts)]
    sizes = [0] * parts
    for path in sorted(paths, key=lambda p: -p.stat().st_size):
        smallest = sizes.index(min(sizes))
        groups[smallest].append(path)
        sizes[smallest] += path.stat().st_size
    return [g for g in groups if g]


def warm(env: Mapping[str, str]) -> None:
    """Write the caches if enough are missing; `env` is the tests' (no real keys)."""
    modules = uncached_test_modules()
    if len(modules) < WORTH_IT:
        return
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, *map(str, group)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for group in _groups(modules, PROCESSES)
    ]
    try:
        compileall.compile_dir(PACKAGE, quiet=2)
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _rewrite(paths: list[str]) -> None:
    """Rewrite and cache each file as pytest's import hook would (default settings)."""
    from _pytest.assertion.rewrite import _rewrite_test, _write_pyc

    class State:  # what _write_pyc reports a failed write to
        @staticmethod
        def trace(message: str) -> None:
            pass

    for name in paths:
        source = Path(name)
        cache = _pytest_cache(source)
        assert cache is not None
        cache.parent.mkdir(exist_ok=True)
        source_hash, code = _rewrite_test(source, None)  # type: ignore[arg-type]
        _write_pyc(State, code, source_hash, cache)  # type: ignore[arg-type]


if __name__ == "__main__":
    _rewrite(sys.argv[1:])
