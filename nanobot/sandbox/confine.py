"""Which confinement this machine gives exec, and how one command is launched under it.

`choose(mode)` is the one owner of "what is active": `nanobot status`, the chat's first
line and the exec tool all ask it. It never claims a sandbox that is not there: when
neither bubblewrap nor Landlock works, the answer is mechanism "none" with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from nanobot.config import CONFINEMENTS as MODES  # noqa: F401 - re-exported by nanobot.sandbox
from nanobot.sandbox import bwrap, landlock, seccomp
from nanobot.sandbox.keeper import (
    EGRESS_PORT,
    LandlockLaunch,
    egress_listener,
    mount_setattr_available,
    user_namespace_mounts_work,
)
from nanobot.sandbox.limits import (
    PidsCgroup,
    apply_rlimits,
    cgroup_available,
    left_by_dead_processes,
    nproc_counts_command_only,
)
from nanobot.sandbox.policy import Limits, Policy, beneath_except
from nanobot.threads import start_quiet


@dataclass
class Launch:
    """How to start one command: argv, environment additions, a preexec hook, and the cleanup."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    preexec_fn: Callable[[], None] | None = None
    pass_fds: tuple[int, ...] = ()  # left open in the child (a cleanup closes the parent's copies)
    keeper: LandlockLaunch | None = (
        None  # the same hook, for the launcher to run (launcher.py) instead of a fork here
    )
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    cgroup: PidsCgroup | None = None
    signal_as_code: bool = False  # bwrap reports a command killed by signal N as exit code 128+N
    egress_channel: socket.socket | None = (
        None  # receives the egress proxy's listener from the command's namespace
    )

    def returncode(self, code: int | None) -> int | None:
        if self.signal_as_code and code is not None and 128 < code <= 128 + 64:
            return 128 - code  # as subprocess reports it: -N
        return code

    def close_parent_fds(self, fds: list[int]) -> None:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    @contextmanager
    def undone_on_error(self) -> Iterator[None]:
        """Around the rest of a launch's preparation: if it raises, what is ready so far is cleaned up."""
        try:
            yield
        except BaseException:
            self.finish()
            raise

    def finish(self) -> None:
        """After the command: kill whatever is left in its cgroup, remove temp state."""
        if self.cgroup is not None:
            self.cgroup.kill_all()
            self.cgroup.remove()
        for cleanup in self.cleanups:
            cleanup()


