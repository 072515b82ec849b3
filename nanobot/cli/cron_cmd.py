"""`nanobot cron ...`: list, add, remove, run, pause and resume scheduled jobs.

Only presentation lives here; the rules are in nanobot/cron/.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
import asyncio
import json
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nanobot.cli.config_load import load as load_config
from nanobot.cli.consoles import stderr_console, stdout_console
from nanobot.cli.errors import report_text
from nanobot.cli.usage import ConfigOpt
from nanobot.config import Config
from nanobot.cron.jobs import MISSED_POLICIES, Job
from nanobot.cron.protocols import JobStoreAdmin, JobStoreLike
from nanobot.cron.schedule import CLI_NAMES, describe, format_ms, parse_schedule
from nanobot.errors import UsageError
from nanobot.memory.prompt_files import PromptFiles
from nanobot.stores import job_store

cron_app = typer.Typer(
    help="Scheduled jobs and reminders.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

IdArg = typer.Argument(..., help="The job's id (see `nanobot cron list`).")
WorkspaceOpt = typer.Option(None, "--workspace", "-w", help="Workspace folder.")


def _out() -> Console:
    return _wrapping(stdout_console())


def _err() -> Console:
    return _wrapping(stderr_console())


def _wrapping(console: Console) -> Console:
    """A terminal wraps our lines at words (soft wrap would let it cut a word at its edge); a pipe
    or log keeps each line whole."""
    console.soft_wrap = not console.is_terminal
    return console


def _config(config: Path | None, workspace: Path | None) -> Config:
    return load_config(
        config, overrides={"agents.defaults.workspace": str(workspace) if workspace else None}
    )


def _store(cfg: Config) -> JobStoreAdmin:
    return job_store(cfg.workspace_path())


def _tell(store: JobStoreLike) -> None:
    for notice in store.notices:
        _err().print(f"[yellow]warning:[/yellow] {escape(notice)}")
    store.notices.clear()


def _now() -> int:
    return int(time.time() * 1000)


def _job_json(job: Job) -> dict:
    data = job.to_json()
    data["sessionKey"] = job.session_key
    return data


@cron_app.command("list")
def list_jobs(
    json_out: bool = typer.Option(
        False, "--json", help="Print the jobs as JSON (jobs.json's format)."
    ),
    config: Path | None = ConfigOpt,
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Every job: id, schedule, state, next and last run."""
    cfg = _config(config, workspace)
    store = _store(cfg)
    jobs = store.jobs()
    _tell(store)
    if json_out:
        print(json.dumps({"jobs": [_job_json(j) for j in jobs]}, indent=2, ensure_ascii=False))
        return
    waiting = PromptFiles(cfg.workspace_path()).pending_tasks()
    if waiting:
        _out().print(
            f"[yellow]HEARTBEAT.md: {len(waiting)} task(s) the assistant added wait for your approval "
            "(the heartbeat skips them until then):[/yellow]"
        )
        for task in waiting:
            _out().print(f"  - {escape(task)}")
        _out().print(
            "  approve them with `nanobot cron approve heartbeat`, or remove them from HEARTBEAT.md"
        )
    if not jobs:
        _out().print(
            'No scheduled jobs. Add one with `nanobot cron add -m "..." --every 3600` (or ask in the chat).'
        )
        return
    tz = cfg.defaults.timezone
    table = Table("id", "name", "schedule", "state", "next run", "last run", "session")
    table.columns[
        0
    ].no_wrap = True  # run/pause/remove need the id whole, however narrow the terminal
    table.columns[0].min_width = max((len(job.id) for job in jobs), default=2)
    for job in jobs:
        state = "on" if job.enabled else ("done" if job.schedule.kind == "at" else "paused")
        if not job.runnable:
            state = "not run here"  # nanobot's internal jobs, or a job without a message
        elif job.pending_approval:
            state = "waits for approval"
        zone = job.schedule.tz or tz
        last = (
            f"{format_ms(job.last_run_at_ms, zone)} {job.last_status}"
            if job.last_run_at_ms
            else "-"
        )
        table.add_row(
            job.id,
            escape(job.name),
            escape(describe(job.schedule)),
            state,
            format_ms(job.next_run_at_ms, zone),
            escape(last),
            escape(job.session_key),
        )
    _out().print(table)
    for job in jobs:
        if job.pending_approval:
            _out().print(
                f"[yellow]job {job.id} was added by the assistant and waits for your approval:[/yellow] "
                f"{escape(job.message.strip()[:200])!r} — approve with `nanobot cron approve {job.id}`, "
                f"or `nanobot cron remove {job.id}`"
            )
    _out().print(
        f"[dim]{len(jobs)} job(s) in {store.path}; they fire while `nanobot serve` or a chat runs[/dim]"
    )


