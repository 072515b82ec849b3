"""tests/forkserver.py: a child forked from the fork server starts, runs and ends like a fresh
`python -m ...`, for everything the process-heavy tests rely on. Each check runs the same command
both ways and compares."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
from nanobot.fakellm import Reply
from nanobot.session.store import SessionStore

from forkserver import ForkServer, ForkServerError

TESTS = Path(__file__).parent
PROBE = [sys.executable, "-m", "forkserver_probe"]


def _both(forkserver, argv, *, env, stdout=subprocess.PIPE, cwd=TESTS):
    """(fresh, forked) CompletedProcess-like results of argv with the given stdout."""
    results = []
    for start in (subprocess.Popen, forkserver.popen):
        proc = start(
            argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, env=env, cwd=cwd
        )
        out, err = proc.communicate(timeout=60)
        results.append((proc.returncode, out, err))
    return results


@pytest.fixture
def plain_env():
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    return env


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("stdout_kind", ["pipe", "terminal", "controlling terminal"])
def test_a_child_starts_with_the_state_of_a_fresh_interpreter(
    plain_env, tmp_path, unbuffered, stdout_kind
):
    # a server that preloads little, so the fresh process to compare with need not import nanobot
    # (that importing nanobot starts no thread and changes no signal handler, the server checks)
    env = {**plain_env, "PYTHONUNBUFFERED": "1"} if unbuffered else plain_env
    env["PROBE_MARK"] = str(tmp_path)
    with ForkServer(env=env, preload=["json"]) as server:
        if (
            stdout_kind == "controlling terminal"
        ):  # pexpect's way: a new session that the pty controls
            states = [_spawned_state(start, env) for start in (_pexpect_spawn, server.spawn)]
        else:
            states = [_state(start, env, stdout_kind) for start in (subprocess.Popen, server.popen)]
    fresh, forked = states
    assert fresh["stdout"]["isatty"] is (stdout_kind != "pipe")
    assert fresh["session_leader"] is (stdout_kind == "controlling terminal")
    assert fresh["env"]["PROBE_MARK"] == str(tmp_path) and fresh["cwd"] == str(TESTS)
    assert fresh.pop("random") != forked.pop("random")
    assert forked == fresh


def test_a_script_child_starts_as_python_script_py_starts(plain_env, tmp_path):
    """`python path/to/script.py args` (the MCP tests' servers): argv, sys.path[0], __main__ as fresh."""
    with ForkServer(env=plain_env, preload=["json"]) as server:
        states = []
        for start in (subprocess.Popen, server.popen):
            proc = start(
                [sys.executable, str(TESTS / "forkserver_probe.py"), "state"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=plain_env,
                cwd=tmp_path,
            )
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            states.append(json.loads(out))
    fresh, forked = states
    assert (
        fresh["path0"] == str(TESTS)
        and fresh["argv0"] == "forkserver_probe.py"
        and fresh["main_module"] is None
    )
    assert fresh.pop("random") != forked.pop("random")
    assert forked == fresh


def _pexpect_spawn(argv, **kwargs):
    return pexpect.spawn(argv[0], argv[1:], **kwargs)


def _spawned_state(spawn, env) -> dict:
    child = spawn([*PROBE, "state"], env=env, cwd=TESTS, dimensions=(30, 90))
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    return json.loads(out.replace(b"\r\n", b"\n"))


def _state(start, env, stdout_kind) -> dict:
    """The probe's state report, its stdout a pipe or a terminal."""
    if stdout_kind == "pipe":
        proc = start(
            [*PROBE, "state"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=TESTS,
        )
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return json.loads(out)
    master, slave = pty.openpty()
    proc = start(
        [*PROBE, "state"],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.PIPE,
        env=env,
        cwd=TESTS,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO once the child is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0
    return json.loads(b"".join(chunks).replace(b"\r\n", b"\n"))


def test_two_children_draw_different_random_numbers(nanobot_forkserver):
    draws = {
        json.loads(nanobot_forkserver.run([*PROBE, "state"], cwd=TESTS).stdout)["random"]
        for _ in range(3)
    }
    assert len(draws) == 3


@pytest.mark.parametrize("what", [["ending"], ["exit", "3"], ["raise"], ["interrupt"]])
def test_a_child_ends_as_a_fresh_interpreter_ends(nanobot_forkserver, what):
    fresh, forked = _both(nanobot_forkserver, [*PROBE, *what], env=dict(os.environ))
    assert (
        forked[:2] == fresh[:2]
    )  # exit code (-2: SIGINT for an uncaught KeyboardInterrupt), stdout
    # the traceback of the child also names the fork server's frames: compare what it says
    assert forked[2].splitlines()[-1:] == fresh[2].splitlines()[-1:]
    if what == ["ending"]:
        assert fresh[1] == b"unflushed, no newline"
        assert fresh[2] == forked[2] == b"thread finished\nexit handler ran\n"
    if what == ["raise"]:
        assert b"Traceback" in forked[2] and fresh[0] == 1


def test_a_child_is_a_process_of_its_own_that_dies_by_sigkill(nanobot_forkserver):
    proc = nanobot_forkserver.popen([*PROBE, "sleep"], stdout=subprocess.PIPE, cwd=TESTS)
    assert proc.stdout.readline() == b"sleeping\n"
    assert proc.pid != os.getpid() and proc.poll() is None
    assert Path(f"/proc/{proc.pid}/stat").exists()
    proc.kill()
    assert proc.wait(timeout=10) == -signal.SIGKILL
    assert not Path(f"/proc/{proc.pid}/stat").exists()  # reaped by the server
    assert (
        nanobot_forkserver.run([*PROBE, "exit", "0"], cwd=TESTS).returncode == 0
    )  # the server lives on


def test_a_nanobot_turn_forked_is_the_turn_a_fresh_process_runs(
    nanobot_forkserver, nanobot_cmd, fake_llm, configure, isolated_home
):
    configure()
    results, saved, requests = [], [], []
    for key, start in (("cli:fresh", subprocess.Popen), ("cli:forked", nanobot_forkserver.popen)):
        fake_llm.reset()
        fake_llm.script(
            Reply.tool_calls([("exec", {"command": "echo hi > out.txt"})]), Reply.text("wrote it")
        )
        proc = start(
            [*nanobot_cmd, "agent", "-m", "write it", "-s", key],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        results.append((proc.returncode, *proc.communicate(timeout=60), proc.returncode))
        stored = SessionStore().load(key).messages
        saved.append(
            [
                (m["role"], m.get("content"), [c["function"] for c in m.get("tool_calls") or []])
                for m in stored
            ]
        )
        requests.append(
            [
                [
                    (m["role"], m.get("content") if m["role"] != "user" else m["content"][-8:])
                    for m in r.messages
                ]
                for r in fake_llm.requests
            ]
        )
        fake_llm.assert_all_valid()
        assert (isolated_home / "workspace" / "out.txt").read_text() == "hi\n"
        (isolated_home / "workspace" / "out.txt").unlink()
    fresh, forked = results
    assert fresh[1:] == forked[1:]  # stdout, stderr, exit code
    assert fresh[3] == 0 and fresh[1] == b"wrote it\n"
    assert saved[0] == saved[1] and requests[0] == requests[1]


def test_sigkill_during_a_tool_leaves_the_session_as_a_fresh_process_leaves_it(
    nanobot_forkserver, nanobot_cmd, fake_llm, configure
):
    configure()
    fake_llm.script(Reply.tool_calls([("exec", {"command": "sleep 30"})]), Reply.text("never"))
    path = SessionStore().path_for("cli:direct")
    proc = nanobot_forkserver.popen(
        [*nanobot_cmd, "agent", "-m", "wait"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while not (path.exists() and '"tool_calls"' in path.read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    proc.kill()
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and out == b""
    stored = SessionStore().load("cli:direct")
    assert stored.warnings == []
    assert [m["role"] for m in stored.messages] == ["user", "assistant"]


def test_a_child_counts_with_the_cl100k_encoding_the_server_built(nanobot_forkserver):
    """The helper builds tiktoken's encoding before it forks: a child's first exact count gives what
    a fresh process's gives, without building it again; a child whose TIKTOKEN_CACHE_DIR differs
    from the one the helper read is refused."""
    env = dict(os.environ)
    fresh, forked = _both(nanobot_forkserver, [*PROBE, "count"], env=env)
    assert fresh[0] == forked[0] == 0, (fresh[2], forked[2])
    fresh_count, forked_count = json.loads(fresh[1]), json.loads(forked[1])
    assert fresh_count.pop("built") is False and forked_count.pop("built") is True
    assert forked_count == fresh_count
    assert fresh_count["estimator"] == "cl100k_base, exact (offline ranks)"
    server = nanobot_forkserver.server_for(env)
    with pytest.raises(ForkServerError, match="TIKTOKEN_CACHE_DIR"):
        server.popen([*PROBE, "count"], env={**env, "TIKTOKEN_CACHE_DIR": "/nonexistent"})


def test_an_environment_the_server_cannot_give_is_refused(nanobot_forkserver, nanobot_cmd):
    server = nanobot_forkserver.server_for(dict(os.environ))
    with pytest.raises(ForkServerError, match="PYTHONHASHSEED"):
        server.popen([*nanobot_cmd, "--version"], env={**os.environ, "PYTHONHASHSEED": "7"})
    # the openai SDK reads OPENAI_LOG when it is imported: a child cannot have another value
    assert "OPENAI_LOG" not in os.environ
    with pytest.raises(ForkServerError, match="OPENAI_LOG"):
        server.popen([*nanobot_cmd, "--version"], env={**os.environ, "OPENAI_LOG": "debug"})
    # a variable nothing read at import is the child's own
    assert (
        server.run(
            [*nanobot_cmd, "--version"], env={**os.environ, "NANOBOT_UNREAD": "x"}
        ).returncode
        == 0
    )
    with pytest.raises(ForkServerError, match="-m <module>"):
        server.popen([sys.executable, "-c", "pass"])


def test_closing_the_server_ends_the_children_it_forked(tmp_path):
    with ForkServer(preload=["json"]) as server:
        proc = server.popen([*PROBE, "sleep"], stdout=subprocess.PIPE, cwd=TESTS)
        assert proc.stdout.readline() == b"sleeping\n"
        pid = proc.pid
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/stat").exists():
        assert time.monotonic() < deadline, "the child outlived its server"
        time.sleep(0.01)


def test_a_chat_in_a_terminal_answers_and_ends_on_sigterm(
    nanobot_forkserver, nanobot_cmd, fake_llm, configure
):
    """spawn: the child's controlling terminal is a new pty (what pexpect gives a fresh process)."""
    configure()
    fake_llm.script(Reply.text("hello from the model"))
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    child = nanobot_forkserver.spawn(
        [*nanobot_cmd, "agent"], env=env, encoding="utf-8", dimensions=(30, 90)
    )
    try:
        child.expect_exact("you ›")
        assert child.getwinsize() == (30, 90)
        child.sendline("hi")
        child.expect_exact("hello from the model")
        child.expect_exact("you ›")
        child.kill(signal.SIGTERM)
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 143 and not child.isalive()
    assert any(
        m.get("content") == "hello from the model"
        for m in SessionStore().load("cli:direct").messages
    )


def test_closing_the_terminal_hangs_up_the_child(nanobot_forkserver):
    child = nanobot_forkserver.spawn([*PROBE, "sleep"], cwd=TESTS)
    child.expect_exact("sleeping")
    os.close(child.child_fd)  # the kernel sends SIGHUP to the session the terminal controls
    child.child_fd = -1
    child.wait()
    assert child.signalstatus == signal.SIGHUP


def test_an_offered_server_is_used_by_the_processes_started_after_and_a_refused_child_gets_its_own(
    plain_env, monkeypatch
):
    """The whole suite's controller offers its helpers to its workers (forkserver.offer): a worker's
    ForkServers forks from the offered helper, and starts its own for a child it would not accept."""
    import forkserver

    with ForkServer(env=plain_env, preload=["json"]) as offered:
        monkeypatch.delenv(forkserver.SHARED_SERVERS, raising=False)
        forkserver.offer([offered])
        servers = forkserver.ForkServers()  # as a worker makes them, from the variable it inherited
        try:
            argv = [sys.executable, str(TESTS / "forkserver_probe.py"), "state"]
            used = servers.server_for(plain_env, preload=["json"])
            assert used.path == offered.path
            child = used.popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=plain_env
            )
            child.communicate(timeout=60)
            assert child.returncode == 0
            own = servers.server_for({**plain_env, "PYTHONUNBUFFERED": "1"}, preload=["json"])
            assert own.path != offered.path  # other interpreter settings: a helper of this process
            assert servers.server_for(plain_env, preload=["os"]).path not in (
                offered.path,
                own.path,
            )
        finally:
            servers.close()
        assert Path(
            offered.path
        ).exists()  # closing the worker's servers left the offered one alone


def test_a_server_reports_each_child_s_cpu_to_a_client_that_did_not_start_it(tmp_path):
    """What scripts/suite_cpu.py adds to a test: the CPU of children forked by another process's
    server, which run outside the test process's cgroup."""
    import forkserver

    spin = tmp_path / "spin.py"
    spin.write_text(
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
    )
    with ForkServer(preload=["json"]) as server:
        before = forkserver.attached_children_cpu
        assert server.run([sys.executable, str(spin)], timeout=60).returncode == 0
        assert forkserver.attached_children_cpu == before  # its own server's: in its own cgroup
        attached = ForkServer.attach(server.path)
        assert attached.run([sys.executable, str(spin)], timeout=60).returncode == 0
        assert 0.3 <= forkserver.attached_children_cpu - before < 5
