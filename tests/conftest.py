"""Shared fixtures. Every test runs in a throwaway home with no real API keys."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from nanobot.providers.registry import scrubbed_env_names

from host_procs import host_pids


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """NANOBOT_HOME and HOME point into tmp_path; real keys are removed."""
    for name in scrubbed_env_names(os.environ):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NANOBOT_HOME", str(home / ".nanobot"))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    for proxy in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    return home / ".nanobot"


@pytest.fixture
def fake_llm():
    """A real HTTP server on 127.0.0.1 speaking the OpenAI and Anthropic protocols."""
    from nanobot.fakellm import FakeLLMServer

    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def nanobot_cmd() -> list[str]:
    """The argv prefix that runs the real `nanobot` command in a subprocess."""
    return [sys.executable, "-m", "nanobot"]


@pytest.fixture
def configure(isolated_home: Path, fake_llm):
    """Write a config.json pointing nanobot at the fake server; returns a function taking overrides."""
    import json

    def write(protocol: str = "openai", **defaults) -> Path:
        if protocol == "anthropic":
            data = {"agents": {"defaults": {"model": "anthropic/claude-test", **defaults}},
                    "providers": {"anthropic": {"apiKey": "sk-ant-test-key-123456", "apiBase": fake_llm.anthropic_base_url}}}
        else:
            data = {"agents": {"defaults": {"model": "custom/test-model", "provider": "custom", **defaults}},
                    "providers": {"custom": {"apiKey": "sk-test-key-123456", "apiBase": fake_llm.openai_base_url}}}
        isolated_home.mkdir(parents=True, exist_ok=True)
        path = isolated_home / "config.json"
        path.write_text(json.dumps(data))
        path.chmod(0o600)  # as `nanobot onboard` leaves it (a readable key file gets a warning)
        return path

    return write


@pytest.fixture
def host_sleepers():
    """Host pids of live `sleep <marker>` processes (exec's own PID namespace makes `$!` useless here)."""
    return lambda marker: host_pids(marker, command="sleep")


@pytest.fixture
def nanobot_run():
    """Runs the real `nanobot` command in this process: `nanobot_run("agent", "-m", "hi", input=...,
    env=..., cwd=...)` returns a subprocess.CompletedProcess (see tests/cli_runner.py for what is
    kept apart). Tests of what only a real process shows use `nanobot_cmd` instead."""
    from cli_runner import run_cli

    return run_cli


@pytest.fixture(scope="session")
def nanobot_forkserver():
    """Starts real `python -m nanobot` processes without paying the imports each time:
    `nanobot_forkserver.popen([*nanobot_cmd, "agent", ...], stdout=..., env=...)` returns a
    Popen-like child forked from a helper that imported nanobot once (tests/forkserver.py says what
    the child gets and what it refuses). For tests that start many processes to kill or signal."""
    import forkserver

    return forkserver.shared()  # closed when the session finishes


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    forkserver = sys.modules.get("forkserver")  # helpers use forkserver.shared() without the fixture too
    if forkserver is not None:
        forkserver.close_shared()


# The whole suite (`python -m pytest`, no paths given) runs on this many pytest-xdist workers; a
# file or test named on the command line runs in one process, as do `-n 0` and `-p no:xdist`.
# Three on this 2-core machine: a third of the suite's wall time is waiting (processes, sockets,
# timeouts), which a third worker fills (1,447 tests: 142 s on 2 workers, 122 s on 3, 129 s on 4).
WHOLE_SUITE_WORKERS = 3


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS
    worker = hasattr(config, "workerinput")  # a worker must not start workers of its own
    if (whole_suite and not worker and config.pluginmanager.hasplugin("xdist")
            and config.option.numprocesses is None and not config.getoption("usepdb", False)):
        config.option.numprocesses = WHOLE_SUITE_WORKERS
        if config.option.dist == "no":
            config.option.dist = "worksteal"  # long tests (the crash trials) do not hold up the rest


@pytest.fixture
def scripted_llm():
    """The fake LLM answered in this process (tests/scripted_llm.py): the same script, replies and
    request rules as `fake_llm`, and `scripted_llm.provider("openai" | "anthropic")`, the real
    adapter and SDK talking to it without a socket."""
    from scripted_llm import ScriptedLLM

    return ScriptedLLM()
