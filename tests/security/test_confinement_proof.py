"""Proof that confinement is active, under bubblewrap and under Landlock, judged by side effects:
the child cannot read the config, cannot reach a loopback port, leaves nothing running, cannot
write outside the workspace or into memory/, and a fork bomb leaves the machine usable."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nanobot.errors import ToolError
from nanobot.policy.egress import EgressPolicy
from nanobot.sandbox import Limits, build_policy, choose
from nanobot.tools.approval import Decision
from nanobot.tools.base import ToolContext
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.shell import ExecTool

from canaries import confinement_or_skip, host_pids, kill_marked, snapshot, wait_until
from host_procs import host_pids_naming, named

KEY = "sk-ant-canary-9f3c1e7d5b"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "MEMORY.md").write_text("# facts\n- the user likes tea\n")
    return root


@pytest.fixture
def config_file(isolated_home: Path) -> Path:
    isolated_home.mkdir(parents=True, exist_ok=True)
    path = isolated_home / "config.json"
    path.write_text(json.dumps({"providers": {"anthropic": {"apiKey": KEY}}}))
    return path


def make_tool(ws: Path, confinement, **kw) -> ExecTool:
    rules = kw.pop("rules", ExecRules(network=False))
    tool = ExecTool(ToolContext(workspace=ws, confinement=confinement, exec_rules=rules, **kw))
    tool.kill_grace = 0.3
    return tool


def run(tool: ExecTool, command: str, **kw) -> str:
    return asyncio.run(tool.run(command=command, **kw))


def test_child_cannot_read_the_config(ws, config_file, confinement):
    tool = make_tool(ws, confinement)
    out = run(
        tool,
        f"cat {config_file}; cat ~/.nanobot/config.json; cat $NANOBOT_HOME/config.json; "
        f"cd ~ && cat .nanobot/config.json; cp {config_file} {ws}/copy.json; "
        f"ln {config_file} {ws}/hard.json; ln -s {config_file} {ws}/soft.json; cat {ws}/soft.json",
    )
    assert KEY not in out
    assert not (ws / "copy.json").exists() and not (ws / "hard.json").exists()
    assert all(
        KEY not in p.read_text(errors="replace")
        for p in ws.rglob("*")
        if p.is_file() and not p.is_symlink()
    )


def test_unconfined_control_does_read_the_config(ws, config_file):
    """The same command without a sandbox reads the key: the proof above can fail."""
    tool = make_tool(ws, choose("none"), rules=ExecRules(network=False, unconfined_ok=True))
    assert KEY in run(tool, f"cat {config_file}")


def test_child_cannot_connect_to_a_loopback_port(ws, confinement, canary_tcp, canary_udp):
    tool = make_tool(ws, confinement)
    port = canary_tcp.port
    run(
        tool,
        f"curl -s -m 2 http://127.0.0.1:{port}/; bash -c 'echo x > /dev/tcp/127.0.0.1/{port}'; "
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"; "
        f'python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)'
        f".sendto(b'x', ('127.0.0.1', {canary_udp.port}))\"; true",
    )
    time.sleep(0.3)
    assert canary_tcp.connections == 0
    if confinement.mechanism == "landlock" and os.geteuid() != 0:
        pytest.skip("Landlock without a network namespace blocks TCP only")  # and status says so
    assert canary_udp.datagrams == 0


def test_with_network_allowed_the_same_connection_goes_through(
    ws, confinement, canary_tcp, loopback_egress
):
    """Control: the canary does see a connection when network is allowed and its address approved
    (through nanobot's egress proxy, which a direct connection cannot bypass: tests/tools/test_egress_proxy.py)."""
    tool = make_tool(
        ws, confinement, rules=ExecRules(network=True), egress=EgressPolicy((loopback_egress,))
    )
    run(tool, f"curl -s -m 5 http://{loopback_egress}:{canary_tcp.port}/")
    assert wait_until(lambda: canary_tcp.connections >= 1)


def test_background_children_are_gone_when_exec_returns(ws, confinement):
    tool = make_tool(ws, confinement)
    markers = ["7101", "7102", "7103", "7104"]
    try:
        started = time.monotonic()
        out = run(
            tool,
            "nohup sleep 7101 >/dev/null 2>&1 & setsid sleep 7102 >/dev/null 2>&1 </dev/null & "
            "(sleep 7103 >/dev/null 2>&1 &) ; "
            'python3 -c "import os,time\nif os.fork(): os._exit(0)\nos.setsid()\nif os.fork(): os._exit(0)\n'
            'os.closerange(0, 3); time.sleep(7104)" ; sleep 0.2; echo started',
        )
        assert out.startswith("started") and time.monotonic() - started < 10
        assert all(not host_pids(m) for m in markers), [(m, host_pids(m)) for m in markers]
    finally:
        for m in markers:
            kill_marked(m)


@pytest.fixture
def no_cgroup(monkeypatch):
    """Commands get no pids cgroup (as where none can be made): what kills their leftovers then is
    the sandbox alone."""
    from nanobot.sandbox import limits as limits_mod

    monkeypatch.setattr(limits_mod.PidsCgroup, "create", classmethod(lambda cls, limits: None))


@pytest.mark.parametrize("memfd", ["memfd", "memfd refused"])
def test_a_sandbox_still_running_after_its_command_is_killed_whole_and_nothing_else(
    ws, no_cgroup, memfd, monkeypatch
):
    """Where no pids cgroup killed what a command left, exec ends the bwrap namespace itself: the
    kernel's own teardown (bwrap's init, SIGKILLed when bwrap exits) can lag a few milliseconds
    under load, and CI once saw a command's background sleeps alive after exec returned. Here the
    sandbox is still fully up when the launch is finished; everything in its namespace is killed,
    a process outside is not. (bwrap names its init in a file in memory, or in an unlinked file
    where memfd_create is refused.)"""
    if memfd == "memfd refused":
        monkeypatch.setattr(
            os, "memfd_create", lambda *a: (_ for _ in ()).throw(OSError(38, "refused"))
        )
    conf = dataclasses.replace(confinement_or_skip("bwrap"), _pids_cgroup=False)
    policy = build_policy(ws, restrict=False, network=False, limits=Limits())
    launch = conf.prepare(
        policy,
        ws,
        "setsid sleep 7131 >/dev/null 2>&1 </dev/null & "
        "(sleep 7132 >/dev/null 2>&1 &); sleep 7133; wait",
    )
    outside = subprocess.Popen(["sleep", "7134"])
    sandbox = subprocess.Popen(
        launch.argv, pass_fds=launch.pass_fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        assert wait_until(lambda: all(host_pids(m) for m in ("7131", "7132", "7133")), 5)
        launch.finish()
        assert not any(host_pids(m) for m in ("7131", "7132", "7133"))
        assert sandbox.wait(5) != 0  # its init was killed, so bwrap ends too
        assert outside.poll() is None
    finally:
        outside.kill()
        sandbox.kill()
        for m in ("7131", "7132", "7133"):
            kill_marked(m)


# A stand-in for nanobot: it starts one bwrap command the way exec does and is SIGKILLed at once;
# bwrap itself starts 0.3 s later, so it always sets the sandbox up after nanobot is gone (never
# in the middle: that is bwrap's own race, containers/bubblewrap#633, not what this shows).
_DIES_AS_IT_STARTS = """
import dataclasses, os, signal, subprocess, sys
from pathlib import Path
from nanobot.sandbox import Limits, build_policy, choose, limits
limits.PidsCgroup.create = classmethod(lambda cls, limits: None)
conf = dataclasses.replace(choose("bwrap"), _pids_cgroup=False)
ws = Path(sys.argv[1])
launch = conf.prepare(build_policy(ws, restrict=False, network=False, limits=Limits()), ws, sys.argv[2])
subprocess.Popen(["/bin/sh", "-c", 'sleep 0.3; exec "$@"', "sh", *launch.argv], pass_fds=launch.pass_fds,
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_bwrap_sandbox_whose_nanobot_dies_as_it_starts_leaves_no_process(ws):
    """nanobot SIGKILLed as it starts a command: the command still runs to its end, and nothing of
    its sandbox stays behind. (bwrap reports its init's pid on --info-fd; when that was a pipe,
    bwrap's write after nanobot's death killed it by SIGPIPE mid-setup, the command never ran, and
    the init waited forever: the crash trials left 13 such processes.)"""
    confinement_or_skip("bwrap")
    leftovers = []
    try:
        for n in range(3):
            helper = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    _DIES_AS_IT_STARTS,
                    str(ws),
                    f"echo ran > ran-{n}; sleep 0.1 # marker-7141",
                ],
                capture_output=True,
                timeout=30,
            )
            assert helper.returncode == -signal.SIGKILL, helper.stderr
        assert wait_until(lambda: all((ws / f"ran-{n}").exists() for n in range(3)), 10)
        wait_until(lambda: not host_pids_naming("marker-7141"), 10)
        leftovers = host_pids_naming("marker-7141")
    finally:
        for pid in host_pids_naming("marker-7141"):
            os.kill(pid, signal.SIGKILL)
    assert leftovers == []


def test_a_command_whose_promised_pids_cgroup_cannot_be_made_is_not_run(
    ws, confinement, monkeypatch
):
    """Where the status promises "processes <= N (pids cgroup)", a command that cannot have its
    cgroup (a name taken, the controller full) is refused, not run unbounded; nothing leaks."""
    from nanobot.sandbox import limits as limits_mod

    if not confinement._pids_cgroup:
        pytest.skip(f"processes are bounded by {confinement.process_limit} here")
    monkeypatch.setattr(limits_mod.PidsCgroup, "create", classmethod(lambda cls, limits: None))
    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(ToolError, match="pids cgroup.*could not be made.*not run"):
        run(make_tool(ws, confinement), "echo ran > ran.txt")
    assert not (ws / "ran.txt").exists()
    assert set(os.listdir("/proc/self/fd")) <= fds


def test_a_cgroup_name_taken_by_a_folder_left_behind_is_skipped(monkeypatch):
    """A folder named after this pid (left by a killed nanobot that had it before) takes a name;
    the next free one is used instead of running the command without a cgroup."""
    import itertools

    from nanobot.sandbox import limits as limits_mod

    probe = limits_mod.PidsCgroup.create(Limits())
    if probe is None:
        pytest.skip("no writable pids cgroup here")
    probe.remove()
    monkeypatch.setattr(limits_mod, "_counter", itertools.count())
    taken = [probe.path.parent / f"nanobot-exec-{os.getpid()}-{n}" for n in (0, 1)]
    for folder in taken:
        folder.mkdir()
    try:
        cg = limits_mod.PidsCgroup.create(Limits())
        assert cg is not None and cg.path.name == f"nanobot-exec-{os.getpid()}-2"
        assert (cg.path / "pids.max").read_text().strip() == str(Limits().processes)
        cg.remove()
    finally:
        for folder in taken:
            folder.rmdir()


def test_background_child_survives_without_confinement_control(ws):
    """Control: unconfined, the same nohup'd child outlives exec (the check above can fail)."""
    tool = make_tool(ws, choose("none"), rules=ExecRules(network=False, unconfined_ok=True))
    try:
        run(tool, "setsid sleep 7105 >/dev/null 2>&1 </dev/null & echo ok")
        assert wait_until(lambda: bool(host_pids("7105")), 2)
    finally:
        kill_marked("7105")


def test_workspace_is_writable_memory_and_outside_are_not(ws, tmp_path, confinement, isolated_home):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    own = (
        ws,
        isolated_home / "journal",
    )  # nanobot's own memory journal is written by nanobot, not the command
    isolated_home.mkdir(parents=True, exist_ok=True)  # (and the journal's parent, the nanobot home)
    before = snapshot(tmp_path, skip=own)
    tool = make_tool(ws, confinement)
    run(
        tool,
        f"echo new > note.txt; mkdir -p src && echo 'print(1)' > src/a.py; "
        f"echo evil >> memory/MEMORY.md; rm -f memory/MEMORY.md; mv memory memory.old; "
        f"echo pwn > {outside}/precious.txt; rm -rf {outside}; touch {isolated_home.parent}/.bashrc; "
        f"ln -s {outside} out; echo pwn > out/precious.txt; true",
    )
    assert (ws / "note.txt").read_text() == "new\n" and (ws / "src" / "a.py").exists()
    assert (ws / "memory" / "MEMORY.md").read_text() == "# facts\n- the user likes tea\n"
    assert snapshot(tmp_path, skip=own) == before


def test_a_command_cannot_plant_or_change_a_scheduled_job(ws, confinement):
    from nanobot.cron.schedule import parse_schedule
    from nanobot.cron.store import JobStore

    store = JobStore(ws)
    store.add(parse_schedule(every_seconds=3600, now_ms=0), "water the plants", now_ms=0)
    jobs = ws / "cron" / "jobs.json"
    before = jobs.read_bytes()
    planted = '{"version": 1, "jobs": [{"id": "evil", "name": "evil", "enabled": true}]}'
    out = run(
        make_tool(ws, confinement),
        f"echo '{planted}' > cron/jobs.json; rm -f cron/jobs.json; mv cron cron.old; "
        "echo x > cron/new.json; ls cron; true",
    )
    assert jobs.read_bytes() == before and [j.message for j in JobStore(ws).jobs()] == [
        "water the plants"
    ]
    assert not (ws / "cron.old").exists() and not (ws / "cron" / "new.json").exists()
    assert "jobs.json" in out  # the command could still read it


def test_a_first_command_leaves_cron_read_only_before_any_job_exists(ws, confinement):
    run(make_tool(ws, confinement), "mkdir -p cron; echo '{}' > cron/jobs.json; true")
    assert (ws / "cron").is_dir() and list((ws / "cron").iterdir()) == []


def test_restricted_shows_only_system_folders_outside_the_workspace(ws, tmp_path, confinement):
    visible = next((d for d in ("/srv", "/mnt", "/var/lib") if os.access(d, os.W_OK)), None)
    if visible is None:
        pytest.skip("no writable folder outside HOME and /tmp to plant a canary in")
    import tempfile

    canary = Path(tempfile.mkdtemp(dir=visible, prefix="nanobot-canary-"))
    try:
        (canary / "data.txt").write_text("outside-data")
        free = run(make_tool(ws, confinement), f"cat {canary}/data.txt")
        restricted = run(
            make_tool(ws, confinement, restrict_to_workspace=True),
            f"cat {canary}/data.txt; ls /usr/bin | head -1; echo ok > here.txt",
        )
        assert "outside-data" in free  # the default shows it read-only ...
        assert "outside-data" not in restricted  # ... restrictToWorkspace hides it
        assert (ws / "here.txt").read_text() == "ok\n" and "[exit code: 0]" in restricted
    finally:
        import shutil

        shutil.rmtree(canary, ignore_errors=True)


def test_no_capabilities_and_no_escape_through_proc(ws, confinement, config_file):
    tool = make_tool(ws, confinement)
    nanobot_pid = os.getpid()
    out = run(
        tool,
        f"cat /proc/{nanobot_pid}/environ; cat /proc/{nanobot_pid}/root{config_file}; "
        f"ls /proc/{nanobot_pid}/cwd/; true",
    )
    # /proc/<pid>/environ is the environment the process started with (what the fixtures set later is
    # not in it), so the proof is a variable that is: PATH, which the file does hold for us
    assert b"PATH=" in Path(f"/proc/{nanobot_pid}/environ").read_bytes()
    assert "PATH=" not in out
    assert KEY not in out  # the config file's key, through /proc/<pid>/root


def test_fork_bomb_is_bounded_and_the_machine_survives(ws, confinement):
    if "NOT bounded" in confinement.process_limit:
        pytest.skip(f"process limit not enforceable here: {confinement.process_limit}")
    limit = 64
    # a long timeout: on a loaded machine the bomb needs a few seconds to reach the limit. Where a
    # pids cgroup counts the tree, the call is ended (as Ctrl-C ends it) as soon as the kernel has
    # refused forks for a while, so the test waits for the proof, not for the timeout.
    tool = make_tool(ws, confinement, exec_timeout=8.0, exec_limits=Limits(processes=limit))
    # every shell of the bomb sleeps as `sleep 3131` once it has forked: counting those on the host
    # measures the bomb itself, whatever the other users of this machine start or stop meanwhile
    peak = [0]
    tasks = [0]  # the kernel's own count of the tree, where a pids cgroup holds it
    refused = [0]  # forks the pids cgroup refused (its pids.events "max" counter)
    stop = threading.Event()
    bounded = (
        threading.Event()
    )  # the cgroup refused forks over several /proc scans: the bomb is at its bound
    cgroups = f"/sys/fs/cgroup/pids/nanobot-exec-{os.getpid()}-*/pids.current"

    def sample() -> None:
        import glob

        files = []
        rounds = 0
        scans_at_bound = 0
        while not stop.is_set():
            if rounds % 25 == 0:  # scanning /proc is slow; the cgroup's counter is cheap to read
                peak[0] = max(peak[0], len(host_pids("3131")))
                files = glob.glob(cgroups)
                scans_at_bound = scans_at_bound + 1 if refused[0] else 0
                if scans_at_bound >= 4:
                    bounded.set()
            for current in files:
                try:
                    tasks[0] = max(tasks[0], int(Path(current).read_text()))
                    events = Path(current).with_name("pids.events").read_text().split()
                    refused[0] = max(refused[0], int(events[events.index("max") + 1]))
                except (OSError, ValueError, IndexError):
                    pass
            rounds += 1
            time.sleep(0.002)

    async def bomb() -> str:
        call = asyncio.ensure_future(
            tool.run(command="b(){ b & b & sleep 3131; }; b")
        )  # sleeping parents keep the tree up
        while not call.done() and not bounded.is_set():
            await asyncio.sleep(0.02)
        call.cancel()  # no effect when the timeout already ended it
        try:
            return await call
        except asyncio.CancelledError:
            return ""

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    out = ""
    try:
        out = asyncio.run(bomb())
    except ToolError as exc:
        out = str(exc)
    finally:
        stop.set()
        sampler.join()
    took = time.monotonic() - started
    print(
        f"fork bomb under {confinement.mechanism}: peak {peak[0]} sleeping shells, {tasks[0]} tasks, "
        f"{refused[0]} forks refused, {took:.1f} s: {out[-300:]!r}"
    )
    # the bomb did grow (sampling a transient on a busy machine sees only part of its peak) ...
    # (or the shells themselves said they hit the limit, when the sampler came too late to see it)
    assert tasks[0] >= limit // 4 or peak[0] >= 4 or out.count("Cannot fork") >= 2, (
        tasks[0],
        peak[0],
        out[:300],
    )
    assert tasks[0] <= limit
    # ... and no further, seen from the host: each sleeping shell is two tasks, itself and its sleep
    assert peak[0] <= limit // 2, peak[0]
    assert took < 30
    assert subprocess.run(["true"]).returncode == 0  # the machine still forks
    assert wait_until(lambda: not host_pids("3131"), 5)  # and nothing of the bomb is left


def test_a_spinning_fork_bomb_is_stopped_at_its_limit_long_before_its_timeout(ws, confinement):
    """A bomb whose processes keep forking would spin on every core until its timeout; the tool
    ends it once the pids cgroup keeps refusing, and nothing of it is left."""
    if "pids cgroup" not in confinement.process_limit:
        pytest.skip(f"no pids cgroup here: {confinement.process_limit}")
    timeout = 30.0
    tool = make_tool(ws, confinement, exec_timeout=timeout, exec_limits=Limits(processes=64))
    started = time.monotonic()
    with pytest.raises(ToolError) as ended:
        # each process forks forever and shrugs off a refusal: it never ends by itself. Run under
        # its own name (a link to this interpreter's binary, not to a version manager's shim), so
        # even its zombies can be told apart on the host.
        python = shlex.quote(os.path.realpath(sys.executable))
        run(
            tool,
            f"ln -sf {python} bomb6161 && ./bomb6161 -c 'import os\nwhile True:\n"
            "    try:\n        os.fork()\n    except OSError:\n        pass\n'",
        )
    took = time.monotonic() - started
    out = str(ended.value)
    assert "past its limit of 64" in out, out[:400]
    assert took < timeout / 3, took  # stopped for what it did, not by the clock
    # nothing of it is left, not even zombies waiting for PID 1 (this VM's reaps them a second or
    # more later, and in a container PID 1 may never): the sandbox reaped them itself
    assert wait_until(lambda: not named("bomb6161"), 0.5), len(named("bomb6161"))
    assert subprocess.run(["true"]).returncode == 0


def test_a_command_that_meets_the_process_limit_once_is_not_stopped(ws, confinement):
    """Only forks refused again and again end a command early: a program that starts children until
    the limit refuses one, then waits for them, finishes."""
    if "pids cgroup" not in confinement.process_limit:
        pytest.skip(f"no pids cgroup here: {confinement.process_limit}")
    # It stops at the first refusal: retrying in a tight loop for 75 ms is a fork bomb's behaviour
    # (on a loaded CI machine eight quick retries took that long, and the command was stopped).
    (ws / "kids.py").write_text(
        "import subprocess\n"
        "kids, refused = [], 0\n"
        "for _ in range(24):\n"  # each child lives until its stdin closes: no timing, however loaded
        "    try:\n"
        "        kids.append(subprocess.Popen(['cat'], stdin=subprocess.PIPE))\n"
        "    except OSError:\n"
        "        refused += 1\n"
        "        break\n"
        "for kid in kids:\n"
        "    kid.stdin.close()\n"
        "    kid.wait()\n"
        "open('done.txt', 'w').write(f'{len(kids)} {refused}')\n"
    )
    tool = make_tool(ws, confinement, exec_timeout=30.0, exec_limits=Limits(processes=16))
    out = run(tool, "python3 kids.py")
    ran, refused = (int(w) for w in (ws / "done.txt").read_text().split())  # it ran to its end
    assert refused == 1 and 0 < ran < 16, (ran, refused)  # the limit did refuse one
    assert out.rstrip().endswith("[exit code: 0]"), out[-300:]


def test_file_size_limit_stops_a_runaway_write(ws, confinement):
    tool = make_tool(ws, confinement, exec_limits=Limits(file_size=1 << 20))
    run(tool, "yes > big.txt; true")
    assert (ws / "big.txt").stat().st_size <= 1 << 20


def test_memory_limit_stops_a_runaway_allocation(ws, confinement):
    tool = make_tool(ws, confinement, exec_limits=Limits(memory=256 << 20))
    run(tool, "python3 -c \"x = bytearray(1 << 30); open('allocated', 'w').write('yes')\"; true")
    assert not (ws / "allocated").exists()


class Recorder:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.requests = []

    async def approve(self, request):
        self.requests.append(request)
        return Decision(self.allow, "" if self.allow else "the user said no")


def test_forced_fallback_asks_before_every_command_and_refusal_runs_nothing(ws):
    none = choose("none")
    refuse = Recorder(False)
    tool = make_tool(ws, none, approver=refuse)
    with pytest.raises(ToolError, match="refused"):
        run(tool, "touch ran")
    assert not (ws / "ran").exists()
    assert [r.kind for r in refuse.requests] == ["exec-unconfined"]
    assert "--allow-unconfined-exec" in refuse.requests[0].allow_hint
    allow = Recorder(True)
    run(make_tool(ws, none, approver=allow), "touch ran")
    assert (ws / "ran").exists() and [r.kind for r in allow.requests] == ["exec-unconfined"]


def test_default_approver_refuses_unconfined_exec_unless_the_user_chose_it(ws):
    with pytest.raises(ToolError, match="confinement"):
        run(make_tool(ws, choose("none")), "touch ran")
    assert not (ws / "ran").exists()
    run(make_tool(ws, choose("none"), rules=ExecRules(unconfined_ok=True)), "touch ran")
    assert (ws / "ran").exists()


def test_network_ask_asks_and_a_refusal_reaches_nothing(
    ws, confinement, canary_tcp, loopback_egress
):
    refuse = Recorder(False)
    tool = make_tool(ws, confinement, approver=refuse, rules=ExecRules(network="ask"))
    with pytest.raises(ToolError, match="exec-network"):
        run(tool, f"curl -s http://127.0.0.1:{canary_tcp.port}/ > got.txt")
    assert canary_tcp.connections == 0 and not (ws / "got.txt").exists()
    allow = Recorder(True)
    tool = make_tool(ws, confinement, approver=allow, rules=ExecRules(network="ask"))
    run(tool, f"curl -s http://{loopback_egress}:{canary_tcp.port}/ > got.txt")
    assert (
        wait_until(lambda: canary_tcp.connections == 1) and (ws / "got.txt").read_text() == "canary"
    )
    # the command, then (through the egress proxy, where the kernel holds it there) its domain
    assert [r.kind for r in allow.requests] == ["exec-network"] + [
        "web-domain"
    ] * confinement.filters_egress
    # a command that does not look like it wants network is not asked about, and gets none
    silent = Recorder(True)
    tool = make_tool(ws, confinement, approver=silent, rules=ExecRules(network="ask"))
    run(
        tool,
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {canary_tcp.port}), 2)\"; true",
    )
    assert silent.requests == [] and canary_tcp.connections == 1


