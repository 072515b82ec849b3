"""The exec tool: run a shell command in the workspace, confined by the OS, bounded in time and output.

Each command runs under the confinement nanobot/sandbox chose (bubblewrap, else Landlock):
the workspace writable, memory/ and system folders read-only, the nanobot home, credential
stores and the rest of HOME invisible, no network unless allowed, nothing left running when
it returns, limits on processes, file size and memory. Where no confinement works, every
command goes to the approver first. The user's allow / ask / deny patterns and the network
setting (tools/exec_rules.py) decide when to ask. Also: the environment loses its secrets,
the whole process group is killed on timeout or Ctrl-C, and output keeps head and tail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Awaitable, Iterable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from nanobot.errors import LauncherError, ToolError
from nanobot.errors import UnparsableCommand as Unparsable
from nanobot.memory.store import watch_memory
from nanobot.policy.commands import Command, parse, unreadable
from nanobot.policy.protected import exec_read_only, git_settings_note
from nanobot.policy.repos import Repos, find_repos, last_found
from nanobot.policy.watch import changes_since, take_snapshot
from nanobot.sandbox import Launch, build_policy, launcher
from nanobot.sandbox.limits import PidsCgroup, is_running, stat_fields
from nanobot.sandbox.policy import hard_links
from nanobot.secrets_mask import is_secret_name
from nanobot.tools.approval import ApprovalRequest, approve_flag_hint
from nanobot.tools.base import Tool, ToolContext
from nanobot.tools.egress_proxy import EgressProxy
from nanobot.tools.exec_rules import wants_network
from nanobot.tools.safe_http import SafeFetcher
from nanobot.tools.workspace_guard import resolve_path, review, workspace_root

__all__ = ["ExecTool", "child_env", "deny_reason", "OUTPUT_CAP"]

OUTPUT_CAP = 10_000  # characters of output returned to the model (head + tail)
_CAPTURE_BYTES = (
    64 * 1024
)  # per stream, head and tail each; the middle of huge output is counted, not kept


def child_env(environ: Mapping[str, str], secret_names: Iterable[str] = ()) -> dict[str, str]:
    """A copy of `environ` without the configured secret names and anything that looks secret."""
    drop = {n.upper() for n in secret_names}
    return {k: v for k, v in environ.items() if k.upper() not in drop and not is_secret_name(k)}


# --- the deny policy -----------------------------------------------------------------

_FORK_BOMB = re.compile(r"([A-Za-z_:.][\w:.]*)\s*\(\s*\)\s*\{[^}]*\1\s*\|\s*&?\s*\1\s*&")
_RAW_DISK = r"/dev/(?:sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme\d|mmcblk\d|disk\d|mapper/)"
_RAW_DISK_WRITE = re.compile(r">\s*" + _RAW_DISK)
_SEGMENT_SPLIT = re.compile(r"&&|\|\||[;&|\n()`]|\$\(")
_WRAPPERS = {
    "sudo",
    "doas",
    "command",
    "exec",
    "nohup",
    "time",
    "env",
    "nice",
    "ionice",
    "builtin",
    "busybox",
}
# reserved words a text segment may start with (only for lines the parser cannot read)
_KEYWORDS = {"{", "}", "!", "if", "then", "elif", "else", "do", "while", "until"}
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh"}
_POWER = {"shutdown", "reboot", "halt", "poweroff"}
_SYSTEM_DIRS = {
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/sbin",
    "/srv",
    "/sys",
    "/usr",
    "/var",
}


def _is_root_like(target: str) -> bool:
    """`/`, `/*`, `~`, `$HOME` and top-level system folders: never a reasonable recursive target."""
    t = target.strip()
    if t in {"~", "~/", "~/*", "$HOME", "${HOME}", "$HOME/", "${HOME}/", "$HOME/*", "${HOME}/*"}:
        return True
    if not t.startswith("/"):
        return False
    if t.endswith("/*"):
        t = t[:-2] or "/"
    return os.path.normpath(t).replace("//", "/") in _SYSTEM_DIRS


_ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")
_FLAGS_WITH_VALUE = {"-u", "-g", "-U", "-C", "-h", "-p"}  # sudo/doas options that take a value


def _command_words(segment: str) -> list[str]:
    """The words of one simple command, from the command name on.

    VAR=value prefixes and wrappers such as `sudo -u root` or `nice -n 5` are skipped, so
    `sudo rm -rf /` is judged as rm.
    """
    try:
        words = shlex.split(segment)
    except ValueError:
        words = segment.split()
    i = 0
    while i < len(words):
        word = words[i]
        if word in _WRAPPERS or word in _KEYWORDS or _ASSIGNMENT.match(word) or word.isdigit():
            i += 1
        elif word.startswith("-") and i > 0:
            i += 2 if word in _FLAGS_WITH_VALUE else 1
        else:
            break
    return words[i:]


def _recursive_flag(args: list[str]) -> bool:
    for a in args:
        if a in ("--recursive", "-R", "-r"):
            return True
        if a.startswith("-") and not a.startswith("--") and ("r" in a or "R" in a):
            return True
    return False


def _segment_reason(words: list[str], depth: int) -> str | None:
    if not words:
        return None
    cmd = os.path.basename(words[0])
    args = words[1:]
    if cmd in _SHELLS and "-c" in args and args.index("-c") + 1 < len(args) and depth < 3:
        return deny_reason(args[args.index("-c") + 1], depth + 1)
    if cmd == "eval" and depth < 3:
        return deny_reason(" ".join(args), depth + 1)
    if cmd == "rm":
        if "--no-preserve-root" in args:
            return "rm with --no-preserve-root"
        if _recursive_flag(args) and any(_is_root_like(a) for a in args if not a.startswith("-")):
            return "recursive rm of the root, a system folder or the home folder"
    if cmd in ("chmod", "chown", "chgrp") and _recursive_flag(args):
        if any(_is_root_like(a) for a in args if not a.startswith("-")):
            return f"recursive {cmd} of the root, a system folder or the home folder"
    if cmd.startswith("mkfs") or cmd in ("mke2fs", "wipefs"):
        return f"{cmd} formats or wipes a file system"
    if cmd == "dd" and any(re.match(r"of=" + _RAW_DISK, a) for a in args):
        return "dd writing to a raw disk device"
    if cmd in _POWER:
        return f"{cmd} would power off or restart the machine"
    if cmd == "systemctl" and any(
        a in _POWER or a in ("kexec", "suspend", "hibernate") for a in args
    ):
        return "systemctl power action would stop the machine"
    if cmd in ("init", "telinit") and any(a in ("0", "6") for a in args):
        return f"{cmd} {args[0]} would power off or restart the machine"
    return None


def _argv(command: Command) -> list[str]:
    """A parsed command's words as the accident list reads them (`"$HOME"` as `$HOME`)."""
    return [w.value if w.value is not None else w.raw.replace('"', "") for w in command.words]


