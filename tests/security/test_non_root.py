"""The same proofs for an ordinary user (where real people run nanobot): the tool runs as uid
65534 through the system Python. Skipped unless we are root (to switch user), the checkout is
readable by others, and a system python3 exists."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from canaries import MECHANISMS, by_mechanism, host_pids, kill_marked, snapshot

REPO = Path(__file__).resolve().parents[2]
NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"

PROBE = textwrap.dedent("""
    import asyncio, json, sys
    sys.path[:0] = [sys.argv[1], *json.loads(sys.argv[5])]  # the checkout, then the test venv's packages
    from pathlib import Path
    from nanobot.sandbox import choose
    from nanobot.tools.base import ToolContext
    from nanobot.tools.exec_rules import ExecRules
    from nanobot.tools.shell import ExecTool
    conf = choose(sys.argv[2])
    tool = ExecTool(ToolContext(workspace=Path(sys.argv[3]), confinement=conf, exec_rules=ExecRules(network=False)))
    outputs = []
    for command in json.loads(sys.argv[4]):
        try:
            outputs.append(asyncio.run(tool.run(command=command)))
        except Exception as exc:
            outputs.append(f"error: {exc}")
    print(json.dumps({"mechanism": conf.mechanism, "memory_read_only": conf.memory_read_only, "outputs": outputs}))
""")


def _usable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to switch to an unprivileged user"
    if not shutil.which("setpriv") or not os.path.exists(SYSTEM_PYTHON):
        return "needs setpriv and /usr/bin/python3"
    same = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if same != str(tuple(__import__("sys").version_info[:2])):
        return "the system python3 is not the test venv's version (its packages would not load)"
    for packages in site.getsitepackages():
        for parent in [Path(packages), *Path(packages).parents]:
            if not os.stat(parent).st_mode & 0o001:
                return f"{parent} is not searchable by other users"
    for parent in [REPO, *REPO.parents]:
        if not os.stat(parent).st_mode & 0o001:
            return f"{parent} is not searchable by other users"
    return None


@pytest.fixture
def nobody_root():
    """A folder the unprivileged user can reach (pytest's own tmp folders are 0700 and shared)."""
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="nanobot-nobody-"))
    os.chmod(root, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("mechanism", by_mechanism(MECHANISMS))
def test_an_unprivileged_user_is_confined_too(nobody_root, mechanism, canary_tcp):
    why = _usable()
    if why:
        pytest.skip(why)
    root = nobody_root
    home, ws, outside = root / "home", root / "ws", root / "outside"
    for d in (home / ".ssh", home / ".nanobot", ws / "memory", outside):
        d.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("CANARY-NOBODY-SSH")
    (home / ".nanobot" / "config.json").write_text('{"note": "CANARY-NOBODY-CONFIG"}')
    (outside / "precious.txt").write_text("keep")
    (ws / "memory" / "MEMORY.md").write_text("# facts\n")
    (root / "probe.py").write_text(PROBE)
    for path in [root, *root.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    commands = [
        "echo ok > made.txt",
        "cat ~/.ssh/id_rsa ~/.nanobot/config.json",
        f"rm -rf {outside}; echo x > {outside}/precious.txt; chmod 000 {outside}/precious.txt",
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {canary_tcp.port}), 2)\"",
        f"bash -c 'echo x > /dev/tcp/127.0.0.1/{canary_tcp.port}'",
        "setsid sleep 9411 >/dev/null 2>&1 </dev/null & nohup sleep 9412 >/dev/null 2>&1 &",
    ]
    own = (
        home / ".nanobot" / "journal",
    )  # nanobot's memory journal: written by nanobot, not the commands
    before = snapshot(home, outside, skip=own)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "NANOBOT_HOME": str(home / ".nanobot"),
        "LANG": "C.UTF-8",
    }
    try:
        run = subprocess.run(
            [
                "setpriv",
                f"--reuid={NOBODY}",
                f"--regid={NOBODY}",
                "--clear-groups",
                SYSTEM_PYTHON,
                "-I",
                str(root / "probe.py"),
                str(REPO),
                mechanism,
                str(ws),
                json.dumps(commands),
                json.dumps(site.getsitepackages()),
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=root,
            timeout=120,
        )
        time.sleep(0.2)
        survivors = host_pids("9411") + host_pids("9412")
    finally:
        kill_marked("9411")
        kill_marked("9412")
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if result["mechanism"] != mechanism:
        pytest.skip(f"{mechanism} does not work for an unprivileged user here")
    text = json.dumps(result["outputs"])
    assert (ws / "made.txt").read_text() == "ok\n"
    assert "CANARY-NOBODY" not in text
    assert snapshot(home, outside, skip=own) == before
    assert canary_tcp.connections == 0
    assert survivors == []


EGRESS_PROBE = textwrap.dedent("""
    import asyncio, json, sys
    sys.path[:0] = [sys.argv[1], *json.loads(sys.argv[5])]
    from pathlib import Path
    from nanobot.policy.egress import EgressPolicy
    from nanobot.sandbox import choose
    from nanobot.tools.base import ToolContext
    from nanobot.tools.exec_rules import ExecRules
    from nanobot.tools.safe_http import AddressPolicy, SafeFetcher
    from nanobot.tools.shell import ExecTool

    async def to_canary(host, port):
        return ["127.0.0.1"]

    conf = choose(sys.argv[2])
    ctx = ToolContext(workspace=Path(sys.argv[3]), confinement=conf, exec_rules=ExecRules(network=True),
                      egress=EgressPolicy(("news.test",)))
    tool = ExecTool(ctx, checker=SafeFetcher(AddressPolicy.allowing("127.0.0.1/32"), resolver=to_canary))
    outputs = [asyncio.run(tool.run(command=c)) for c in json.loads(sys.argv[4])]
    print(json.dumps({"mechanism": conf.mechanism, "filters": conf.filters_egress,
                      "namespace": conf.egress_namespace, "outputs": outputs}))
""")


@pytest.mark.parametrize("mechanism", by_mechanism(MECHANISMS))
def test_an_unprivileged_users_command_reaches_only_what_the_egress_proxy_allows(
    nobody_root, mechanism, canary_tcp
):
    """Network allowed, as uid 65534: a named domain reaches the canary through nanobot's proxy; a
    direct connection to the same port, and another domain, do not (tools/egress_proxy.py)."""
    why = _usable()
    if why:
        pytest.skip(why)
    root, ws = nobody_root, nobody_root / "ws"
    ws.mkdir()
    (root / "probe.py").write_text(EGRESS_PROBE)
    for path in [root, *root.rglob("*")]:
        os.chown(path, NOBODY, NOBODY)
    port = canary_tcp.port
    commands = [
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\"",
        f"curl -s -m 5 http://other.test:{port}/",
        f"curl -s -m 5 -o got.txt http://news.test:{port}/",
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root),
        "NANOBOT_HOME": str(root / ".nanobot"),
        "LANG": "C.UTF-8",
    }
    run = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            SYSTEM_PYTHON,
            "-I",
            str(root / "probe.py"),
            str(REPO),
            mechanism,
            str(ws),
            json.dumps(commands),
            json.dumps(site.getsitepackages()),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    if result["mechanism"] != mechanism or not result["filters"]:
        pytest.skip(f"{mechanism} cannot hold an unprivileged user's commands to the proxy here")
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    assert (ws / "got.txt").read_text() == "canary" and canary_tcp.connections == 1, result[
        "outputs"
    ]
    assert "egress proxy refused 1 host(s): other.test" in result["outputs"][1]
