"""Fires due jobs and the heartbeat, each as a turn; one runner per workspace, by a lock.

`nanobot serve` holds the runner lock for its lifetime; an open chat takes it for one tick at a
time when no serve holds it. Each job is claimed (its next run advanced) under the job store's
lock before it runs, so even two runners could not fire one job twice; a job fires at most once
per due time (a crash mid-turn does not replay it). Whoever fires records the run in the store
and hands a Firing to every delivery (log file, desktop notification; open chats read
cron/runs.jsonl).

Missed runs: when no runner ticked for a while (MISSED_GAP_MS), firings that fell due in the gap
are handled per job: "run_once" runs the job once now, "skip" moves it to its next time; both
are reported.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from nanobot.config import Gateway
from nanobot.cron.heartbeat import (
    HEARTBEAT_SESSION,
    heartbeat_path,
    heartbeat_prompt,
    heartbeat_tasks,
    is_quiet,
    waiting_tasks,
)
from nanobot.cron.jobs import Job, RunRecord, current_job
from nanobot.cron.schedule import describe, format_ms, next_run, occurrences_between
from nanobot.cron.store import JobStore
from nanobot.errors import LockHeld, RunnerBusyError, SessionInUseError
from nanobot.fsio import ExclusiveLock, atomic_write

__all__ = [
    "Clock",
    "SystemClock",
    "Firing",
    "TurnResult",
    "JobTurns",
    "Delivery",
    "RunnerLock",
    "Scheduler",
    "RunnerBusyError",
]

MISSED_GAP_MS = 120_000  # no tick for this long: what fell due meanwhile was missed
ONCE_LATE_MS = 3_600_000  # `serve --once`: up to an hour overdue is late, not missed
TICK_RECORD_MS = MISSED_GAP_MS // 4  # how often a live runner notes that it is alive (an fsync)
POLL_SECONDS = (
    Gateway.jobs_poll_s
)  # how often a waiting runner rereads the store (jobs added by a chat or `nanobot cron add`)
RESULT_CHARS = 4000  # of a turn's answer, kept in runs.jsonl


class Clock(Protocol):
    def now_ms(self) -> int: ...

    async def wait(self, stop: asyncio.Event, seconds: float) -> None:
        """Return after `seconds`, or as soon as `stop` is set."""


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    async def wait(self, stop: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            pass


@dataclass
class TurnResult:
    content: str | None
    error: str | None = None


class JobTurns(Protocol):
    """Runs one turn in a session; raises SessionInUseError when another process holds it."""

    async def run(self, session_key: str, prompt: str) -> TurnResult: ...


@dataclass
class Firing:
    """One thing a runner did, as the user is told about it."""

    kind: str  # "job" | "heartbeat" | "notice"
    at_ms: int
    title: str
    text: str = ""
    status: str = "ok"  # "ok" | "error" | "skipped" | "interrupted" | "info"
    job_id: str | None = None
    session: str | None = None
    duration_ms: int = 0
    error: str | None = None
    quiet: bool = False  # recorded, but nobody needs a notification (HEARTBEAT_OK)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["at"] = datetime.fromtimestamp(self.at_ms / 1000, UTC).isoformat(timespec="seconds")
        data["text"] = self.text[:RESULT_CHARS]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Firing:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**{"kind": "notice", "at_ms": 0, "title": "", **known})

    def line(self) -> str:
        """One line for a log or a terminal."""
        what = self.title + (f" [{self.status}]" if self.status not in ("ok", "info") else "")
        body = (self.error or self.text or "").strip()
        return f"{what}: {body}" if body else what


class Delivery(Protocol):
    def deliver(self, firing: Firing) -> None: ...


class SpendGate(Protocol):
    """Whether background work may spend now (nanobot.usage.meter.UsageMeter is one)."""

    def paused(self, job: str) -> tuple[str, str] | None:
        """(which limit, the line for the user) when `job` ("heartbeat" or a job id) must wait, else None."""

    def first_notice(self, key: str) -> bool:
        """True the first time anyone asks about `key` (one of `paused`'s): the user is told once."""


def describe_owner(owner: dict[str, Any]) -> str:
    if not owner:
        return "another nanobot process"
    return f"{owner.get('kind', 'a runner')} (pid {owner.get('pid', '?')})"


class RunnerLock:
    """The one-runner-per-workspace lock, with who holds it and when it last ticked in cron/runner.json."""

    def __init__(self, store: JobStore, kind: str) -> None:
        self.kind = kind
        self.state_path = store.dir / "runner.json"
        self._lock = ExclusiveLock(store.dir / "runner")

    def try_acquire(self) -> bool:
        try:
            self._lock.acquire()
        except LockHeld:
            return False
        state = self.state()
        if state.get("pid") != os.getpid() or state.get("kind") != self.kind:
            self.write_state()  # who holds it now, for the message another runner shows
        return True

    def acquire(self) -> None:
        if not self.try_acquire():
            owner = self.state()
            raise RunnerBusyError(
                f"another runner is firing this workspace's jobs: {describe_owner(owner)}",
                hint="One runner per workspace: stop the other `nanobot serve` first.",
                owner=owner,
            )

    def release(self) -> None:
        self._lock.release()

    @property
    def held(self) -> bool:
        return self._lock.held

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_state(self, **changes: Any) -> None:
        state = {**self.state(), **changes, "pid": os.getpid(), "kind": self.kind}
        atomic_write(self.state_path, json.dumps(state) + "\n")


def current_runner(store: JobStore) -> dict[str, Any] | None:
    """Who holds the runner lock now (pid, kind), or None when no runner runs."""
    if not store.dir.is_dir():
        return None
    probe = RunnerLock(store, "status")
    try:
        probe._lock.acquire()  # not try_acquire: a probe must not write itself in as the owner
    except LockHeld:
        return probe.state()
    probe.release()
    state = probe.state()
    if state.get("kind") == "chat" and _alive(state.get("pid")):
        return state  # an open chat holds the lock only while it fires, every few seconds
    return None


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class HeartbeatSettings:
    enabled: bool = True
    interval_s: int = 1800


@dataclass
class Scheduler:
    store: JobStore
    turns: JobTurns
    lock: RunnerLock
    clock: Clock = field(default_factory=SystemClock)
    deliveries: list[Delivery] = field(default_factory=list)
    heartbeat: HeartbeatSettings = field(default_factory=HeartbeatSettings)
    poll_s: float = POLL_SECONDS  # longest sleep between rereads of the store
    spend: SpendGate | None = None  # the daily token limits for background work (usage.limits)

    # -- one tick -----------------------------------------------------------------------------

    async def tick(self, *, late_ms: int = MISSED_GAP_MS // 2) -> list[Firing]:
        """Run everything due now; a firing more than `late_ms` overdue after a gap counts as missed.

        The caller holds the runner lock. `serve --once` passes ONCE_LATE_MS: run from system cron
        every few minutes, what fell due since its last run is late, not missed.
        """
        assert self.lock.held, "tick() needs the runner lock"
        now = self.clock.now_ms()
        firings = self._notices_from_store()
        self._schedule_unscheduled(now)
        last_tick = self.lock.state().get("tickMs")
        if not isinstance(last_tick, int) or now - last_tick > MISSED_GAP_MS:
            firings += self._catch_up(now, late_ms)
        if not isinstance(last_tick, int) or now - last_tick >= TICK_RECORD_MS:
            self.lock.write_state(tickMs=now)
        ran = False
        for job in self._claim_due(now):
            firings.append(await self._fire(job))
            ran = True
        beat = await self._maybe_heartbeat(now)
        if beat is not None:
            firings.append(beat)
            ran = True
        if ran:  # a long turn is not a gap: what fell due meanwhile runs late, it was not missed
            self.lock.write_state(tickMs=self.clock.now_ms())
        return firings

    async def serve(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set, sleeping until the next due job (rereading the store meanwhile)."""
        while not stop.is_set():
            await self.tick()
            await self.clock.wait(stop, self.seconds_until_next())

    def due_turns(self) -> list[str]:
        """What a tick now would start a model turn for (job names, "heartbeat"), read without the lock
        and without writing: when it is empty, `serve --once` needs no API key."""
        now = self.clock.now_ms()
        due = [
            job.name
            for job in self.store.jobs()
            if job.due(now)
            or (  # scheduled at the first tick (_schedule_unscheduled): only an `at` can be due at once
                job.enabled
                and job.runnable
                and not job.pending_approval
                and job.next_run_at_ms is None
                and job.schedule.kind == "at"
                and job.schedule.at_ms is not None
                and job.schedule.at_ms <= now
            )
        ]
        beat = self._heartbeat_due_ms(peek=True)
        if beat is not None and beat <= now and self._heartbeat_open_tasks():
            due.append("heartbeat")
        return due

    def seconds_until_next(self) -> float:
        now = self.clock.now_ms()
        times = [
            j.next_run_at_ms
            for j in self.store.jobs()
            if j.enabled and j.runnable and j.next_run_at_ms is not None
        ]
        beat = self._heartbeat_due_ms()
        if beat is not None:
            times.append(beat)
        if not times:
            return self.poll_s
        return max(0.0, min(self.poll_s, (min(times) - now) / 1000))

    # -- jobs ---------------------------------------------------------------------------------

    async def run_now(self, job_id: str) -> Firing:
        """`nanobot cron run ID`: fire one job now, whatever its schedule (it keeps its next time)."""
        job = self.store.get(job_id)
        return await self._fire(job, manual=True)

    def _schedule_unscheduled(self, now: int) -> None:
        """Jobs with no next time (imported, or edited by hand): nanobot computes it on start, so do we."""

        def unscheduled(job: Job) -> bool:
            return job.enabled and job.runnable and job.next_run_at_ms is None

        if not any(unscheduled(j) for j in self.store.jobs()):
            return

        def schedule(jobs: list[Job]) -> None:
            for job in filter(unscheduled, jobs):
                job.next_run_at_ms = (
                    job.schedule.at_ms
                    if job.schedule.kind == "at"
                    else next_run(job.schedule, now, anchor_ms=job.created_at_ms)
                )
                if job.next_run_at_ms is None:
                    job.enabled = False  # nothing left to run (a broken `every`, an expression that never fires)

        self.store.update(schedule)

    def _claim_due(self, now: int) -> list[Job]:
        if not any(j.due(now) for j in self.store.jobs()):
            return []  # the common case: read only, no rewrite

        def claim(jobs: list[Job]) -> list[Job]:
            due = [j for j in jobs if j.due(now)]
            for job in due:
                job.next_run_at_ms = next_run(job.schedule, now, anchor_ms=job.created_at_ms)
                if job.schedule.kind == "at":
                    job.enabled = False
                job.updated_at_ms = now
            return [Job(**{**j.__dict__}) for j in due]

        return self.store.update(claim)

    def _paused(self, job: str, at_ms: int, title: str, job_id: str | None) -> Firing | None:
        """A firing saying `job` waits for a daily limit (delivered the first time only), or None."""
        paused = self.spend.paused(job) if self.spend is not None else None
        if paused is None:
            return None
        key, line = paused
        firing = Firing(
            "job" if job_id else "heartbeat", at_ms, title, "", "skipped", job_id, error=line
        )
        if self.spend is not None and self.spend.first_notice(key):
            self._deliver(firing)
        return firing

    async def _fire(self, job: Job, *, manual: bool = False) -> Firing:
        start = self.clock.now_ms()
        paused = self._paused(job.id, start, f"⏰ {job.name}", job.id)
        if paused is not None:  # no turn, no tokens: the job's next run comes as scheduled
            self._finish(job, RunRecord(start, "skipped", 0, paused.error, None), manual=manual)
            return paused
        prompt = (
            f"[Scheduled job '{job.name}' (id {job.id}, {describe(job.schedule)}) is due now"
            f"{' (run by hand)' if manual else ''}. Do what it asks; your answer is shown to the user as "
            f"the reminder.]\n\n{job.message}"
        )
        session, note = job.session_key, ""
        token = current_job.set(job.id)
        try:
            try:
                result = await self.turns.run(session, prompt)
            except SessionInUseError:
                if job.session is None:
                    raise
                session, note = (
                    f"cron:{job.id}",
                    f" (session {job.session} was in use; ran in {session})",
                )
                result = await self.turns.run(session, prompt)
            status, error = ("error", result.error) if result.error else ("ok", None)
            text = result.content or ""
        except asyncio.CancelledError:
            duration, why = self.clock.now_ms() - start, "the runner stopped during the turn"
            self._finish(job, RunRecord(start, "interrupted", duration, why, session))
            self._deliver(
                Firing(
                    "job",
                    start,
                    f"⏰ {job.name}",
                    "",
                    "interrupted",
                    job.id,
                    session,
                    duration,
                    why,
                )
            )
            raise
        except Exception as exc:  # one failing job must not stop the runner
            status, error, text = "error", f"{type(exc).__name__}: {exc}", ""
        finally:
            current_job.reset(token)
        duration = self.clock.now_ms() - start
        self._finish(job, RunRecord(start, status, duration, error, session), manual=manual)
        firing = Firing(
            "job",
            start,
            f"⏰ {job.name}{note}",
            text,
            status,
            job.id,
            session,
            duration,
            error=(error + note) if error and note else error,
        )
        self._deliver(firing)
        return firing

    def _finish(self, job: Job, record: RunRecord, *, manual: bool = False) -> None:
        def finish(jobs: list[Job]) -> None:
            for stored in jobs:
                if stored.id == job.id:
                    stored.record(record)
                    if (
                        stored.schedule.kind == "at"
                        and stored.delete_after_run
                        and not manual
                        and record.status == "ok"
                    ):
                        jobs.remove(stored)
                    return

        self.store.update(finish)

    def _catch_up(self, now: int, late_ms: int) -> list[Firing]:
        reports: list[Firing] = []

        def catch_up(jobs: list[Job]) -> None:
            for job in jobs:
                due = job.next_run_at_ms
                if not job.enabled or not job.runnable or due is None or due > now - late_ms:
                    continue
                count = 1 + occurrences_between(job.schedule, due, now, anchor_ms=job.created_at_ms)
                since = format_ms(due, job.schedule.tz)
                if job.missed == "skip":
                    job.next_run_at_ms = next_run(job.schedule, now, anchor_ms=job.created_at_ms)
                    if job.schedule.kind == "at":
                        job.enabled = False
                    job.record(
                        RunRecord(
                            now, "skipped", 0, f"missed {count} run(s) since {since}; skipped", None
                        )
                    )
                    text = (
                        f"missed {count} run(s) since {since} while nothing ran; skipped as the job asks"
                        + (
                            f", next at {format_ms(job.next_run_at_ms, job.schedule.tz)}"
                            if job.next_run_at_ms
                            else ""
                        )
                    )
                    reports.append(Firing("notice", now, f"⏰ {job.name}", text, "skipped", job.id))
                else:
                    job.next_run_at_ms = now
                    reports.append(
                        Firing(
                            "notice",
                            now,
                            f"⏰ {job.name}",
                            f"missed {count} run(s) since {since} while nothing ran; running it "
                            "once now",
                            "info",
                            job.id,
                        )
                    )

        self.store.update(catch_up)
        for report in reports:
            self._deliver(report)
        return reports

    def _notices_from_store(self) -> list[Firing]:
        firings = []
        while self.store.notices:  # the store already put them in runs.jsonl
            firing = Firing(
                "notice",
                self.clock.now_ms(),
                "nanobot reminders",
                self.store.notices.pop(0),
                "error",
            )
            self._deliver(firing, record=False)
            firings.append(firing)
        return firings

    # -- heartbeat ----------------------------------------------------------------------------

    def _heartbeat_due_ms(self, *, peek: bool = False) -> int | None:
        """When the heartbeat is next due; `peek` reads the last beat without holding the lock."""
        if not self.heartbeat.enabled:
            return None
        last = self.lock.state().get("heartbeatMs") if self.lock.held or peek else None
        return (last if isinstance(last, int) else 0) + self.heartbeat.interval_s * 1000

    def _heartbeat_open_tasks(self) -> list[str]:
        """HEARTBEAT.md's open tasks, minus those the assistant added that nobody approved yet."""
        try:
            text = heartbeat_path(self.store.workspace).read_text(encoding="utf-8")
        except OSError:
            return []
        waiting = waiting_tasks(self.store.workspace)
        return [task for task in heartbeat_tasks(text) if task not in waiting]

    async def _maybe_heartbeat(self, now: int) -> Firing | None:
        due = self._heartbeat_due_ms()
        if due is None or due > now:
            return None
        self.lock.write_state(heartbeatMs=now)
        tasks = self._heartbeat_open_tasks()
        if not tasks:
            return None  # nothing to do: no turn, no tokens spent
        paused = self._paused("heartbeat", now, "💓 heartbeat", None)
        if paused is not None:
            return paused
        token = current_job.set("heartbeat")
        try:
            result = await self.turns.run(HEARTBEAT_SESSION, heartbeat_prompt(tasks))
            status, error, content = (
                ("error", result.error, "") if result.error else ("ok", None, result.content)
            )
        except Exception as exc:
            status, error, content = "error", f"{type(exc).__name__}: {exc}", ""
        finally:
            current_job.reset(token)
        firing = Firing(
            "heartbeat",
            now,
            "💓 heartbeat",
            content or "",
            status,
            None,
            HEARTBEAT_SESSION,
            self.clock.now_ms() - now,
            error,
            quiet=status == "ok" and is_quiet(content),
        )
        self._deliver(firing)
        return firing

    # -- delivery -----------------------------------------------------------------------------

    def _deliver(self, firing: Firing, *, record: bool = True) -> None:
        if record:
            self.store.append_run(firing.to_json())  # the record, and the feed open chats read
        for delivery in self.deliveries:
            try:
                delivery.deliver(firing)
            except Exception:  # a broken notifier must not lose the record or stop the runner
                pass