@dataclass(frozen=True)
class Confinement:
    mechanism: str  # "bwrap" | "landlock" | "none"
    detail: str  # "bubblewrap 0.8.0", "Landlock ABI 7", or why there is none
    process_limit: str = ""  # what bounds a fork bomb here
    _bwrap: str = ""  # path of the bwrap executable
    _abi: int = 0
    _pids_cgroup: bool = (
        False  # process_limit is a pids cgroup: a command that cannot have one is not run
    )

    @property
    def confined(self) -> bool:
        return self.mechanism != "none"

    @property
    def filters_egress(self) -> bool:
        """Whether a command allowed the network can be held to nanobot's egress proxy: a network
        namespace of its own (`egress_namespace`), else TCP connect to one port (Landlock ABI 4) and
        no UDP or raw sockets (the seccomp filter)."""
        return self.confined and (
            self.egress_namespace or (self._abi >= 4 and seccomp.program(tcp_only=True) is not None)
        )

    @property
    def egress_namespace(self) -> bool:
        """Whether a command held to the proxy gets a network namespace of its own (only loopback, the
        proxy listening in it on EGRESS_PORT), rather than the host's network with TCP connect limited
        by port (Landlock cannot tell addresses apart: any host on the proxy's port would do)."""
        if self.mechanism == "bwrap":
            return os.geteuid() == 0  # unshare(CLONE_NEWNET) before bwrap starts
        return self.mechanism == "landlock" and _can_private_mounts()

    def egress_port(self) -> int:
        """The port the proxy must listen on for this mechanism's commands (0: any free one on the host)."""
        return EGRESS_PORT if self.filters_egress and self.egress_namespace else 0

    @property
    def memory_read_only(self) -> bool:
        """Whether commands cannot change the workspace's memory/ (else: check it after each command)."""
        return self.mechanism == "bwrap" or (self.mechanism == "landlock" and _can_private_mounts())

    def describe(
        self, *, network: bool | str = "ask", restrict: bool = False, unconfined_ok: bool = False
    ) -> str:
        """One line for `nanobot status`, /status and the chat's first line. Claims only what holds."""
        if not self.confined:
            then = (
                "commands run without asking (you chose this)"
                if unconfined_ok
                else "every command needs your approval"
            )
            return f"NOT confined ({self.detail}); {then}"
        net = {False: "no network", True: "network allowed", "ask": "network only when approved"}[
            network
        ]
        if network is not False:
            net += (
                ", through nanobot's proxy: each new domain asked"
                if self.filters_egress
                else ", to every host (per-domain egress NOT enforced: needs a network namespace or Landlock ABI 4)"
            )
        parts = [self.detail, "writes only to the workspace and a private tmp"]
        if not self.memory_read_only:
            parts.append(
                "protected files (memory/, cron/, prompt files, .git settings) NOT read-only but checked "
                "after each command, chmod/utime outside NOT blocked (need a mount namespace)"
            )
            if network is not True:
                net += (
                    " (Landlock blocks TCP; UDP is open)"
                    if self._abi >= 4
                    else " NOT enforced (Landlock ABI < 4)"
                )
        else:
            parts.append("protected files (memory/, cron/, prompt files, .git settings) read-only")
        parts.append(
            "only system folders visible outside it"
            if restrict
            else "home, nanobot files and credential stores hidden"
        )
        parts += [net, "nothing outlives a command", f"processes {self.process_limit}"]
        if (
            seccomp.missing()
        ):  # said where the sandbox is described, rather than silently lacking it
            parts.append(f"setuid/setgid bits NOT blocked ({seccomp.missing()})")
        return " · ".join(parts)

    def prepare(self, policy: Policy, cwd: Path, command: str) -> Launch:
        if self.mechanism == "bwrap":
            return self._prepare_bwrap(policy, cwd, command)
        if self.mechanism == "landlock":
            return self._prepare_landlock(policy, cwd, command)
        return Launch(["/bin/sh", "-c", command])

    # --- bubblewrap -------------------------------------------------------------------
    def _prepare_bwrap(self, policy: Policy, cwd: Path, command: str) -> Launch:
        info = _info_file()
        code = seccomp.program(tcp_only=policy.proxy_port > 0 and not self.egress_namespace)
        filter_fd = _memory_file("nanobot-seccomp", code) if code else None
        fds = (info,) if filter_fd is None else (info, filter_fd)
        launch = Launch(
            bwrap.argv(self._bwrap, policy, cwd, command, info_fd=info, seccomp_fd=filter_fd),
            signal_as_code=True,
            pass_fds=fds,
        )

        def end() -> None:
            bwrap.end_namespace(info)
            launch.close_parent_fds(list(fds))

        launch.cleanups.append(end)
        with launch.undone_on_error():
            _attach_limits(
                launch, policy.limits, nproc=nproc_counts_command_only(), cgroup=self._pids_cgroup
            )
            if (
                policy.proxy_port
            ):  # --share-net: the namespace made here, or the host's network held by port
                self._hold_to_proxy(launch, policy.proxy_port)
        return launch

    def _hold_to_proxy(self, launch: Launch, port: int) -> None:
        """Before bwrap starts: a network namespace of its own with the proxy's listener in it, or else
        a Landlock domain allowing TCP connect only to `port` (network-only: bwrap's mounts are untouched)."""
        before = launch.preexec_fn
        if self.egress_namespace:
            fd = _egress_channel(launch)

            def preexec() -> None:
                if before is not None:
                    before()
                egress_listener(fd, new_namespace=True)
        else:
            ruleset = landlock.Ruleset(self._abi, block_tcp=True, fs=False)
            launch.cleanups.append(ruleset.close)
            ruleset.allow_port(port)
            fd = ruleset.fd

            def preexec() -> None:
                if before is not None:
                    before()
                landlock.restrict_self(fd)

        launch.preexec_fn = preexec

    # --- Landlock ---------------------------------------------------------------------
    def _prepare_landlock(self, policy: Policy, cwd: Path, command: str) -> Launch:
        private = _can_private_mounts()
        tmp = _private_tmp()
        launch = Launch(
            ["/bin/sh", "-c", command],
            env={"TMPDIR": str(tmp)},
            cleanups=[lambda: shutil.rmtree(tmp, ignore_errors=True)],
        )
        proxied = policy.network and policy.proxy_port > 0
        in_namespace = (
            proxied and self.egress_namespace
        )  # (private mounts: it makes the network namespace)
        by_port = proxied and not in_namespace
        ruleset = landlock.Ruleset(
            self._abi, block_tcp=(not policy.network and not private) or by_port
        )
        launch.cleanups.append(ruleset.close)
        with launch.undone_on_error():
            if by_port:
                ruleset.allow_port(policy.proxy_port)
            ws = policy.workspace
            base = (
                _visible_system_dirs(policy)
                if policy.restrict  # rule 4
                else _visible_outside(policy.hidden)
            )
            ruleset.allow_all(
                [*base, *policy.extra_read, *policy.toolchains, Path("/proc")], landlock.READ
            )
            ruleset.allow(Path("/dev"), landlock.READ | landlock.IOCTL_DEV)
            ruleset.allow_all(_DEVICES, ruleset.all_fs)
            ruleset.allow_all(  # rule 1 (rule 3 inside)
                [*beneath_except(ws, policy.hidden_inside_workspace()), tmp], ruleset.all_fs
            )
            hook = LandlockLaunch(
                ruleset_fd=ruleset.fd,
                limits=policy.limits,
                cgroup_fd=-1,
                private_mounts=private,
                new_net=private and (not policy.network or in_namespace),
                read_only=tuple(p for p in policy.read_only if p.exists()),
                nproc=os.geteuid() != 0,
                workspace=ws,
                tmp=tmp,
                user_namespace=private and os.geteuid() != 0,
                shown=(*policy.toolchains, *policy.extra_read),
                seccomp=seccomp.program(tcp_only=by_port),
                egress_fd=_egress_channel(launch) if in_namespace else -1,
            )
            if private:
                launch.env["TMPDIR"] = "/tmp"  # the private tmp is mounted there
            launch.preexec_fn = launch.keeper = hook
            cg = _command_cgroup(policy.limits, required=self._pids_cgroup)
            if cg is not None:
                launch.cgroup = cg
                hook.cgroup_fd = fd = cg.open_procs()
                launch.cleanups.append(lambda: launch.close_parent_fds([fd]))
            elif hook.nproc and not hook.user_namespace:
                # without a user namespace RLIMIT_NPROC counts all the user's processes: leave room for them
                hook.limits = Limits(
                    **{
                        **policy.limits.__dict__,
                        "processes": _user_processes() + policy.limits.processes,
                    }
                )
        return launch


