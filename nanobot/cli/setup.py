"""`nanobot onboard` and `nanobot status`."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from nanobot import ignored_keys, paths, provider_table
from nanobot.cli import key_prompt
from nanobot.cli.config_load import load as load_config
from nanobot.cli.consoles import stdout_console
from nanobot.cli.errors import say
from nanobot.config import ensure_config_file, mask_key, read_file, resolve_model
from nanobot.errors import MissingKeyError, NanobotError, storage_error

if TYPE_CHECKING:
    from nanobot.session.protocols import SessionAdmin


def copy_templates(workspace: Path) -> list[Path]:
    """Copy the bundled workspace templates into `workspace`; existing files are left alone."""
    source = paths.bundled_dir("workspace")
    created = []
    for item in sorted(source.rglob("*")):
        if item.is_dir() or item.name.startswith("."):
            continue
        target = workspace / item.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:  # "x": a file that appeared since (the user's, another nanobot's) is never replaced
            with target.open("xb") as out, item.open("rb") as src:
                shutil.copyfileobj(src, out)
        except FileExistsError:
            continue
        created.append(target)
    (workspace / "skills").mkdir(parents=True, exist_ok=True)
    return created


# what nanobot itself keeps in a workspace besides the templates: memory, skills, jobs,
# nanobot's own session folder and workspace id
_NANOBOT_ENTRIES = {"memory", "skills", "cron", "sessions", ".nanobot"}


def first_run_templates(workspace: Path) -> list[Path]:
    """The chat started without `nanobot onboard`: a workspace that is nanobot's alone (missing,
    empty, or holding only nanobot's folders and prompt files) gets the templates it lacks, as
    onboard writes them; a file already there is never replaced. A folder with anything else in
    it (a project the config points at) is left as it is."""
    try:
        entries = {entry.name for entry in workspace.iterdir()} if workspace.is_dir() else set()
    except OSError:
        return []  # unreadable: the chat reports the workspace itself
    templates = {item.name for item in paths.bundled_dir("workspace").iterdir()}
    if entries - _NANOBOT_ENTRIES - templates:
        return []
    try:
        return copy_templates(workspace)
    except OSError:
        return []  # a read-only or full disk: the chat says so when it writes there itself


def run_onboard(config_path: Path | None, workspace: Path | None) -> None:
    console = stdout_console()
    path = config_path or paths.default_config_path()
    existed = path.exists()
    # absolute: the folder the file names must not depend on where nanobot is started later
    workspace = workspace.expanduser().absolute() if workspace is not None else None
    changed, added = ensure_config_file(path, workspace)
    if not path.exists():
        raise NanobotError(f"could not create {path}")
    if not existed:
        console.print(f"config: {path} (created, mode 0600)")
    elif changed and added:
        console.print(f"config: {path} (added {len(added)} missing setting(s))")
    else:
        console.print(f"config: {path} (already complete, left unchanged)")
    cfg = load_config(path)  # as the chat will read it
    kept = cfg.workspace_path()
    ws = workspace or kept
    try:
        created = copy_templates(ws)
    except OSError as exc:
        raise storage_error(exc, "create the workspace", exc.filename or ws) from None
    console.print(f"workspace: {ws} ({len(created)} file(s) created)")
    if ws != kept:  # the file already named another one, and onboard never overwrites a value
        say(
            console,
            f"[yellow]note:[/yellow] {escape(str(path))} keeps agents.defaults.workspace "
            f"{escape(str(kept))}, so the chat works there; to work in {escape(str(ws))}, set it "
            f"there or pass `-w {escape(str(ws))}` to nanobot agent.",
        )
    try:
        resolve_model(cfg)
    except MissingKeyError as exc:
        console.print(f"model: {cfg.defaults.model} — [yellow]{escape(exc.message)}[/yellow]")
        if not key_prompt.can_ask(exc):
            if exc.hint:
                console.print(f"[dim]hint:[/dim] {escape(exc.hint)}", soft_wrap=False)
            return
        if not key_prompt.ask_and_save(exc, console):
            console.print(
                f"skipped: no key saved. Set {escape(exc.env_key)}, or paste one when the chat "
                "(`nanobot agent`) asks. Another provider: set agents.defaults.model in "
                f"{escape(str(path))} (e.g. openai/gpt-4.1). No key at all: `nanobot demo`.",
                soft_wrap=False,
            )
            return
        cfg = load_config(path)  # as saved, with whatever else changed meanwhile
        resolve_model(cfg)
    except NanobotError as exc:
        console.print(f"model: {cfg.defaults.model} — [yellow]{escape(exc.message)}[/yellow]")
        if exc.hint:
            console.print(f"[dim]hint:[/dim] {escape(exc.hint)}", soft_wrap=False)
        return
    # a config elsewhere than the default is read only when named again
    chat = "nanobot agent" + (
        "" if path == paths.default_config_path() else f" -c {shlex.quote(str(path))}"
    )
    console.print(f"model: {cfg.defaults.model} — ready. Start chatting with: {escape(chat)}")


def show_status(config_path: Path | None, session_key: str = "cli:direct") -> None:
    from nanobot.app import status_snapshot
    from nanobot.cli.status_view import budget_rows

    console = stdout_console()
    path = config_path or paths.default_config_path()
    cfg = load_config(path)
    table = Table(show_header=False, box=None)
    link = (
        f" -> {path.resolve()} (a link: nanobot reads and writes that file)"
        if path.is_symlink()
        else ""
    )
    table.add_row(
        "config", f"{path}{link}{'' if path.exists() else ' (missing: run nanobot onboard)'}"
    )
    table.add_row("workspace", str(cfg.workspace_path()))
    table.add_row("model", cfg.defaults.model)
    try:
        resolved = resolve_model(cfg)
        sent = (
            f"; the model is sent as {escape(resolved.model)}"
            if resolved.model != resolved.label
            else ""
        )
        table.add_row(
            "provider", f"{resolved.spec.name} ({resolved.api_base or 'default endpoint'}{sent})"
        )
    except NanobotError as exc:
        hint = (
            f"\n[dim]{escape(exc.hint)}[/dim]" if exc.hint else ""
        )  # what to do, not only what is wrong
        table.add_row("provider", f"[yellow]{escape(exc.message)}[/yellow]{hint}")
    keys = []
    for name, pc in cfg.providers.items():
        if pc.api_key or pc.api_base:
            spec = provider_table.find(name)
            note = (
                " (cannot be used: see ignored)"
                if spec is not None and spec.kind == "unsupported"
                else ""
            )
            keys.append(
                f"{name}: key {mask_key(pc.api_key)}"
                + (f", base {pc.api_base}" if pc.api_base else "")
                + note
            )
    table.add_row("providers", "\n".join(keys) or "none configured")
    snap, exists = status_snapshot(cfg, session_key)
    table.add_row("session", session_key + ("" if exists else _new_session_note(cfg, session_key)))
    for label, text in budget_rows(snap):
        table.add_row(label if label != "warning" else "[yellow]warning[/yellow]", text)
    from nanobot.cli.status_view import working_state_rows
    from nanobot.stores import session_store

    store: SessionAdmin = session_store(None)
    if exists:
        for label, text in working_state_rows(store.working_state_for(session_key).read()):
            table.add_row(label if label != "warning" else "[yellow]warning[/yellow]", escape(text))
    archived = store.archives(session_key)
    if archived:
        newest = archived[0]
        table.add_row(
            "archived",
            f"{len(archived)} earlier conversation(s) of {escape(session_key)} kept by /new; newest "
            f"{escape(newest.key)} ({newest.message_count} messages): `nanobot session list`",
        )
    table.add_row("sessions", str(paths.sessions_dir()))
    from nanobot.cli.status_view import exec_line

    line = exec_line(cfg)
    table.add_row("exec", line if not line.startswith("NOT") else f"[yellow]{line}[/yellow]")
    table.add_row("reminders", _reminders_line(cfg))
    from nanobot.usage.ledger import TodaySpend
    from nanobot.usage.report import paused_lines, today_line

    day = TodaySpend().refresh()
    table.add_row("spend", today_line(day, cfg.usage.limits))
    for line in paused_lines(day, cfg.usage.limits):
        table.add_row("[yellow]paused[/yellow]", f"[yellow]{line}[/yellow]")
    table.add_row(
        "file tools",
        "workspace only (tools.restrictToWorkspace)"
        if cfg.tools.restrict_to_workspace
        else "outside the workspace: asked in the chat, refused in one-shot mode",
    )
    table.add_row(
        "auto-approved",
        ", ".join(cfg.tools.auto_approve) or "nothing (risky actions ask; see --approve)",
    )
    from nanobot.skills import SkillSet

    held = SkillSet.discover(cfg.workspace_path()).held
    if held:
        table.add_row(
            "skills",
            f"[yellow]{len(held)} off until approved[/yellow]: "
            + ", ".join(s.name for s in held)
            + " (nanobot skills list)",
        )
    if cfg.tools.mcp_servers:
        from nanobot.mcp.connection import transport_of

        servers = ", ".join(
            f"{name} ({transport_of(s) or 'no command or url'}{', trusted' if s.trusted else ''})"
            for name, s in cfg.tools.mcp_servers.items()
        )
        table.add_row(
            "mcp servers", f"{servers}; `nanobot mcp list` starts them and shows their tools"
        )
    lines = ignored_keys.grouped(ignored_keys.ignored(read_file(path), cfg))
    table.add_row(
        "ignored",
        "\n".join(lines)
        if lines
        else "nothing: every key in the file is used"
        if path.exists()
        else "nothing (there is no config file yet)",
    )
    console.print(table)


def _new_session_note(cfg, key: str) -> str:
    from nanobot.session.importer import waiting

    if waiting(key, cfg.workspace_path()) is None:
        return " (new)"
    return (
        " (nanobot's session, not imported yet: the chat or `nanobot session list` imports it, "
        "and the context below then grows by its messages)"
    )


def _reminders_line(cfg) -> str:
    from nanobot.cron.runner import current_runner, describe_owner
    from nanobot.stores import job_store

    store = job_store(cfg.workspace_path())
    jobs = store.jobs() if store.path.exists() else []
    on = sum(1 for job in jobs if job.enabled)
    runner = current_runner(store)
    where = (
        f"fired by {describe_owner(runner)}"
        if runner
        else "no runner now: they fire while `nanobot serve` or a chat runs"
    )
    notes = "".join(f"\n[yellow]{note}[/yellow]" for note in store.notices)
    from nanobot.cron.heartbeat import waiting_tasks

    waiting = (
        sum(1 for job in jobs if job.pending_approval),
        len(waiting_tasks(cfg.workspace_path())),
    )
    if any(waiting):
        notes += (
            f"\n[yellow]waiting for your approval: {waiting[0]} job(s), {waiting[1]} HEARTBEAT.md task(s) "
            "the assistant added (`nanobot cron list` shows them, `nanobot cron approve` runs them)[/yellow]"
        )
    return f"{len(jobs)} job(s), {on} on · {where}{notes}"