def test_ask_deny_and_allow_patterns(ws, confinement):
    rec = Recorder(False)
    # an allow rule covers a line only when every command of it matches one (touch has its own)
    rules = ExecRules.from_lists(
        ask=[r"^git push"],
        deny=[r"\bshred\b"],
        allow=[r"^git push --dry-run", "^touch "],
        network=False,
    )
    tool = make_tool(ws, confinement, approver=rec, rules=rules)
    with pytest.raises(ToolError, match="deny pattern"):
        run(tool, "touch denied; shred x")
    with pytest.raises(ToolError, match="exec-ask"):
        run(tool, "git push origin main; touch asked")
    run(tool, "git push --dry-run 2>/dev/null; touch allowed")
    assert [r.kind for r in rec.requests] == ["exec-ask"]
    assert (
        not (ws / "denied").exists() and not (ws / "asked").exists() and (ws / "allowed").exists()
    )


def test_legacy_allow_patterns_keep_their_allowlist_meaning(ws, confinement):
    rules = ExecRules.from_lists(legacy_allow=[r"^ls\b"], legacy_deny=[r"\bcurl\b"], network=False)
    tool = make_tool(ws, confinement, rules=rules)
    assert "[exit code: 0]" in run(tool, "ls")
    with pytest.raises(ToolError, match="allowPatterns"):
        run(tool, "touch ran")
    assert not (ws / "ran").exists()


