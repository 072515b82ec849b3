"""What exec can still touch (issue 32, attack 9), under bubblewrap and Landlock, default and
restricted, judged by side effects: the host's secret files are not readable (even as root), no
setuid or setgid bit survives a command, a hard link in the workspace does not carry a write
outside it, and a working_dir outside the workspace is not used without the user's yes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from nanobot.app import open_assistant
from nanobot.config import load_config
from nanobot.fakellm import Reply
from nanobot.tools.approval import Decision
from nanobot.tools.base import ToolContext
from nanobot.tools.exec_rules import ExecRules
from nanobot.tools.shell import ExecTool

from canaries import by_mechanism

SECRET_FILES = ["/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"]


def _tool(ws: Path, confinement, restrict: bool) -> ExecTool:
    return ExecTool(
        ToolContext(
            workspace=ws,
            confinement=confinement,
            restrict_to_workspace=restrict,
            exec_rules=ExecRules(network=False),
        )
    )


def _run(tool: ExecTool, command: str) -> str:
    return asyncio.run(tool.run(command=command))


@pytest.fixture
def ws(isolated_home) -> Path:
    root = isolated_home / "workspace"
    root.mkdir(parents=True)
    return root


@pytest.mark.parametrize("restrict", [False, True], ids=["default", "restricted"])
def test_the_hosts_secret_files_are_hidden(ws, confinement, restrict):
    readable = [p for p in SECRET_FILES if os.access(p, os.R_OK) and Path(p).stat().st_size > 0]
    if not readable:
        pytest.skip(
            "this test process cannot read /etc/shadow itself (run as root to prove the hiding)"
        )
    out = _run(
        _tool(ws, confinement, restrict),
        "cat /etc/shadow /etc/gshadow /etc/shadow- /etc/gshadow- > stolen.txt 2>/dev/null; "
        "cp /etc/shadow copy.txt 2>/dev/null; ls -A /root /home > homes.txt 2>/dev/null; "
        "head -c 4 /etc/passwd",
    )
    assert out.startswith("root")  # the rest of /etc stays readable
    stolen = (ws / "stolen.txt").read_bytes() + (
        (ws / "copy.txt").read_bytes() if (ws / "copy.txt").exists() else b""
    )
    for path in readable:
        first = Path(path).read_bytes().splitlines()[0]
        assert first not in stolen, path
    homes = (ws / "homes.txt").read_text() if (ws / "homes.txt").exists() else ""
    assert not [
        n for n in os.listdir("/home") if n in homes.split()
    ]  # other users' homes: not listed


def test_the_hosts_ssh_keys_are_hidden(ws, confinement, monkeypatch):
    # The host's keys are found by a pattern. A canary key is planted under a name only this test's
    # pattern matches: one matching the real pattern would be hidden by the other workers' sandboxes
    # too, which fail when it vanishes between their check and their mount.
    import fnmatch

    from nanobot.sandbox import policy

    assert any(
        fnmatch.fnmatch("/etc/ssh/ssh_host_ed25519_key", g) for g in policy.HOST_SECRET_GLOBS
    )
    if os.geteuid() != 0:
        pytest.skip("only root can plant a host key to prove the hiding")
    made = not Path("/etc/ssh").exists()
    key = Path(f"/etc/ssh/nanobot_canary_host{os.getpid()}_key")
    canary = f"CANARY-HOST-KEY-{os.getpid()}"
    try:
        key.parent.mkdir(exist_ok=True)
        key.write_text(canary)
        key.chmod(0o600)
    except OSError as exc:
        pytest.skip(f"cannot plant a host key here: {exc}")
    monkeypatch.setattr(
        policy,
        "HOST_SECRET_GLOBS",
        (*policy.HOST_SECRET_GLOBS, "/etc/ssh/nanobot_canary_host*_key"),
    )
    try:
        _run(
            _tool(ws, confinement, False),
            f"cat /etc/ssh/*_key > stolen.txt 2>/dev/null; cp {key} copy.txt 2>/dev/null; "
            "head -c 4 /etc/passwd > passwd.txt",
        )
    finally:
        key.unlink()
        if made:
            key.parent.rmdir()
    assert (ws / "passwd.txt").read_text() == "root"  # the command ran, and /etc is readable
    stolen = (ws / "stolen.txt").read_text() + (
        (ws / "copy.txt").read_text() if (ws / "copy.txt").exists() else ""
    )
    assert canary not in stolen


def test_a_command_run_by_root_has_no_capabilities(ws, confinement):
    if os.geteuid() != 0:
        pytest.skip("a non-root user has none to drop")
    _run(_tool(ws, confinement, False), "grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status > caps.txt")
    caps = dict(line.split(":") for line in (ws / "caps.txt").read_text().splitlines())
    assert {k: int(v, 16) for k, v in caps.items()} == {"CapPrm": 0, "CapEff": 0, "CapAmb": 0}


def test_a_root_command_cannot_unmount_what_hides_a_secret(ws, confinement):
    # run by root, bubblewrap left the command CAP_SYS_ADMIN in its namespace: `umount /etc/shadow`
    # took the hiding bind away and the real file was read
    readable = [p for p in SECRET_FILES if os.access(p, os.R_OK) and Path(p).stat().st_size > 0]
    if os.geteuid() != 0 or not readable:
        pytest.skip("only root can read the host's secret files to prove they stay hidden")
    _run(
        _tool(ws, confinement, False),
        "for f in /etc/shadow /etc/gshadow; do umount $f; umount -l $f; done 2>/dev/null; "
        "mount -o remount,rw /etc 2>/dev/null; cat /etc/shadow /etc/gshadow > stolen.txt 2>/dev/null; "
        "touch /etc/nanobot-remount-canary 2>/dev/null; true",
    )
    stolen = (ws / "stolen.txt").read_bytes()
    for path in readable:
        assert Path(path).read_bytes().splitlines()[0] not in stolen, path
    assert not Path("/etc/nanobot-remount-canary").exists()


def test_system_folders_are_read_only_even_to_root(ws, confinement):
    if os.geteuid() != 0:
        pytest.skip("only root could write there unconfined: run as root to prove it")
    planted = [Path(f"{d}/nanobot-canary-{os.getpid()}") for d in ("/etc", "/usr", "/var", "/opt")]
    try:
        _run(
            _tool(ws, confinement, False),
            "; ".join(f"echo x > {p}" for p in planted) + "; echo ran",
        )
        written = [p for p in planted if p.exists()]
    finally:
        for p in planted:
            p.unlink(missing_ok=True)
    assert written == []


def test_no_setuid_or_setgid_bit_survives_a_command(ws, confinement):
    # the seccomp filter refuses the bits; it is the same with restrictToWorkspace and without
    _run(
        _tool(ws, confinement, False),
        "cp /bin/true a; chmod 4755 a; chmod u+s a; chmod g+s a; install -m 4755 /bin/true b; "
        "mkdir -m 2755 c; mkdir d; chmod 2775 d; "
        "python3 -c \"import os; os.close(os.open('e', os.O_CREAT | os.O_WRONLY, 0o6755))\"; "
        "python3 -c \"import os; os.mknod('f', 0o104755)\"; cp -p /bin/true g && chmod 4711 g; true",
    )
    flagged = [str(p) for p in ws.rglob("*") if os.lstat(p).st_mode & (stat.S_ISUID | stat.S_ISGID)]
    assert flagged == []
    assert (ws / "a").exists()  # the command ran; only the bits were refused


def test_a_hard_link_does_not_carry_a_write_outside(ws, confinement, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's file\n")
    os.link(outside, ws / "link.txt")
    before = hashlib.sha256(outside.read_bytes()).hexdigest()
    tool = _tool(ws, confinement, False)
    out = _run(
        tool,
        "echo pwn >> link.txt; truncate -s 0 link.txt; cp /dev/null link.txt; "
        "python3 -c \"open('link.txt', 'w').write('x')\"; cat link.txt",
    )
    assert hashlib.sha256(outside.read_bytes()).hexdigest() == before
    assert "the user's file" in out  # still readable
    _run(tool, "echo ordinary > new.txt")  # the rest of the workspace stays writable
    assert (ws / "new.txt").read_text() == "ordinary\n"


class SaysNo:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    async def approve(self, request):
        self.kinds.append(request.kind)
        return Decision(False, "the user said no")


@pytest.mark.parametrize("who", ["chat-n", "one-shot"])
@pytest.mark.parametrize("mechanism", by_mechanism(["bwrap", "landlock"]))
def test_a_working_dir_outside_the_workspace_needs_the_user(
    configure, fake_llm, isolated_home, mechanism, who
):
    from canaries import confinement_or_skip

    confinement_or_skip(mechanism)
    cfg_path = configure()
    data = json.loads(cfg_path.read_text())
    data["tools"] = {"exec": {"confinement": mechanism}}
    cfg_path.write_text(json.dumps(data))
    ws = isolated_home / "workspace"
    calls = [
        ("exec", {"command": f"ls > {ws}/listing-{n}.txt", "working_dir": where})
        for n, where in enumerate(["/", "/etc", "/usr/lib"])
    ]
    fake_llm.script(Reply.tool_calls(calls), Reply.text("done"))
    ask = SaysNo() if who == "chat-n" else None

    async def go():
        assistant = open_assistant(load_config(cfg_path), "cli:direct", stream=False, ask=ask)
        try:
            return await assistant.conversation.send("look around")
        finally:
            await assistant.aclose()

    asyncio.run(go())
    assert list(ws.glob("listing-*")) == []
    if ask is not None:
        assert ask.kinds == ["file-outside"] * 3
