"""The autouse fixture strips every provider key and every NANOBOT_ variable a developer exported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from nanobot.provider_table import PROVIDERS

PROBE = """
import os

from nanobot.config import load_config


def test_probe():
    leaked = sorted(n for n in os.environ if n.endswith("_API_KEY") or
                    (n.startswith("NANOBOT_") and n != "NANOBOT_HOME"))
    assert leaked == []
    assert load_config().agents.defaults.model != "leaked/model"
"""


def test_exported_keys_and_nanobot_variables_do_not_reach_a_test(tmp_path):
    for name in ("conftest.py", "host_procs.py"):  # the fixture file and the helper it imports
        shutil.copy(Path(__file__).parent / name, tmp_path / name)
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = dict(os.environ)
    keys = {spec.env_key for spec in PROVIDERS if spec.env_key}
    assert {"GROQ_API_KEY", "MINIMAX_API_KEY", "LM_STUDIO_API_KEY"} <= keys
    env.update({name: "sk-leaked-0000" for name in keys})
    env.update(
        {
            "BRAVE_API_KEY": "brave-leaked",
            "NANOBOT_AGENTS__DEFAULTS__MODEL": "leaked/model",
            "NANOBOT_API_KEY": "sk-leaked",
            "NANOBOT_SOMETHING_NEW": "x",
        }
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path / "test_probe.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
