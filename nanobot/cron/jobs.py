"""A job and its JSON form: nanobot's `cron/jobs.json` layout, so a nanobot user's jobs carry over.

The file is `{"version": 1, "jobs": [...]}`; each job has nanobot's keys (id, name, enabled,
schedule{kind, atMs, everyMs, expr, tz}, payload{kind, message, deliver, channel, to},
state{nextRunAtMs, lastRunAtMs, lastStatus, lastError, runHistory}, createdAtMs, updatedAtMs,
deleteAfterRun). Ours adds `payload.sessionKey` (the target session, as newer nanobot does)
and `missed` ("run_once" | "skip"). Keys we do not know are kept as they were.
"""

from __future__ import annotations

import copy
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from nanobot.cron.schedule import Schedule
from nanobot.errors import JobFormatError

__all__ = [
    "Job",
    "RunRecord",
    "JobFormatError",
    "current_job",
    "decode_store",
    "encode_store",
    "MISSED_POLICIES",
]

MISSED_POLICIES = ("run_once", "skip")
HISTORY_KEPT = 20  # run records kept inside jobs.json; every run is also in cron/runs.jsonl

# Set while a job's turn runs, so the cron tool can refuse to add jobs from inside a job.
current_job: ContextVar[str | None] = ContextVar("nanobot_current_job", default=None)


def _dict_at(data: dict[str, Any], key: str) -> dict[str, Any]:
    """data[key] when it is an object, else an empty one (a job file may lack or garble it)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


@dataclass
class RunRecord:
    run_at_ms: int
    status: str  # "ok" | "error" | "skipped" | "interrupted"
    duration_ms: int = 0
    error: str | None = None
    session: str | None = None  # the session the turn ran in

    def to_json(self) -> dict[str, Any]:
        return {
            "runAtMs": self.run_at_ms,
            "status": self.status,
            "durationMs": self.duration_ms,
            "error": self.error,
            "session": self.session,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunRecord:
        return cls(
            int(data.get("runAtMs") or 0),
            str(data.get("status") or "ok"),
            int(data.get("durationMs") or 0),
            data.get("error"),
            data.get("session"),
        )


@dataclass
class Job:
    id: str
    name: str
    schedule: Schedule
    message: str
    enabled: bool = True
    session: str | None = None  # target session key; None: its own session cron:<id>
    missed: str = "run_once"  # what to do with firings missed while no runner ran
    channel: str | None = None  # where it was created (nanobot's payload.channel / payload.to)
    to: str | None = None
    created_at_ms: int = 0
    updated_at_ms: int = 0
    delete_after_run: bool = False
    next_run_at_ms: int | None = None
    last_run_at_ms: int | None = None
    last_status: str | None = None
    last_error: str | None = None
    history: list[RunRecord] = field(default_factory=list)
    raw: dict[str, Any] = field(
        default_factory=dict, repr=False
    )  # the job as read, unknown keys included
    pending_approval: bool = (
        False  # the assistant added it and no person approved it yet: it does not fire
    )

    @property
    def session_key(self) -> str:
        return self.session or f"cron:{self.id}"

    @property
    def memory(self) -> bool:
        """The job's turns may consolidate into MEMORY.md and HISTORY.md (its "memory": true; off by default)."""
        return self.raw.get("memory") is True

    @property
    def runnable(self) -> bool:
        """An agent turn with a message; nanobot's internal jobs (payload.kind system_event) are kept, not run."""
        payload = _dict_at(self.raw, "payload")
        return payload.get("kind", "agent_turn") in ("agent_turn", None) and bool(
            self.message.strip()
        )

    def due(self, now_ms: int) -> bool:
        return (
            self.enabled
            and self.runnable
            and not self.pending_approval
            and self.next_run_at_ms is not None
            and self.next_run_at_ms <= now_ms
        )

    def record(self, run: RunRecord) -> None:
        self.last_run_at_ms = run.run_at_ms
        self.last_status = run.status
        self.last_error = run.error
        self.history = [*self.history, run][-HISTORY_KEPT:]

    def to_json(self) -> dict[str, Any]:
        out = copy.deepcopy(self.raw)
        s = self.schedule
        out.update(
            {
                "id": self.id,
                "name": self.name,
                "enabled": self.enabled,
                "schedule": {
                    **out.get("schedule", {}),
                    "kind": s.kind,
                    "atMs": s.at_ms,
                    "everyMs": s.every_ms,
                    "expr": s.expr,
                    "tz": s.tz,
                },
            }
        )
        payload = _dict_at(out, "payload")
        payload.update(
            {
                "kind": payload.get("kind") or "agent_turn",
                "message": self.message,
                "deliver": bool(payload.get("deliver", True)),
                "channel": self.channel,
                "to": self.to,
                "sessionKey": self.session,
            }
        )
        out["payload"] = payload
        state = _dict_at(out, "state")
        state.update(
            {
                "nextRunAtMs": self.next_run_at_ms,
                "lastRunAtMs": self.last_run_at_ms,
                "lastStatus": self.last_status,
                "lastError": self.last_error,
                "runHistory": [r.to_json() for r in self.history],
            }
        )
        out["state"] = state
        out.update(
            {
                "createdAtMs": self.created_at_ms,
                "updatedAtMs": self.updated_at_ms,
                "deleteAfterRun": self.delete_after_run,
                "missed": self.missed,
            }
        )
        out.pop("pendingApproval", None)
        if self.pending_approval:
            out["pendingApproval"] = True
        return out

    @classmethod
    def from_json(cls, data: Any, index: int) -> Job:
        where = f"jobs[{index}]"
        if not isinstance(data, dict):
            raise JobFormatError(f"{where} is not an object")
        sched = data.get("schedule")
        if not isinstance(sched, dict) or sched.get("kind") not in ("at", "every", "cron"):
            raise JobFormatError(f"{where}.schedule.kind must be at, every or cron")
        payload = _dict_at(data, "payload")
        state = _dict_at(data, "state")
        job_id = data.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise JobFormatError(f"{where}.id must be a non-empty string")
        try:
            schedule = Schedule(
                sched["kind"],
                at_ms=_opt_int(sched, "atMs", "at_ms"),
                every_ms=_opt_int(sched, "everyMs", "every_ms"),
                expr=sched.get("expr"),
                tz=sched.get("tz"),
            )
            history = [
                RunRecord.from_json(r)
                for r in (state.get("runHistory") or state.get("run_history") or [])
                if isinstance(r, dict)
            ]
            missed = data.get("missed")
            missed = missed if isinstance(missed, str) and missed in MISSED_POLICIES else "run_once"
            return cls(
                id=job_id,
                name=str(data.get("name") or job_id),
                schedule=schedule,
                message=str(payload.get("message") or ""),
                enabled=bool(data.get("enabled", True)),
                session=payload.get("sessionKey") or payload.get("session_key") or None,
                missed=missed,
                channel=payload.get("channel"),
                to=payload.get("to"),
                created_at_ms=_opt_int(data, "createdAtMs", "created_at_ms") or 0,
                updated_at_ms=_opt_int(data, "updatedAtMs", "updated_at_ms") or 0,
                delete_after_run=bool(
                    data.get("deleteAfterRun", data.get("delete_after_run", False))
                ),
                next_run_at_ms=_opt_int(state, "nextRunAtMs", "next_run_at_ms"),
                last_run_at_ms=_opt_int(state, "lastRunAtMs", "last_run_at_ms"),
                last_status=state.get("lastStatus") or state.get("last_status"),
                last_error=state.get("lastError") or state.get("last_error"),
                history=history,
                raw=copy.deepcopy(data),
                pending_approval=data.get("pendingApproval") is True,
            )
        except (TypeError, ValueError) as exc:
            raise JobFormatError(f"{where}: {exc}") from None


