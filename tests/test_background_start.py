"""A suite started in the background (SIGINT ignored, as a shell leaves it after `&`) still gives
the processes its tests start the default Ctrl-C (tests/conftest.py), so the Ctrl-C tests hold."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

INNER = "NANOBOT_TEST_BACKGROUND_INNER"


def _sigint_ignored(status: str) -> bool:
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


@pytest.mark.skipif(
    not os.environ.get(INNER),
    reason="run by the test below, in a pytest started with SIGINT ignored",
)
def test_a_child_of_the_inner_run_gets_the_default_sigint():
    status = subprocess.run(
        ["cat", "/proc/self/status"], capture_output=True, text=True, check=True
    ).stdout
    assert not _sigint_ignored(status)


def test_a_suite_started_with_sigint_ignored_hands_its_children_the_default():
    here = Path(__file__)
    inner = subprocess.run(
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
            f"{here}::test_a_child_of_the_inner_run_gets_the_default_sigint",
        ],
        env={**os.environ, INNER: "1"},
        cwd=here.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert "1 passed" in inner.stdout, inner.stdout + inner.stderr