def deny_reason(command: str, depth: int = 0) -> str | None:
    """Why `command` is refused, or None. It catches accidents (a wiped workspace), not an
    adversary: the sandbox is what holds against a rewrite of these commands.

    Every command the line runs is judged (nanobot/policy/commands.py: `{ rm -rf /; }`, an if or
    for body, `! rm -rf /`, `sh -c '...'`, `find -exec`); a line the parser cannot read is split
    as text instead, which is what this did before the parser."""
    if _FORK_BOMB.search(command):
        return "fork bomb"
    if _RAW_DISK_WRITE.search(command):
        return "redirecting output onto a raw disk device"
    try:
        commands = parse(command)
    except Unparsable:
        segments = [_command_words(segment) for segment in _SEGMENT_SPLIT.split(command)]
    else:
        segments, depth = (
            [_argv(c) for c in commands],
            3,
        )  # the parser already opened sh -c and eval
    for words in segments:
        reason = _segment_reason(words, depth)
        if reason:
            return reason
    return None


# --- running -------------------------------------------------------------------------


class _Capture:
    """Keeps the first and last _CAPTURE_BYTES of a stream and counts what fell between."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = _CAPTURE_BYTES - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > _CAPTURE_BYTES:
                cut = len(self.tail) - _CAPTURE_BYTES
                del self.tail[:cut]
                self.dropped += cut

    def texts(self) -> tuple[str, str]:
        if (
            not self.dropped
        ):  # contiguous: decode together so a character split at the seam survives
            return bytes(self.head + self.tail).decode("utf-8", errors="replace"), ""
        return self.head.decode("utf-8", errors="replace"), self.tail.decode(
            "utf-8", errors="replace"
        )

    def length(self) -> int:
        head, tail = self.texts()
        return len(head) + self.dropped + len(tail)

    def render(self, budget: int) -> str:
        """The stream in at most about `budget` characters: head, an omission marker, tail."""
        head, tail = self.texts()
        if not self.dropped:
            if len(head) <= budget:
                return head
            head, tail = head[: budget // 2], head[budget // 2 :]
            keep_tail = budget - len(head)
            omitted = len(tail) - keep_tail
            return (
                f"{head}\n[... {omitted:,} characters omitted ...]\n{tail[len(tail) - keep_tail :]}"
            )
        keep_head = min(len(head), budget // 2)
        keep_tail = min(len(tail), budget - keep_head)
        # The dropped middle was counted in bytes; for non-ASCII output that overstates characters.
        omitted = len(head) - keep_head + self.dropped + len(tail) - keep_tail
        return f"{head[:keep_head]}\n[... about {omitted:,} characters omitted ...]\n{tail[len(tail) - keep_tail :]}"


def _split_budget(a: int, b: int, total: int) -> tuple[int, int]:
    if a + b <= total:
        return a, b
    half = total // 2
    if a <= half:
        return a, total - a
    if b <= half:
        return total - b, b
    return half, total - half


def _format(out: _Capture, err: _Capture, returncode: int | None) -> str:
    out_budget, err_budget = _split_budget(out.length(), err.length(), OUTPUT_CAP)
    parts = []
    if out.length():
        parts.append(out.render(out_budget).rstrip("\n"))
    if err.length():
        parts.append("[stderr]\n" + err.render(err_budget).rstrip("\n"))
    if not parts:
        parts.append("(no output)")
    if returncode is not None:
        if returncode < 0:
            try:
                sig = signal.Signals(-returncode).name
            except ValueError:
                sig = str(-returncode)
            parts.append(f"[exit code: {returncode} (killed by {sig})]")
        else:
            parts.append(f"[exit code: {returncode}]")
    return "\n".join(parts)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies do not count).

    Orphaned grandchildren are reparented to PID 1, which in containers may reap them
    late; killpg(pgid, 0) would report those zombies as alive and stall the grace period.
    So it is asked first only for its cheap "no process at all" (the usual answer once a
    command returned), and /proc is scanned only when some process of the group exists.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    proc_dir = "/proc"
    if not os.path.isdir(proc_dir):
        return True
    for entry in os.listdir(proc_dir):
        if not entry.isdigit():
            continue
        fields = stat_fields(entry)
        if fields is not None and len(fields) > 2 and int(fields[2]) == pgid and is_running(fields):
            return True
    return False


class _Collector(asyncio.SubprocessProtocol):
    """Captures both pipes as data arrives; `finished` is set once the shell exited and both pipes closed."""

    def __init__(self) -> None:
        self.out = _Capture()
        self.err = _Capture()
        self.exited = asyncio.Event()
        self.finished = asyncio.Event()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        (self.out if fd == 1 else self.err).add(data)

    def process_exited(self) -> None:
        self.exited.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.finished.set()


async def _wait_event(event: asyncio.Event, timeout: float) -> bool:
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True


# A command whose forks its pids cgroup keeps refusing is a fork bomb, or as good as one: it is
# stopped once refusals came in RUNAWAY_CHECKS successive checks RUNAWAY_EVERY seconds apart (75 ms),
# instead of spinning on every core until its timeout. A command that meets the limit and waits
# (bash retries a refused fork a second later) is left to run.
RUNAWAY_EVERY = 0.025
RUNAWAY_CHECKS = 4


async def _until_runaway(cgroup: PidsCgroup) -> None:
    """Returns once `cgroup` has refused forks in RUNAWAY_CHECKS successive checks."""
    last, streak = cgroup.refused(), 0
    while streak < RUNAWAY_CHECKS:
        await asyncio.sleep(RUNAWAY_EVERY)
        now = cgroup.refused()
        streak = streak + 1 if now > last else 0
        last = now


async def _wait_finished(collector: _Collector, cgroup: PidsCgroup | None, timeout: float) -> str:
    """How the wait for a command ended: "finished", "timeout" or "runaway"."""
    done = asyncio.ensure_future(collector.finished.wait())
    waits: set[asyncio.Future[Any]] = {done}
    if cgroup is not None:
        waits.add(asyncio.ensure_future(_until_runaway(cgroup)))
    try:
        ended, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    if done in ended or collector.finished.is_set():
        return "finished"
    return "runaway" if ended else "timeout"


# Process groups exec started that may still hold a process, for `ExecTool.kill_all_running`.
_STARTED_GROUPS: set[int] = set()


class ExecTool(Tool):
    name = "exec"
    _base_description = (
        "Run a shell command (/bin/sh -c) in the workspace and return stdout, stderr and the exit code. "
        "No stdin (interactive programs get end-of-file). Long output keeps its head and tail. "
        "The command and everything it starts are killed at the timeout."
    )
    _confined_note = (
        " Commands run in a sandbox: only the workspace and /tmp are writable, and in the workspace memory/, "
        "cron/, skills/, the prompt files (AGENTS.md, SOUL.md, USER.md, TOOLS.md, HEARTBEAT.md), every git "
        "repository's hooks and settings (`git config` fails: use `git -c key=value`) and editor run "
        "configurations are protected (change them with the file tools, which ask the user); "
        "the home folder, nanobot's config and credentials are not visible, "
        "there is no network unless the user allows it{proxied}, and nothing it starts keeps running after it returns "
        "(start a server and use it within one command)."
    )

    @property
    def description(self) -> str:  # type: ignore[override]  # says what holds on this machine
        proxied = (
            (
                " (then HTTP(S) only, through a proxy that asks the user about each new domain: no ssh, "
                "no DNS of its own)"
            )
            if self.ctx.confinement.filters_egress
            else ""
        )
        note = (
            self._confined_note.format(proxied=proxied)
            if self.ctx.confinement.confined
            else " Commands run without a sandbox."
        )
        return self._base_description + note

    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The shell command to run."},
            "working_dir": {
                "type": "string",
                "description": "Directory to run in (default: the workspace).",
            },
            "timeout": {
                "type": "number",
                "minimum": 1,
                "description": "Seconds before the command is killed (capped by the configured limit).",
            },
        },
        "required": ["command"],
    }

    kill_grace = 2.0  # seconds between SIGTERM and SIGKILL for the process group

    def __init__(self, ctx: ToolContext, *, checker: SafeFetcher | None = None) -> None:
        super().__init__(ctx)
        self.checker = (
            checker  # the egress proxy's address checks (tests: a fake resolver, a loopback site)
        )

    @staticmethod
    def kill_all_running() -> int:
        """SIGKILL every process group any exec call of this process started that still has a
        process (commands running now, and what they left behind); returns how many. Synchronous,
        so a signal handler can call it before anything else happens."""
        killed = 0
        for pgid in list(_STARTED_GROUPS):
            if _group_alive(pgid):
                _signal_group(pgid, signal.SIGKILL)
                killed += 1
            _STARTED_GROUPS.discard(pgid)
        return killed

    # `command` is required: the schema check refuses a call without it before run() is reached
    async def run(  # type: ignore[override]
        self,
        command: str,
        working_dir: str | None = None,
        timeout: float | None = None,
        **_: Any,
    ) -> str:
        # Where the sandbox does not make memory/ read-only, a command's change to it is undone afterwards;
        # a change to another protected path (nanobot.policy) is asked about after the fact, or put back.
        ws = workspace_root(self.ctx)
        if self.ctx.confinement.confined and self.ctx.exec_enabled:
            for folder in (
                "memory",
                "cron",
            ):  # so they exist to be made read-only (nanobot.policy, rule 2)
                (ws / folder).mkdir(exist_ok=True)
        contents = (
            not self.ctx.confinement.memory_read_only
        )  # else the sandbox holds what exists read-only
        # one walk for git repositories before the command, for the snapshot and the sandbox's
        # read-only paths both; changes_since walks again after it (the command may make one)
        repos = find_repos(ws)
        before = take_snapshot(ws, contents=contents, repos=repos)
        # memory/ is read-only in the sandbox where it can be (the one guard there); elsewhere a
        # command's changes to it are undone afterwards
        watching = nullcontext(None) if not contents else watch_memory(ws)
        try:
            with watching as watch:
                result = await self._run(command, working_dir, timeout, ws, repos)
        except ToolError as exc:
            note = await review(self.ctx.approver, ws, changes_since(ws, before, contents=contents))
            if note:
                raise ToolError(exc.message + note, hint=exc.hint) from exc
            raise
        result += git_settings_note(result) + self._repos_note(ws)
        return (
            result
            + (watch.note if watch is not None else "")
            + await review(self.ctx.approver, ws, changes_since(ws, before, contents=contents))
        )

    async def _run(
        self, command: str, working_dir: str | None, timeout: float | None, ws: Path, repos: Repos
    ) -> str:
        if not self.ctx.exec_enabled:
            raise ToolError(
                "the exec tool is disabled in this configuration; shell commands cannot be run"
            )
        if not command.strip():
            raise ToolError("command is empty")
        rules = self.ctx.exec_rules
        reason = rules.denied_by(command) or deny_reason(command)
        if reason:
            raise ToolError(f"command refused by the safety policy ({reason}); it was not run")
        cwd = resolve_path(self.ctx, working_dir) if working_dir else ws
        if not cwd.is_dir():
            raise ToolError(f"working_dir {working_dir or str(cwd)!r} is not an existing directory")
        limit = (
            self.ctx.exec_timeout if timeout is None else min(float(timeout), self.ctx.exec_timeout)
        )
        await self._approve_folder(cwd, command, ws)
        network = await self._approve(command)
        return await self._execute(command, cwd, limit, network, ws, repos)

    async def _approve_folder(self, cwd: Path, command: str, ws: Path) -> None:
        """A working_dir outside the workspace is a folder the user approves (once, or always for it)."""
        if cwd.is_relative_to(ws):
            return
        if self.ctx.confinement.confined and build_policy(
            ws, restrict=self.ctx.restrict_to_workspace, network=False
        ).is_hidden(cwd):
            raise ToolError(
                f"working_dir {cwd} is in a folder commands cannot see (the nanobot home, "
                "a home folder or a credential store); use a folder in the workspace"
            )
        request = ApprovalRequest(
            "file-outside",
            f"exec wants to run in {cwd}, outside the workspace: {command}",
            detail=command,
            always_key=f"exec-folder:{cwd}",
            allow_hint=approve_flag_hint("file-outside"),
        )
        decision = await self.ctx.approver.approve(request)
        if not decision.allowed:
            why = f": {decision.reason}" if decision.reason else ""
            raise ToolError(
                f"the command was not run; running in {cwd} (outside the workspace) was refused{why}. "
                "Leave working_dir out to run in the workspace"
            )

    async def _approve(self, command: str) -> bool:
        """Ask the approver where the rules say so; raise ToolError when refused. Returns: network on?"""
        rules = self.ctx.exec_rules
        confined = self.ctx.confinement.confined
        trusted = rules.allowed(command)
        asks: list[ApprovalRequest] = []
        if not confined and not rules.unconfined_ok and not trusted:
            asks.append(
                ApprovalRequest(
                    "exec-unconfined",
                    f"run without a sandbox ({self.ctx.confinement.detail}): {command}",
                    detail=command,
                    always_key="exec-unconfined",
                    allow_hint='--allow-unconfined-exec or tools.exec.confinement: "none"',
                )
            )
        why = (
            unreadable(command) if confined else None
        )  # unconfined, every command is asked about already
        if why is not None:  # the deny rules and the accident list could not judge what it runs
            asks.append(
                ApprovalRequest(
                    "exec-unparsable",
                    f"nanobot cannot read this command line ({why}), so its checks cannot judge it: "
                    f"{command}",
                    detail=command,
                    always_key=f"exec-unparsable:{command}",
                    allow_hint=approve_flag_hint("exec-unparsable"),
                )
            )
        pattern = None if trusted else rules.asked_by(command)
        if pattern is not None:
            asks.append(
                ApprovalRequest(
                    "exec-ask",
                    f"command matches your ask pattern {pattern!r}: {command}",
                    detail=command,
                    always_key=f"exec-ask:{command}",
                    allow_hint="tools.exec.allow (a pattern that matches it)",
                )
            )
        network = rules.network is True or (rules.network == "ask" and trusted)
        if confined and rules.network == "ask" and not trusted and wants_network(command):
            asks.append(
                ApprovalRequest(
                    "exec-network",
                    f"exec wants network access: {command}",
                    detail=command,
                    always_key="exec-network",
                    allow_hint="tools.exec.network: true, or a tools.exec.allow pattern",
                )
            )
            network = True
        for request in asks:
            decision = await self.ctx.approver.approve(request)
            if not decision.allowed:
                why = f": {decision.reason}" if decision.reason else ""
                raise ToolError(
                    f"the command was not run; approval for {request.kind} was refused{why}"
                )
        return network

    def _launch(
        self, command: str, cwd: Path, network: bool, ws: Path, repos: Repos, proxy_port: int = 0
    ) -> Launch:
        """`ws`: the workspace as run() resolved it, once for the whole call."""
        conf = self.ctx.confinement
        policy = build_policy(
            ws,
            exec_read_only(ws, repos),
            restrict=self.ctx.restrict_to_workspace,
            network=network,
            limits=self.ctx.exec_limits,
        )
        policy = dataclasses.replace(policy, proxy_port=proxy_port)
        if conf.confined:
            if not cwd.is_relative_to(ws):
                if policy.is_hidden(cwd):
                    raise ToolError(
                        f"working_dir {cwd} is in a folder commands cannot see (the nanobot home, "
                        "a home folder or a credential store); use a folder in the workspace"
                    )
                policy = dataclasses.replace(policy, extra_read=(cwd,))
        if conf.confined:  # a file with another hard link (perhaps outside): read-only (rule 2)
            policy = dataclasses.replace(
                policy, read_only=(*policy.read_only, *self._hard_links(ws))
            )
        try:
            return conf.prepare(policy, cwd, command)
        except OSError as exc:
            raise ToolError(
                f"could not prepare the sandbox ({conf.detail}): {exc}; the command was not run"
            ) from exc

    async def _execute(
        self, command: str, cwd: Path, limit: float, network: bool, ws: Path, repos: Repos
    ) -> str:
        proxy, port = None, 0
        if (
            network and self.ctx.confinement.filters_egress
        ):  # per-domain egress (tools/egress_proxy.py)
            proxy = EgressProxy(self.ctx.approver, self.ctx.egress, command, self.checker)
            port = self.ctx.confinement.egress_port() or await proxy.start()
        try:
            launch = self._launch(command, cwd, network, ws, repos, port)
            try:
                if proxy is not None:
                    launch.env.update(
                        proxy.env(port, own_loopback=launch.egress_channel is not None)
                    )
                    if launch.egress_channel is not None:  # the command's own network namespace
                        proxy.serve_from(launch.egress_channel, port)
                result = await self._spawn_and_wait(launch, cwd, limit)
            finally:
                if proxy is not None:
                    proxy.close()
                launch.finish()
        except ToolError as exc:
            if proxy is not None and proxy.note():
                raise ToolError(exc.message + proxy.note(), hint=exc.hint) from exc
            raise
        finally:
            if proxy is not None:
                proxy.close()
        return result + (proxy.note() if proxy else "") + self._links_note()

    _linked: tuple[Path, ...] | None = (
        None  # files of the workspace with other hard links (scanned once)
    )
    _linked_told = False

    def _hard_links(self, ws: Path) -> tuple[Path, ...]:
        """Scanned at the first command of the session: the sandbox cannot make new links to files
        outside the workspace (bubblewrap: another mount; Landlock: no REFER right there)."""
        if self._linked is None:
            self._linked, _ = hard_links(ws)
        return self._linked

    def _links_note(self) -> str:
        """Where read-only binds do not work (Landlock without namespaces), say so, once."""
        if self._linked_told or not self._linked or self.ctx.confinement.memory_read_only:
            return ""
        self._linked_told = True
        names = ", ".join(str(p) for p in self._linked[:5]) + (
            " ..." if len(self._linked) > 5 else ""
        )
        return (
            f"\n[note: {len(self._linked)} workspace file(s) have other hard links, perhaps outside the "
            f"workspace, and commands can write through them here: {names}]"
        )

    _repos_told = False

    def _repos_note(self, ws: Path) -> str:
        """Once a session: the search for git repositories (nanobot.policy.repos) stopped at its cap."""
        found = last_found(ws)
        if self._repos_told or found is None or found.complete or not self.ctx.confinement.confined:
            return ""
        self._repos_told = True
        return f"\n[note: {found.note()}]"

    async def _spawn_and_wait(self, launch: Launch, cwd: Path, limit: float) -> str:
        loop = asyncio.get_running_loop()
        env = {**child_env(os.environ, self.ctx.secret_env_names), **launch.env}
        if (
            launch.keeper is not None and launcher.available()
        ):  # no fork of nanobot itself (launcher.py)
            start: Awaitable[tuple[Any, _Collector]] = launcher.launch(
                _Collector, launch.argv, env=env, cwd=str(cwd), hook=launch.keeper
            )
        else:
            start = loop.subprocess_exec(
                _Collector,
                *launch.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=str(cwd),
                env=env,
                start_new_session=True,  # own process group: one killpg reaches grandchildren too
                preexec_fn=launch.preexec_fn,
                pass_fds=launch.pass_fds,
            )
        spawn = asyncio.ensure_future(start)
        try:
            transport, collector = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # Cancelled while starting: asyncio's own cleanup would kill only the shell and then
            # wait for the pipes, i.e. for every grandchild. Let the start finish, kill the group.
            try:
                transport, collector = await spawn
            except (OSError, subprocess.SubprocessError, LauncherError):
                raise asyncio.CancelledError from None
            await self._kill_group(transport.get_pid(), collector)
            transport.close()
            raise
        except (subprocess.SubprocessError, LauncherError) as exc:
            raise ToolError(
                f"could not confine the command ({self.ctx.confinement.detail}): {exc}; "
                "it was not run"
            ) from exc
        except OSError as exc:
            raise ToolError(f"could not start the shell: {exc}") from exc

        pgid = transport.get_pid()  # start_new_session makes the shell the group leader
        # Groups found empty are forgotten, so a recycled id is never signalled later.
        _STARTED_GROUPS.difference_update([g for g in _STARTED_GROUPS if not _group_alive(g)])
        _STARTED_GROUPS.add(pgid)
        started = loop.time()
        try:
            ended = await _wait_finished(collector, launch.cgroup, limit)
            finished = ended == "finished"
            shell_exited = transport.get_returncode() is not None
            if (
                ended == "runaway" and launch.cgroup is not None
            ):  # no grace: SIGKILL the whole tree now,
                # but the Landlock keeper (the group leader), which reaps it and then exits by itself
                spare = pgid if launch.keeper is not None else None
                await asyncio.to_thread(launch.cgroup.kill_all, spare=spare)
                if not await _wait_event(collector.exited, 1.0):
                    _signal_group(pgid, signal.SIGKILL)
            elif not finished:
                await self._kill_group(pgid, collector)
            if not finished:
                if (
                    launch.cgroup is not None
                ):  # a setsid'd process is outside the group, not the cgroup
                    await asyncio.to_thread(launch.cgroup.kill_all)
                # Pipes close once the group is dead; collect what is still buffered in them.
                await _wait_event(collector.finished, 1.0)
        except asyncio.CancelledError:
            await self._kill_group(pgid, collector)
            raise
        finally:
            # Also releases pipes still held by a process that left the group (setsid).
            transport.close()

        if not finished:
            if ended == "runaway" and launch.cgroup is not None:
                why = (
                    f"the command kept trying to start processes past its limit of {launch.cgroup.limit} "
                    f"at once (a fork bomb?) and was stopped after {loop.time() - started:.1f}s"
                )
            elif shell_exited:
                why = (
                    f"the command exited but something it started in the background kept its output open "
                    f"for {limit:g}s (redirect a background process's output to a file)"
                )
            else:
                why = f"the command did not finish within {limit:g}s"
            raise ToolError(
                f"{why}; it and every process it started were killed.\n{_format(collector.out, collector.err, None)}"
            )
        return _format(collector.out, collector.err, launch.returncode(transport.get_returncode()))

    async def _kill_group(self, pgid: int, collector: _Collector) -> None:
        """SIGTERM the group, give it kill_grace to exit, then SIGKILL whatever is left.

        The SIGKILL sits in `finally` so a second Ctrl-C during the grace still kills.
        """
        loop = asyncio.get_running_loop()
        try:
            _signal_group(pgid, signal.SIGTERM)
            deadline = loop.time() + self.kill_grace
            while loop.time() < deadline and _group_alive(pgid):
                await asyncio.sleep(0.05)
        finally:
            _signal_group(pgid, signal.SIGKILL)
        await _wait_event(collector.exited, 1.0)
