"""bubblewrap: the policy as a bwrap command line (mount, PID, network and user namespaces)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from functools import lru_cache
from pathlib import Path

from nanobot.sandbox.limits import is_running, stat_fields
from nanobot.sandbox.policy import Policy


@lru_cache(maxsize=8)
def probe(path_env: str) -> tuple[str | None, str]:
    """(bwrap path, version) when bwrap is on PATH and can build a sandbox here, else (None, why)."""
    exe = shutil.which("bwrap", path=path_env)
    if exe is None:
        return None, "bwrap is not on PATH"
    try:
        run = subprocess.run(
            [
                exe,
                "--unshare-all",
                "--die-with-parent",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--",
                "/bin/true",
            ],
            capture_output=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        )
        version = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bwrap could not run: {exc}"
    if run.returncode != 0:
        why = run.stderr.decode(errors="replace").strip().splitlines()[-1:] or [
            f"exit {run.returncode}"
        ]
        return None, f"bwrap cannot create namespaces here ({why[0]})"
    return exe, version or "bubblewrap"


def _hide(path: Path) -> list[str]:
    if path.is_dir():
        return ["--tmpfs", str(path)]
    if path.exists():
        return ["--ro-bind", "/dev/null", str(path)]
    return []


_TMP = Path("/tmp")


@lru_cache(maxsize=64)
def _outermost(paths: tuple[Path, ...]) -> list[Path]:
    """Drop paths that lie inside another one of the list (hiding the outer one hides them).
    The same few lists come with every command of a session, hence the cache (~1 ms a call)."""
    return [p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)]


def argv(
    exe: str,
    policy: Policy,
    cwd: Path,
    command: str,
    *,
    info_fd: int | None = None,
    seccomp_fd: int | None = None,
) -> list[str]:
    """`info_fd`: where bwrap writes the host pid of the sandbox's init (see `end_namespace`);
    `seccomp_fd`: a file holding the filter of sandbox/seccomp.py (no setuid/setgid bits)."""
    ws = policy.workspace
    # --cap-drop ALL: run by root, bwrap leaves the command nearly every capability in its namespaces,
    # and CAP_SYS_ADMIN there unmounts what hides a secret (`umount /etc/shadow` showed the real file)
    a = [exe, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    if info_fd is not None:
        a += ["--info-fd", str(info_fd)]
    if seccomp_fd is not None:
        a += ["--seccomp", str(seccomp_fd)]
    if policy.network:
        a.append("--share-net")
    if policy.restrict:  # rule 4: only the system folders outside the workspace
        for d in policy.system_dirs():
            a += (
                ["--symlink", os.readlink(d), str(d)]
                if d.is_symlink()
                else ["--ro-bind", str(d), str(d)]
            )
        for secret in policy.hidden_in_system_dirs():  # rule 3: the host's secrets in them
            a += _hide(secret)
    else:
        a += ["--ro-bind", "/", "/"]
    a += ["--dev", "/dev", "--proc", "/proc"]
    if (
        not policy.restrict
    ):  # rule 3 (in restricted mode nothing of these was bound in the first place)
        outside = tuple(h for h in policy.hidden_outside_workspace() if h != _TMP)
        for h in _outermost(outside):
            a += _hide(h)
    a += [
        "--size",
        str(policy.limits.tmp_size),
        "--tmpfs",
        "/tmp",
        "--setenv",
        "TMPDIR",
        "/tmp",
    ]  # rule 1
    for extra in _outermost(
        (*policy.toolchains, *policy.extra_read)
    ):  # an outer bind shows what is inside it
        a += ["--ro-bind", str(extra), str(extra)]
    a += ["--bind", str(ws), str(ws)]
    for ro in policy.read_only:  # rule 2
        if ro.exists():
            a += ["--ro-bind", str(ro), str(ro)]
    for h in _outermost(tuple(policy.hidden_inside_workspace())):
        a += _hide(h)
    a += ["--chdir", str(cwd), "--", "/bin/sh", "-c", command]
    return a


def end_namespace(info_fd: int, within: float = 2.0) -> bool:
    """After a command: make sure no process of its sandbox (the bwrap whose `--info-fd` is
    `info_fd`) is left; True when none is.

    bwrap exits as soon as the command's shell does. Its init inside the PID namespace is then
    SIGKILLed (--die-with-parent), and the kernel kills every process of the namespace before that
    init becomes a zombie; under load this can take a few milliseconds, during which a background
    child of the command still runs (CI once saw three). So this waits for that init, and if it is
    not gone at once, SIGKILLs each process of its namespace itself. Where a pids cgroup is, its
    kill comes first (`Launch.finish`), and this mostly finds the init gone."""
    try:
        info = os.pread(info_fd, 4096, 0)
        init = int(json.JSONDecoder().raw_decode(info.decode())[0]["child-pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return True  # bwrap never set the sandbox up: there is no namespace
    if _ended(init):
        return True
    namespace = _pid_namespace(init)
    if namespace is not None:
        for entry in os.listdir("/proc"):
            if entry.isdigit() and _pid_namespace(int(entry)) == namespace:
                _kill_if_in(int(entry), namespace)
    deadline = time.monotonic() + within
    pause = 0.0005
    while not _ended(init):
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    return True


def _ended(pid: int) -> bool:
    """Gone, or a zombie: an init is one only once every process of its namespace is gone."""
    return not is_running(stat_fields(pid))


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _kill_if_in(pid: int, namespace: str) -> None:
    """SIGKILL `pid` if it is (still) in `namespace`, through a pidfd, so that a pid reused
    between the scan and the signal is never hit."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return  # gone already
    try:
        if _pid_namespace(pid) == namespace:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)