@cron_app.command("add")
def add_job(
    message: str = typer.Option(
        ..., "--message", "-m", help="What the assistant should do when the job fires."
    ),
    every: int | None = typer.Option(None, "--every", help="Repeat every this many seconds."),
    cron_expr: str | None = typer.Option(
        None, "--cron", help="Cron expression, e.g. '0 9 * * 1-5'."
    ),
    tz: str | None = typer.Option(None, "--tz", help="IANA time zone for --cron or a naive --at."),
    at: str | None = typer.Option(
        None, "--at", help="Once, at this ISO time, e.g. 2026-03-01T10:30."
    ),
    name: str | None = typer.Option(None, "--name", help="A short label."),
    session: str | None = typer.Option(
        None, "--session", "-s", help="Run in this session (default: the job's own, cron:<id>)."
    ),
    missed: str = typer.Option(
        "run_once", "--missed", help="Runs missed while nothing ran: run_once or skip."
    ),
    memory: bool = typer.Option(
        False,
        "--memory",
        help="Let its turns consolidate into MEMORY.md and HISTORY.md (off: its session keeps them).",
    ),
    config: Path | None = ConfigOpt,
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Add a job: exactly one of --every, --cron or --at."""
    if missed not in MISSED_POLICIES:
        raise UsageError(f"--missed must be one of {', '.join(MISSED_POLICIES)}, got {missed!r}")
    cfg = _config(config, workspace)
    now = _now()
    schedule = parse_schedule(
        every_seconds=every,
        cron_expr=cron_expr,
        tz=tz,
        at=at,
        default_tz=cfg.defaults.timezone,
        now_ms=now,
        names=CLI_NAMES,
    )
    store = _store(cfg)
    job = store.add(
        schedule,
        message,
        now_ms=now,
        name=name,
        session=session,
        missed=missed,
        channel="cli",
        to="direct",
    )
    if memory:

        def remember(jobs: list) -> None:
            for stored in jobs:
                if stored.id == job.id:
                    stored.raw["memory"] = True

        store.update(remember)
    _tell(store)
    _out().print(
        f"added job {job.id} '{escape(job.name)}', {escape(describe(job.schedule))}; next run "
        f"{format_ms(job.next_run_at_ms, job.schedule.tz or cfg.defaults.timezone)}"
    )


@cron_app.command("approve")
def approve_job(
    job_id: str = typer.Argument(
        ..., help="The job's id, or `heartbeat` for HEARTBEAT.md's tasks."
    ),
    config: Path | None = ConfigOpt,
    workspace: Path | None = WorkspaceOpt,
) -> None:
    """Approve a job (or HEARTBEAT.md's tasks) the assistant added, so it runs unattended."""
    cfg = _config(config, workspace)
    if job_id == "heartbeat":
        approved = PromptFiles(cfg.workspace_path()).approve_heartbeat()
        _out().print(
            f"approved {len(approved)} HEARTBEAT.md task(s)"
            if approved
            else "no HEARTBEAT.md task waits for approval"
        )
        for task in approved:
            _out().print(f"  - {escape(task)}")
        return
    store = _store(cfg)
    job = store.get(job_id)
    _out().print(
        f"job {job.id} '{escape(job.name)}', {escape(describe(job.schedule))}: {escape(job.message)}"
    )
    store.approve(job_id, now_ms=_now())
    _tell(store)
    _out().print(f"approved job {job.id}; it fires while `nanobot serve` or a chat runs")


@cron_app.command("remove")
def remove_job(
    job_id: str = IdArg, config: Path | None = ConfigOpt, workspace: Path | None = WorkspaceOpt
) -> None:
    """Delete a job."""
    store = _store(_config(config, workspace))
    job = store.remove(job_id)
    _tell(store)
    _out().print(f"removed job {job.id} '{escape(job.name)}'")


def _set_enabled(job_id: str, enabled: bool, config: Path | None, workspace: Path | None) -> None:
    cfg = _config(config, workspace)
    store = _store(cfg)
    job = store.set_enabled(job_id, enabled, now_ms=_now())
    _tell(store)
    if enabled:
        when = format_ms(job.next_run_at_ms, job.schedule.tz or cfg.defaults.timezone)
        _out().print(
            f"resumed job {job.id} '{escape(job.name)}'; next run {when}"
            if job.next_run_at_ms
            else f"job {job.id} has no run left (its time has passed)"
        )
    else:
        _out().print(
            f"paused job {job.id} '{escape(job.name)}'; `nanobot cron resume {job.id}` turns it back on"
        )


@cron_app.command("pause")
def pause_job(
    job_id: str = IdArg, config: Path | None = ConfigOpt, workspace: Path | None = WorkspaceOpt
) -> None:
    """Stop a job from firing until it is resumed."""
    _set_enabled(job_id, False, config, workspace)


@cron_app.command("resume")
def resume_job(
    job_id: str = IdArg, config: Path | None = ConfigOpt, workspace: Path | None = WorkspaceOpt
) -> None:
    """Turn a paused job back on (runs missed while paused are not replayed)."""
    _set_enabled(job_id, True, config, workspace)


@cron_app.command("run")
def run_job(
    job_id: str = IdArg, config: Path | None = ConfigOpt, workspace: Path | None = WorkspaceOpt
) -> None:
    """Run a job now, as a turn in its session, and print the answer (its schedule is unchanged)."""
    from nanobot.app import build_scheduler
    from nanobot.cli.serve import log_delivery

    cfg = _config(config, workspace)
    scheduler = build_scheduler(cfg, kind="cron run", deliveries=[log_delivery(cfg)])
    firing = asyncio.run(scheduler.run_now(job_id))
    _tell(scheduler.store)
    if firing.error:
        report_text(firing.error)
        raise typer.Exit(1)
    _out().print(f"[bold]{escape(firing.title)}[/bold] [dim]({firing.session})[/dim]")
    _out().print(escape(firing.text or "(no answer)"))
