"""The thorough tier (tests/conftest.py): the whole-suite run leaves the cases marked thorough out,
`--thorough` adds them, `-m thorough` runs them alone, and a file named on the command line runs
all its cases, with and without xdist's workers. Judged by which inner cases ran: the files they
touch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

INNER = "TEST_TIER_INNER"  # the folder the inner cases touch their names in
HERE = Path(__file__)
TESTS = HERE.parent


inner_only = pytest.mark.skipif(
    not os.environ.get(INNER), reason="run by the tests below, in an inner pytest"
)
outer_only = pytest.mark.skipif(bool(os.environ.get(INNER)), reason="the inner run")


@inner_only
@pytest.mark.parametrize("case", ["everyday", pytest.param("thorough", marks=pytest.mark.thorough)])
def test_inner_case(case):
    (Path(os.environ[INNER]) / case).touch()


def _ran(tmp_path: Path, *args: str, whole_suite: bool = True) -> set[str]:
    """Which inner cases ran: a whole-suite run (no paths, every other entry of tests/ ignored, so
    only this file is collected) or this file named, with `args`."""
    out = tmp_path / "ran"
    out.mkdir()
    if whole_suite:
        where = [f"--ignore={p}" for p in sorted(TESTS.iterdir()) if p.name != HERE.name]
    else:
        where = [str(HERE)]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, *where],
        env={**os.environ, INNER: str(out)},
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode in (0, 5), run.stdout[-3000:] + run.stderr[-2000:]
    return {p.name for p in out.iterdir()}


@outer_only
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-p", "no:xdist"], {"everyday"}),
        (["-p", "no:xdist", "--thorough"], {"everyday", "thorough"}),
        (["-p", "no:xdist", "-m", "thorough"], {"thorough"}),
    ],
    ids=["whole-suite", "with-thorough", "thorough-alone"],
)
def test_the_whole_suite_leaves_the_thorough_cases_to_their_tier(tmp_path, args, expected):
    assert _ran(tmp_path, *args) == expected


@outer_only
@pytest.mark.thorough  # the same rule on xdist's path: a whole-suite run with workers costs ~7 CPU-s
def test_the_workers_of_a_whole_suite_run_leave_them_out_too(tmp_path):
    assert _ran(tmp_path, "-n", "1") == {"everyday"}


@outer_only
def test_a_file_named_on_the_command_line_runs_all_its_cases(tmp_path):
    assert _ran(tmp_path, "-p", "no:xdist", whole_suite=False) == {"everyday", "thorough"}
