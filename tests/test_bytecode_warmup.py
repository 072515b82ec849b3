"""The fresh-clone warm-up (tests/bytecode_warmup.py) writes the very caches pytest would, so a
worker loads them instead of rewriting each module again."""

from __future__ import annotations

import marshal
import subprocess
import sys
from pathlib import Path

import bytecode_warmup

MODULE = """
def test_numbers():
    left, right = 2, 3
    assert left + 1 == right + 1
"""


def _pytest(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "--rootdir",
            str(folder),
            "-c",
            "/dev/null",
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_warm_up_writes_the_cache_pytest_writes_and_pytest_then_loads_it(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "conftest.py").write_text("import os\n")
    (tests / "test_numbers.py").write_text(MODULE)
    (tests / "helper.py").write_text("X = 1\n")  # not a test module: compiled by the plain import
    assert [p.name for p in bytecode_warmup.uncached_test_modules(tests)] == [
        "conftest.py",
        "test_numbers.py",
    ]

    # pytest's own cache, then the warm-up's in its place
    first = _pytest(tests)
    assert "1 failed" in first.stdout, first.stdout + first.stderr
    assert bytecode_warmup.uncached_test_modules(tests) == []
    caches = {p: p.read_bytes() for p in (tests / "__pycache__").glob("*-pytest-*.pyc")}
    assert len(caches) == 2
    for cache in caches:
        cache.unlink()
    subprocess.run(
        [
            sys.executable,
            bytecode_warmup.__file__,
            *map(str, bytecode_warmup.uncached_test_modules(tests)),
        ],
        check=True,
        timeout=60,
    )
    assert {p: p.read_bytes() for p in (tests / "__pycache__").glob("*-pytest-*.pyc")} == caches

    # loaded, not rewritten again: code under the cache's header (magic, flags, the source's hash) runs
    test_cache = next(p for p in caches if p.name.startswith("test_"))
    test_cache.write_bytes(
        caches[test_cache][:16] + marshal.dumps(compile("def test_from_cache(): pass", "x", "exec"))
    )
    second = _pytest(tests)
    assert "1 passed" in second.stdout, second.stdout