_DEVICES = tuple(
    Path(p) for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/ptmx")
)  # writable in /dev for a Landlock command


def _egress_channel(launch: Launch) -> int:
    """A socket pair: nanobot keeps one end (`launch.egress_channel`), the command's side gets the other's
    fd, to send the egress proxy's listener made in its network namespace (keeper.egress_listener)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    launch.egress_channel = ours
    launch.cleanups += [ours.close, theirs.close]
    return theirs.fileno()


def _info_file() -> int:
    """A descriptor for bwrap's --info-fd: a file, not a pipe. bwrap writing to a pipe whose reader
    has died (nanobot SIGKILLed) is killed by SIGPIPE in the middle of its setup, which leaves the
    sandbox's init waiting forever. A file in memory, or an unlinked one where memfd is refused."""
    try:
        return os.memfd_create("nanobot-bwrap-info", os.MFD_CLOEXEC)
    except OSError:
        with tempfile.TemporaryFile() as file:
            return os.dup(file.fileno())  # O_CLOEXEC: os.dup makes it non-inheritable


def _memory_file(name: str, data: bytes) -> int:
    """A descriptor of an in-memory file holding `data`, read from its start (bwrap's --seccomp)."""
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    except OSError:
        with tempfile.TemporaryFile() as file:
            fd = os.dup(file.fileno())
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _command_cgroup(limits: Limits, *, required: bool) -> PidsCgroup | None:
    """The command's own pids cgroup. Where the confinement's status promised one, a command
    that cannot have it is not run (OSError, reported by the exec tool) rather than run unbounded."""
    cg = PidsCgroup.create(limits)
    if cg is None and required:
        raise OSError("the pids cgroup that bounds its processes could not be made")
    return cg


def _attach_limits(launch: Launch, limits: Limits, *, nproc: bool, cgroup: bool) -> None:
    """rlimits and the pids cgroup (`cgroup`: required) for a launch whose argv is the sandbox
    program itself.

    Through `prlimit` and a one-line shell when they exist, so the spawn can use vfork; a
    preexec hook (a full fork of this process) costs several milliseconds more per command.
    """
    cg = _command_cgroup(limits, required=cgroup)
    if cg is not None:
        launch.cgroup = cg
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        fd = cg.open_procs() if cg is not None else -1

        def preexec() -> None:
            if fd >= 0:
                os.write(fd, b"0")
            apply_rlimits(limits, nproc=nproc)

        launch.preexec_fn = preexec
        if fd >= 0:
            launch.cleanups.append(lambda: launch.close_parent_fds([fd]))
        return
    caps = [f"--fsize={limits.file_size}", f"--data={limits.memory}", "--core=0"]
    if nproc:
        caps.append(f"--nproc={limits.processes}")
    argv = [prlimit, *caps, "--", *launch.argv]
    if (
        cg is not None
    ):  # enter the cgroup first, so everything after it is counted; no cgroup, no run
        argv = [
            "/bin/sh",
            "-c",
            'echo 0 > "$0" || exit 126; exec "$@"',
            str(cg.path / "cgroup.procs"),
            *argv,
        ]
    launch.argv = argv


