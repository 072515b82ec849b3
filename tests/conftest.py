"""Shared fixtures. Every test runs in a throwaway home with no real API keys."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import signal
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings
from nanobot.provider_table import scrubbed_env_names
from nanobot.providers import _sdk_on_demand

from host_procs import host_pids

_TIKTOKEN_CACHE_PREFIX = os.path.join(tempfile.gettempdir(), "nanobot-tests-tiktoken-")

# The tests write bytecode caches (`__pycache__/`, ignored by git) even where the environment says
# PYTHONDONTWRITEBYTECODE: without them each xdist worker compiles every test module (assertion
# rewriting, 5 of its 10 CPU-s of collection) and every fresh `python -m nanobot` compiles nanobot
# again. Set here, before any test module is imported or any worker or subprocess started, so all
# of them agree (the fork server refuses a child whose PYTHON* variables differ from its own).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# tiktoken keeps a copy of the cl100k ranks file in $TIKTOKEN_CACHE_DIR (else in the system's
# temporary folder, where each new venv would leave one): one throwaway folder for the whole run,
# made here, before any worker or fork server starts, so they all inherit the same value. The fork
# servers build the encoding before they fork (tests/forkserver.py) and so read this variable: a
# child with another value would be refused, and each would parse the ranks again (0.3 CPU-s).
if not os.environ.get("TIKTOKEN_CACHE_DIR", "").startswith(_TIKTOKEN_CACHE_PREFIX):
    os.environ["TIKTOKEN_CACHE_DIR"] = tempfile.mkdtemp(prefix=_TIKTOKEN_CACHE_PREFIX)
    atexit.register(
        lambda made=os.environ["TIKTOKEN_CACHE_DIR"], by=os.getpid(): (
            os.getpid() == by and shutil.rmtree(made, ignore_errors=True)
        )
    )

# The properties run hypothesis' default 100 examples each (those whose examples cost a real turn
# ask for fewer); `python -m pytest --hypothesis-profile thorough` runs 1,000 of each, for a change
# to counting, validity or masking. docs/dev/testing.md says which bugs 100 still finds.
hypothesis_settings.register_profile("thorough", max_examples=1_000)

# A suite started in the background (`python -m pytest &` in a non-interactive shell) inherits SIGINT
# ignored, and so would every nanobot it starts: the Ctrl-C tests would then see a child that
# cannot be interrupted. With a handler here, each child execs with the default disposition.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Collecting imports the test modules and with them nanobot and both SDKs (about 1.7 s per worker,
# most of it anthropic's and openai's types): nearly no garbage, so the collector is off while it
# runs. After collection what is loaded is frozen, so no collection during the tests walks those
# objects again. (This is the test run's own housekeeping; the `nanobot` command does no such thing.)
gc.disable()

# The tests import the SDKs as nanobot does: their re-export packages load on demand
# (nanobot/providers/_sdk_on_demand.py), so what the tests use is what a user's nanobot loads.
_sdk_on_demand.install()


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.freeze()
    # the tests make many short-lived objects: a young collection every 10,000 allocations instead
    # of 700 (agent, session, memory and providers: 1,566 collections, 1.1 s -> 121, 0.7 s)
    gc.set_threshold(10_000)
    gc.enable()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """NANOBOT_HOME and HOME point into tmp_path; real keys are removed."""
    for name in scrubbed_env_names(os.environ):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NANOBOT_HOME", str(home / ".nanobot"))
    for proxy in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
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
            data = {
                "agents": {"defaults": {"model": "anthropic/claude-test", **defaults}},
                "providers": {
                    "anthropic": {
                        "apiKey": "sk-ant-test-key-123456",
                        "apiBase": fake_llm.anthropic_base_url,
                    }
                },
            }
        else:
            data = {
                "agents": {
                    "defaults": {"model": "custom/test-model", "provider": "custom", **defaults}
                },
                "providers": {
                    "custom": {"apiKey": "sk-test-key-123456", "apiBase": fake_llm.openai_base_url}
                },
            }
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


# The thorough tier: cases that repeat a proof the everyday suite already makes, under another
# sandbox mechanism or policy named outright (the everyday run makes it under the one `auto` picks on
# this machine), or in more trials. They carry `pytest.mark.thorough`, and the one
# rule for them is here: the whole suite (`python -m pytest`, no paths) leaves them out; `--thorough`
# adds them, `-m thorough` runs them alone (CI runs both passes), and a file, folder or test named on
# the command line runs all its cases. docs/dev/testing.md lists what each mark leaves to the tier.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--thorough",
        action="store_true",
        help="with the whole suite, also run the cases marked thorough (CI runs them)",
    )


def _everyday_only(config: pytest.Config) -> bool:
    """True on a whole-suite run that leaves the thorough cases out (its workers are told so)."""
    if hasattr(config, "workerinput"):
        return bool(config.workerinput.get("everyday_only"))
    return (
        _whole_suite(config)
        and not config.getoption("thorough")
        and not config.getoption("markexpr", "")
    )


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["everyday_only"] = _everyday_only(node.config)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "thorough: repeats an everyday proof under another mechanism or policy, or in more trials;"
        " left out of the whole-suite run unless --thorough (see tests/conftest.py)",
    )
    if (
        hasattr(config, "workerinput")
        or not getattr(config.option, "numprocesses", None)
        or not _whole_suite(config)
    ):
        return
    # On a whole-suite run (every worker needs them) the xdist controller writes the bytecode caches
    # a fresh clone lacks (tests/bytecode_warmup.py), then starts the fork server its workers'
    # nanobot children come from, so the imports are paid once (1.4 CPU-s) rather than by each
    # worker. Their environment is the tests' (no real keys; each child gets its own on top), one
    # with the PYTHONUNBUFFERED most of the tests' children run with, one without; a child neither
    # accepts gets a server of its worker's, as without xdist. The same for the MCP tests' notes servers.
    import bytecode_warmup
    import forkserver
    import mcp_sdk

    env = {k: v for k, v in os.environ.items() if k not in scrubbed_env_names(os.environ)}
    bytecode_warmup.warm(
        env
    )  # a fresh clone's: the workers, and the servers' imports, then find them
    servers = [
        forkserver.ForkServer(env={**env, "PYTHONUNBUFFERED": "1"}),
        forkserver.ForkServer(env=mcp_sdk.sdk_env(env), preload=mcp_sdk.SDK_PRELOAD),
    ]
    if (
        env.get("PYTHONUNBUFFERED") != "1"
    ):  # for the children started with the tests' own environment
        servers.append(forkserver.ForkServer(env=env))
    for server in servers:
        config.add_cleanup(server.close)
    forkserver.offer(servers)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    forkserver = sys.modules.get(
        "forkserver"
    )  # helpers use forkserver.shared() without the fixture too
    if forkserver is not None:
        forkserver.close_shared()


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        # An xdist worker has sent every report; what it still holds is freed when it exits. Left
        # to the collector, the interpreter's last full collection walks a heap that 1,400 tests
        # built, and the run waited 2-3 s on each worker's exit.
        gc.freeze()


# The whole suite (`python -m pytest`, no paths given) runs on this many pytest-xdist workers; a
# file or test named on the command line runs in one process, as do `-n 0` and `-p no:xdist`.
# Five on this 2-core machine: part of each worker's time is waiting (processes, sockets,
# timeouts), which the extra workers fill; 3 to 6 are within the runs' spread on the everyday
# suite (docs/dev/testing.md gives the figures).
WHOLE_SUITE_WORKERS = 5


def _whole_suite(config: pytest.Config) -> bool:
    """`python -m pytest` with no paths: the run that gets the workers (and their shared helpers)."""
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    worker = hasattr(config, "workerinput")  # a worker must not start workers of its own
    if (
        _whole_suite(config)
        and not worker
        and config.pluginmanager.hasplugin("xdist")
        and not config.getoption("usepdb", False)
    ):
        if config.option.numprocesses is None:
            config.option.numprocesses = WHOLE_SUITE_WORKERS
            if config.option.dist == "no":
                config.option.dist = "loadscope"
        # one shared queue in collection order (the long tests first, below), handed out a few tests
        # at a time, so no worker is left running a long test alone at the end; also with `-n 2`
        # given, where xdist would otherwise sort the queue by each unit's number of cases
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's loadscope, with one test function's cases as the unit: they never run at the same
    time, as some watch the whole machine for their marked processes (`sleep 3131`), which a
    sibling case on another worker would also start. (loadgroup's marks no longer reach the
    scheduler under pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FunctionScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid.split("[", 1)[0]

    return FunctionScheduling(config, log)


# Tests that take seconds, run first in the whole suite, longest first, so the short ones fill in
# around them: each one's CPU seconds measured alone (all its processes, -n 0), plus the seconds it
# waits on timers and paced replies. A name is a test function ("file::name", all its parameters)
# or one case of it ("file::name[param]"). A name that no longer matches is reported.
LONG_TESTS = {
    "security/test_benign_exec.py::test_benign_corpus_runs_under_the_default_policy[bwrap]": 12.0,
    "security/test_benign_exec.py::test_benign_corpus_runs_under_the_default_policy[landlock]": 12.0,
    "security/test_benign_exec.py::test_benign_corpus_runs_under_the_default_policy[auto]": 12.0,
    "security/test_hostile_exec.py::test_hostile_corpus_leaves_no_side_effect": 26.0,
    "agent/test_working_state_crash.py::test_sigkill_during_consolidation_loses_no_checkpoint_version": 13.0,
    "session/test_crash_durability.py::test_sigkill_at_random_moments_loses_no_acknowledged_turn": 11.5,
    "agent/test_long_conversation.py::test_300_turns_at_an_8k_window": 9.5,
    "agent/test_budget_property.py::test_every_request_fits_the_window_and_is_valid": 9.0,
    "cli/test_streaming_screen.py::test_ctrl_c_under_a_heading_leaves_no_stray_copy_of_it": 6.5,
    "providers/test_sdk_on_demand.py::test_anthropic_loads_other_clouds_clients_only_when_asked_and_gives_the_same_objects": 6.0,
    "cli/test_streaming_screen.py::test_a_long_paragraph_wraps_while_it_streams": 5.5,
    "agent/test_compaction_cli.py::test_one_shot_exits_soon_after_the_answer_and_the_next_run_consolidates": 5.0,
    "security/test_without_bwrap.py::test_exec_tests_pass_with_bwrap_hidden_and_skip_its_cases": 5.0,
    "mcp/test_mcp.py::test_a_request_while_an_mcp_server_is_starting_gets_its_answer": 4.5,
    "scenarios/test_first_hour.py::test_provider_failures_say_what_happened_and_where": 4.5,
    "scenarios/test_first_hour.py::test_chat_says_it_resumed_marks_continuation_lines_and_counts_the_wait": 4.5,
    "mcp/test_mcp.py::test_an_http_server_that_dies_mid_call_is_reported_and_its_tools_then_say_so": 3.0,
    "scenarios/test_first_hour_round2.py::test_chat_status_mcp_hint_and_ctrl_c_at_the_question": 3.0,
    "test_bytecode_warmup.py::test_the_warm_up_writes_the_cache_pytest_writes_and_pytest_then_loads_it": 2.5,
    "usage/test_spend_chat.py::test_the_spawn_chain_stops_at_the_limit_in_the_chat": 2.5,
    "mcp/test_mcp.py::test_the_chat_prompt_comes_first_then_one_line_for_a_failed_server_and_the_tools": 2.5,
    "cron/test_runner.py::test_every_cron_and_at_jobs_fire_on_time_each_in_its_own_session": 2.5,
    "memory/test_history.py::test_fast_grep_prints_what_the_python_engine_prints_however_entries_end": 2.0,
    "scenarios/test_recall_cli.py::test_kill_9_while_indexing_loses_nothing_and_the_next_start_repairs_it": 2.0,
    "agent/test_budget_count_property.py::test_each_message_counts_at_least_what_the_provider_counts_of_it": 2.0,
    "agent/test_budget_count_property.py::test_our_count_is_never_below_the_providers": 2.0,
    "providers/test_sdk_on_demand.py::test_the_client_loads_a_fraction_of_the_sdk_and_still_reads_any_type_by_name": 2.0,
}


def _test_names(item: pytest.Item) -> tuple[str, str]:
    """'file::function[param]' and 'file::function' under tests/, as LONG_TESTS names them."""
    path = item.path.relative_to(Path(__file__).parent).as_posix()
    return f"{path}::{item.name}", f"{path}::{getattr(item, 'originalname', item.name)}"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    # on xdist the workers' collection order is the queue's order
    if not (
        hasattr(config, "workerinput") or config.args_source == pytest.Config.ArgsSource.TESTPATHS
    ):
        return  # a file or test named on the command line keeps its own order
    names = {item.nodeid: _test_names(item) for item in items}
    stale = set(LONG_TESTS).difference(*names.values())
    if stale and len(items) > 1000:  # the whole suite, not a -k selection of it
        warnings.warn(
            pytest.PytestConfigWarning(
                f"conftest.LONG_TESTS names tests that no longer exist: {sorted(stale)}"
            ),
            stacklevel=1,
        )
    if _everyday_only(config):
        thorough = [item for item in items if item.get_closest_marker("thorough")]
        if thorough:
            config.hook.pytest_deselected(items=thorough)
            items[:] = [item for item in items if not item.get_closest_marker("thorough")]
    units: dict[str, list[pytest.Item]] = {}  # a test function's cases: one unit on xdist (above)
    for item in items:
        units.setdefault(names[item.nodeid][1], []).append(item)
    seconds = {
        function: sum(
            LONG_TESTS.get(names[c.nodeid][0], LONG_TESTS.get(function, 0.0)) for c in cases
        )
        for function, cases in units.items()
    }
    items[:] = [
        case for function in sorted(units, key=lambda f: -seconds[f]) for case in units[function]
    ]


@pytest.fixture
def scripted_llm():
    """The fake LLM answered in this process (tests/scripted_llm.py): the same script, replies and
    request rules as `fake_llm`, and `scripted_llm.provider("openai" | "anthropic")`, the real
    adapter and SDK talking to it without a socket."""
    from scripted_llm import ScriptedLLM

    return ScriptedLLM()
