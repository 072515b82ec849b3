"""The Landlock launcher (nanobot/sandbox/launcher.py): commands start from a small process, not
from a fork of nanobot, and every exec guarantee holds through it: output and exit status, the
timeout, cancellation, a launcher that died, a start that fails before the command runs."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from nanobot.errors import ToolError
from nanobot.sandbox import build_policy, launcher
from nanobot.tools.base import ToolContext
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.shell import ExecTool

from canaries import confinement_or_skip, wait_until
from host_procs import host_pids, host_pids_naming, parent


@pytest.fixture
def landlock():
    return confinement_or_skip("landlock")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


def make_tool(ws: Path, confinement, **kw) -> ExecTool:
    tool = ExecTool(
        ToolContext(
            workspace=ws, confinement=confinement, exec_rules=ExecRules(network=False), **kw
        )
    )
    tool.kill_grace = 0.3
    return tool


def run(tool: ExecTool, command: str, **kw) -> str:
    return asyncio.run(tool.run(command=command, **kw))


def _launchers() -> list[int]:
    """This process's launcher children, found the way a user would: by their command line."""
    return [
        pid for pid in host_pids_naming("nanobot.sandbox.launcher") if parent(pid) == os.getpid()
    ]


def test_commands_start_from_the_small_launcher_not_from_nanobot(ws, landlock):
    out = run(make_tool(ws, landlock), "cat /proc/$PPID/stat")  # the command's parent: its keeper
    keeper_parent = int(out.rsplit(")", 1)[1].split()[1])
    assert keeper_parent != os.getpid()
    assert keeper_parent in _launchers()
    rss_kb = int(Path(f"/proc/{keeper_parent}/status").read_text().split("VmRSS:")[1].split()[0])
    assert rss_kb < 64 * 1024  # what each command's fork copies: tens of MB, not nanobot's hundreds
    assert (
        Path(f"/proc/{keeper_parent}/environ").read_bytes() == b""
    )  # nanobot's keys are not kept there


def test_output_and_exit_status_come_back_through_the_launcher(ws, landlock):
    tool = make_tool(ws, landlock)
    assert run(tool, "echo out; echo err >&2; exit 3") == "out\n[stderr]\nerr\n[exit code: 3]"
    assert run(tool, "kill -9 $$").endswith("[exit code: -9 (killed by SIGKILL)]")
    assert run(tool, "echo made > here.txt") == "(no output)\n[exit code: 0]"
    assert (ws / "here.txt").read_text() == "made\n"


def test_the_timeout_kills_everything_the_command_started(ws, landlock):
    tool = make_tool(ws, landlock, exec_timeout=0.5)
    with pytest.raises(ToolError, match="did not finish within 0.5s"):
        run(
            tool,
            "sleep 3051 & setsid sleep 3052 >/dev/null 2>&1 < /dev/null & echo started; sleep 3053",
        )
    assert wait_until(lambda: not any(host_pids(m) for m in ("3051", "3052", "3053")), 5)


def test_cancel_kills_the_command(ws, landlock):
    tool = make_tool(ws, landlock)

    async def cancel_it() -> None:
        call = asyncio.ensure_future(tool.run(command="sleep 3061"))
        for _ in range(200):
            if host_pids("3061"):
                break
            await asyncio.sleep(0.02)
        assert host_pids("3061"), "the command never started"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancel_it())
    assert wait_until(lambda: not host_pids("3061"), 5)


def test_a_launcher_that_died_takes_its_commands_with_it_and_is_replaced(ws, landlock):
    tool = make_tool(ws, landlock)

    async def kill_the_launcher_mid_command() -> str:
        call = asyncio.ensure_future(tool.run(command="sleep 3071", timeout=30))
        for _ in range(200):
            if host_pids("3071"):
                break
            await asyncio.sleep(0.02)
        assert host_pids("3071"), "the command never started"
        for pid in _launchers():
            os.kill(pid, signal.SIGKILL)
        return await asyncio.wait_for(call, 10)  # the call ends; it does not wait for its timeout

    out = asyncio.run(kill_the_launcher_mid_command())
    assert "[exit code: -" in out  # killed, and said so
    assert wait_until(lambda: not host_pids("3071"), 5)
    assert run(tool, "echo again") == "again\n[exit code: 0]"  # a new launcher took over


def test_a_start_that_fails_in_the_launcher_runs_nothing(ws, landlock):
    marker = ws / "ran.txt"
    policy = build_policy(ws, restrict=False, network=False)
    launch = landlock.prepare(policy, ws, f"touch {marker}")
    assert launch.keeper is not None

    async def start_in_a_missing_folder() -> None:
        await launcher.launch(
            asyncio.SubprocessProtocol,
            launch.argv,
            env=dict(os.environ),
            cwd=str(ws / "gone"),
            hook=launch.keeper,
        )

    try:
        with pytest.raises(launcher.LauncherError, match="FileNotFoundError"):
            asyncio.run(start_in_a_missing_folder())
    finally:
        launch.finish()
    assert not marker.exists()
    assert (
        run(make_tool(ws, landlock), "echo fine") == "fine\n[exit code: 0]"
    )  # the launcher lives on


def test_where_no_launcher_starts_commands_still_run_confined(ws, landlock, monkeypatch):
    monkeypatch.setattr(
        launcher, "_BOOT", "import sys; sys.exit(1)"
    )  # say, an import failing under -I -S
    monkeypatch.setattr(launcher, "_launcher", launcher.Launcher())
    out = run(
        make_tool(ws, landlock),
        "cat /proc/$PPID/stat; grep -E '^(NoNewPrivs|CapEff)' /proc/self/status; "
        "echo inside > in.txt; echo x > memory/x.txt",
    )
    assert (
        int(out.split("\n")[0].rsplit(")", 1)[1].split()[1]) == os.getpid()
    )  # forked here, as before
    assert "NoNewPrivs:\t1" in out  # the hook ran: Landlock needs no_new_privs
    if os.geteuid() == 0:
        assert "CapEff:\t0000000000000000" in out
    assert (ws / "in.txt").read_text() == "inside\n"
    if landlock.memory_read_only:
        assert not (ws / "memory" / "x.txt").exists()


def test_commands_running_at_once_each_get_their_own_output_and_status(ws, landlock):
    tool = make_tool(ws, landlock)

    async def together() -> list[str]:
        return await asyncio.gather(
            *(tool.run(command=f"sleep 0.{i}; echo {i}; exit {i}") for i in range(1, 5))
        )

    assert asyncio.run(together()) == [f"{i}\n[exit code: {i}]" for i in range(1, 5)]


def test_a_forked_copy_of_nanobot_starts_its_own_launcher_and_leaves_the_parents_alone(
    ws, landlock
):
    tool = make_tool(ws, landlock)
    assert run(tool, "echo parent") == "parent\n[exit code: 0]"
    parents_launcher = _launchers()
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:  # as the tests' fork server's children are made
        try:
            out = run(tool, "cat /proc/$PPID/stat")
            os.write(wr, out.rsplit(")", 1)[1].split()[1].encode())
        finally:
            os._exit(0)
    os.close(wr)
    with os.fdopen(rd, "rb") as fh:
        childs_launcher = int(fh.read() or b"0")
    os.waitpid(pid, 0)
    assert childs_launcher and childs_launcher not in parents_launcher
    assert _launchers() == parents_launcher  # the child's exit did not stop ours
    assert run(tool, "echo still") == "still\n[exit code: 0]"
