"""`nanobot serve`: the long-running runner for scheduled jobs and the heartbeat.

Foreground, line-per-event output (flushed: journald and nohup see each line at once),
SIGTERM and Ctrl-C stop it cleanly (a turn in progress is interrupted, its finished steps
are saved and the run is recorded as interrupted), exit code 0.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from nanobot.cli.config_load import load as load_config
from nanobot.config import Config
from nanobot.cron.delivery import LogDelivery, NotifySendDelivery
from nanobot.cron.runner import ONCE_LATE_MS, Scheduler, describe_owner
from nanobot.cron.store import cron_dir
from nanobot.errors import MissingKeyError

WAIT_FOR_CHAT_SECONDS = 2.0  # a chat holds the runner lock only while it fires a job


def log_path(cfg: Config):
    return cron_dir(cfg.workspace_path()) / "cron.log"


def log_delivery(cfg: Config, *, echo: bool = False) -> LogDelivery:
    return LogDelivery(log_path(cfg), echo=sys.stdout if echo else None)


def _say(text: str) -> None:
    print(text, flush=True)


def run_serve(*, config_path, workspace, once: bool) -> int:
    from nanobot.app import build_provider, build_scheduler

    cfg = load_config(
        config_path, overrides={"agents.defaults.workspace": str(workspace) if workspace else None}
    )
    notify = NotifySendDelivery()
    scheduler = build_scheduler(
        cfg, kind="nanobot serve", heartbeat=True, deliveries=[log_delivery(cfg, echo=True), notify]
    )
    try:
        build_provider(cfg)  # fail now on a missing key, not at the first reminder
    except MissingKeyError:
        if not once or scheduler.due_turns():
            raise
        _say("nothing due: no cron job or heartbeat task is due now, so no API key was needed")
        return 0
    return asyncio.run(_serve(cfg, scheduler, once=once, notify=notify.available))


async def _serve(cfg: Config, scheduler: Scheduler, *, once: bool, notify: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    got: list[int] = []

    def on_signal(sig: int) -> None:
        got.append(sig)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    def stopped() -> (
        int
    ):  # Ctrl-C is 130 as everywhere in nanobot; SIGTERM (systemd's stop) a clean 0
        return 130 if signal.SIGINT in got else 0

    try:
        if not await _take_lock(scheduler, stop, once=once):
            return stopped() if stop.is_set() else 0 if once else 1
        jobs = scheduler.store.jobs()
        hb = scheduler.heartbeat
        _say(
            f"nanobot serve · workspace {cfg.workspace_path()} · {len(jobs)} job(s) · heartbeat "
            + (f"every {hb.interval_s // 60} min" if hb.enabled else "off")
            + f" · log {log_path(cfg)} · desktop notifications {'on' if notify else 'not available'}"
            + _background_budget(cfg)
        )
        if once:
            firings = await _until_stopped(scheduler.tick(late_ms=ONCE_LATE_MS), stop)
            ran = [f for f in firings or [] if f.kind != "notice"]
            _say(f"ran {len(ran)} due job(s)/heartbeat; done")
            return 1 if any(f.status == "error" for f in firings or []) else 0
        await _until_stopped(scheduler.serve(stop), stop)
        _say("nanobot serve stopped")
        return stopped()
    finally:
        scheduler.lock.release()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def _background_budget(cfg: Config) -> str:
    """' · background tokens today 3,083 of 1,000,000' (usage.limits.backgroundDailyTokens)."""
    from nanobot.usage.ledger import TodaySpend

    limit = cfg.usage.limits.background_daily_tokens
    spent = TodaySpend().refresh().background
    return f" · background tokens today {spent:,}" + (
        f" of {limit:,}" if limit else " (no daily limit)"
    )


async def _take_lock(scheduler: Scheduler, stop: asyncio.Event, *, once: bool) -> bool:
    """Wait while a chat fires a job; refuse when another serve runs."""
    told = False
    while not stop.is_set():
        if scheduler.lock.try_acquire():
            return True
        owner = scheduler.lock.state()
        if once or owner.get("kind") != "chat":
            msg = f"another runner is firing this workspace's jobs: {describe_owner(owner)}"
            print(
                f"nanobot serve: {msg}; "
                + ("it will run what is due" if once else "not starting a second one"),
                file=sys.stderr if not once else sys.stdout,
                flush=True,
            )
            return False
        if not told:
            _say(f"waiting for {describe_owner(owner)} to finish firing a job…")
            told = True
        try:
            await asyncio.wait_for(stop.wait(), WAIT_FOR_CHAT_SECONDS)
        except TimeoutError:
            pass
    return False


async def _until_stopped(coro, stop: asyncio.Event):
    """Run `coro`; when `stop` is set first, cancel it (a running turn is recorded as interrupted)."""
    task = asyncio.ensure_future(coro)
    stopper = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if task not in done:
        _say("stopping…")
        task.cancel()
    stopper.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return None