def _opt_int(data: dict, camel: str, snake: str) -> int | None:
    value = data.get(camel, data.get(snake))
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise ValueError(f"{camel} must be a number")
    return int(value)


# values whose keys a person or a chat app chose: kept as written when a job changes case
_FREE_FORM = {"channel_meta", "origin_metadata"}


def camel_job(data: Any) -> Any:
    """A job as nanobot 0.3.x's cron/action.jsonl holds it (`dataclasses.asdict`, snake_case keys)
    in jobs.json's camelCase, so it reads and saves like every other job."""
    from nanobot.config_check import to_camel

    if isinstance(data, list):
        return [camel_job(item) for item in data]
    if not isinstance(data, dict):
        return data
    return {
        to_camel(key): value if key in _FREE_FORM else camel_job(value)
        for key, value in data.items()
    }


def decode_store(data: Any) -> tuple[list[Job], dict[str, Any]]:
    """Jobs from the parsed file, plus its other top-level keys (kept on save)."""
    if isinstance(data, list):  # a bare list of jobs
        data = {"version": 1, "jobs": data}
    if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
        raise JobFormatError('the file must be an object with a "jobs" list')
    jobs = [Job.from_json(item, i) for i, item in enumerate(data.get("jobs") or [])]
    ids = [job.id for job in jobs]
    if len(set(ids)) != len(ids):
        raise JobFormatError("two jobs have the same id")
    extra = {k: v for k, v in data.items() if k != "jobs"}
    return jobs, extra


def encode_store(jobs: list[Job], extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": 1,
        **{k: v for k, v in extra.items() if k != "version"},
        "jobs": [j.to_json() for j in jobs],
    }