def _private_tmp() -> Path:
    """A new TMPDIR for one Landlock command, named after this process so that the folders of a
    nanobot killed mid-command (its cleanups never ran) are removed by the next one."""
    parent = Path(tempfile.gettempdir())
    for stale in left_by_dead_processes(parent):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"nanobot-exec-{os.getpid()}-", dir=parent))


@lru_cache(maxsize=8)
def _visible_outside(hidden: tuple[Path, ...]) -> list[Path]:
    """The folders that together show / minus the hidden ones (walked once per process)."""
    return beneath_except(Path("/"), list(hidden))


def _visible_system_dirs(policy: Policy) -> list[Path]:
    """Restricted mode's system folders minus the host's secrets in them (rule 3)."""
    holes = policy.hidden_in_system_dirs()
    return [p for d in policy.system_dirs() for p in beneath_except(d, holes)]


def _user_processes() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += os.stat(f"/proc/{entry}").st_uid == uid
            except OSError:
                pass
    return count


@lru_cache(maxsize=1)
def _can_private_mounts() -> bool:
    """Whether a child may make its own mount and network namespaces and set mounts read-only
    (root, or an ordinary user where user namespaces are allowed)."""
    if not mount_setattr_available():
        return False
    return os.geteuid() == 0 or user_namespace_mounts_work()


@lru_cache(maxsize=8)
def _process_limit(limits: Limits, mechanism: str) -> tuple[str, bool]:
    """What bounds a command's processes: the status line's words, and whether it is a pids cgroup."""
    if cgroup_available(limits):
        return f"<= {limits.processes} (pids cgroup)", True
    if os.geteuid() != 0:
        own_ns = mechanism == "bwrap" or _can_private_mounts()
        where = "per command, user namespace" if own_ns else "counted per user"
        return f"RLIMIT_NPROC ({where})", False
    return "NOT bounded (root ignores RLIMIT_NPROC and no pids cgroup could be made)", False


def _landlock(limits: Limits) -> Confinement | str:
    abi = landlock.abi_version()
    if abi < 1:
        return "Landlock is not available in this kernel"
    bound, cgroup = _process_limit(limits, "landlock")
    return Confinement("landlock", f"Landlock ABI {abi}", bound, _abi=abi, _pids_cgroup=cgroup)


def _bwrap(limits: Limits) -> Confinement | str:
    exe, detail = bwrap.probe(os.environ.get("PATH", os.defpath))
    if exe is None:
        return detail
    bound, cgroup = _process_limit(limits, "bwrap")
    return Confinement(
        "bwrap", detail, bound, _bwrap=exe, _abi=landlock.abi_version(), _pids_cgroup=cgroup
    )


_choosing = (
    threading.Lock()
)  # one probe at a time: a caller waits for a prefetch under way, then finds it cached


def prefetch(mode: str = "auto") -> None:
    """Start choose(mode)'s probes on a background thread. They mostly wait on child processes
    (bwrap runs twice, about 6 ms), so they overlap the caller's own work; its first choose()
    then waits for whatever of them is left and finds the answer cached."""
    start_quiet(choose, mode, name="confinement-probe")


def choose(mode: str = "auto", limits: Limits | None = None) -> Confinement:
    """The confinement `mode` ("auto", "bwrap", "landlock", "none") gives on this machine."""
    with _choosing:
        return _choose(mode, limits or Limits())


def _choose(mode: str, limits: Limits) -> Confinement:
    if mode == "none":
        return Confinement("none", 'tools.exec.confinement is "none"')
    if not sys.platform.startswith("linux"):
        return Confinement("none", f"no confinement on {sys.platform}")
    if mode == "bwrap":
        got = _bwrap(limits)
    elif mode == "landlock":
        got = _landlock(limits)
    else:
        got = _bwrap(limits)
        if isinstance(got, str):
            why = got
            got = _landlock(limits)
            if isinstance(got, str):
                got = f"{why}; {got}"
    return got if isinstance(got, Confinement) else Confinement("none", got)