def test_plain_landlock_without_namespaces_still_hides_blocks_tcp_and_reaps(
    ws, config_file, canary_tcp, monkeypatch
):
    """Where no mount namespace can be made (user namespaces forbidden), Landlock alone still
    hides the config, blocks TCP and kills what the command left; status says what it lacks."""
    from nanobot.sandbox import confine

    conf = confinement_or_skip("landlock")
    monkeypatch.setattr(confine, "_can_private_mounts", lambda: False)
    assert "NOT read-only but checked" in conf.describe(network=False) and not conf.memory_read_only
    tool = make_tool(ws, conf)
    try:
        out = run(
            tool,
            f"cat {config_file}; setsid sleep 7201 >/dev/null 2>&1 </dev/null & "
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {canary_tcp.port}), 2)\"; "
            "echo done",
        )
        assert KEY not in out and "done" in out
        assert canary_tcp.connections == 0
        assert not host_pids("7201")
    finally:
        kill_marked("7201")


def test_a_pids_cgroup_left_by_a_nanobot_that_died_is_removed_by_the_next_one(monkeypatch):
    """docs/safety.md: a SIGKILLed nanobot's pids cgroup folder is removed by the next nanobot that runs a
    command, and whatever is still inside it killed (bwrap's init, orphaned by bwrap's own race
    when nanobot dies during its setup); a living nanobot's folder and its process are left alone."""
    from nanobot.sandbox import limits as limits_mod

    probe = limits_mod.PidsCgroup.create(Limits())
    if probe is None:
        pytest.skip("no writable pids cgroup here")
    parent = probe.path.parent
    probe.remove()
    # Other nanobots on this machine (another test run, a user's) sweep the same folder, and may
    # sweep these before we do: names unique to this process, and a setup that tolerates that.
    me = os.getpid()
    dead = parent / f"nanobot-exec-4194999-{me}-0"  # above any pid_max: that nanobot is surely gone
    dead_full = parent / f"nanobot-exec-4194998-{me}-3"
    alive = parent / f"nanobot-exec-{os.getppid()}-{me}-0"  # a living process's folder must stay
    orphan = subprocess.Popen(["sleep", "7151"])  # stands in for the orphaned init
    living = subprocess.Popen(["sleep", "7152"])  # a living nanobot's command
    try:
        dead.mkdir(exist_ok=True)
        alive.mkdir(exist_ok=True)
        (alive / "cgroup.procs").write_text(str(living.pid))
        for _ in range(20):  # another nanobot's sweep may remove the folder between the two steps
            dead_full.mkdir(exist_ok=True)
            try:
                (dead_full / "cgroup.procs").write_text(str(orphan.pid))
                break
            except FileNotFoundError:
                continue
        monkeypatch.setattr(limits_mod, "_swept", set())  # as in a fresh process
        fresh = limits_mod.PidsCgroup.create(Limits())
        assert fresh is not None
        fresh.remove()
        assert orphan.wait(5) == -signal.SIGKILL
        assert not dead.exists() and not dead_full.exists()
        assert alive.exists() and living.poll() is None
    finally:
        for proc in (orphan, living):
            proc.kill()
            proc.wait()
        for folder in (dead, dead_full, alive):
            if folder.exists():
                limits_mod.PidsCgroup(folder, 0).remove()


def test_child_cannot_change_nanobots_own_code(ws, confinement, tmp_path):
    """The next `nanobot` start runs what is in its package and its bytecode folder: a confined
    command must not be able to add to either."""
    import nanobot

    package = Path(nanobot.__file__).parent
    pycache = package / "__pycache__"
    pycache.mkdir(exist_ok=True)
    try:
        out = run(
            make_tool(ws, confinement), f"touch {pycache}/planted.pyc {package}/planted.py; true"
        )
        assert not (pycache / "planted.pyc").exists()
        assert not (package / "planted.py").exists()
    finally:
        (pycache / "planted.pyc").unlink(missing_ok=True)
        (package / "planted.py").unlink(missing_ok=True)
    assert "[exit code: 0]" in out  # the command ran; only its writes were refused
