"""The cron tool: nanobot's parameters (action add/list/remove, message, every_seconds, cron_expr,
tz, at, job_id), so skills and habits carry over. Jobs fire as turns while `nanobot serve` or
a chat runs (nanobot/cron/runner.py).

Refused: adding a job from inside a job's turn (a job that schedules jobs could multiply
without end), and any call from a subagent (its registry has no cron tool at all).
"""

from __future__ import annotations

import time
from typing import Any

from nanobot.cron.jobs import MISSED_POLICIES, current_job
from nanobot.cron.protocols import JobStoreLike
from nanobot.cron.schedule import describe, format_ms, parse_schedule
from nanobot.errors import ToolError, UsageError
from nanobot.tools.approval import ApprovalRequest, approve_flag_hint
from nanobot.tools.base import Tool, ToolContext


class CronTool(Tool):
    name = "cron"
    description = (
        "Schedule reminders and recurring tasks (add, list, remove). add: `message` runs as a new turn when "
        "the job fires; give one of every_seconds, cron_expr or at. Jobs fire while `nanobot serve` or a chat runs."
    )
    parameters = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "list", "remove"]},
            "message": {"type": "string", "description": "what to do or say when it fires"},
            "every_seconds": {"type": "integer"},
            "cron_expr": {"type": "string", "description": "e.g. '0 9 * * 1-5'"},
            "tz": {"type": "string", "description": "IANA zone for cron_expr or a naive at"},
            "at": {"type": "string", "description": "one ISO time, e.g. '2026-03-01T10:30'"},
            "job_id": {"type": "string", "description": "for remove (ids are in list)"},
            "name": {"type": "string", "description": "short label"},
            "session": {
                "type": "string",
                "description": "run in this session (default: the job's own)",
            },
            "missed": {
                "type": "string",
                "enum": ["run_once", "skip"],
                "description": "runs missed while off",
            },
        },
        "required": ["action"],
    }

    def __init__(
        self,
        ctx: ToolContext,
        store: JobStoreLike,
        *,
        default_tz: str = "",
        origin: str = "cli:direct",
    ) -> None:
        super().__init__(ctx)
        self.store = store
        self.default_tz = default_tz
        self.origin = origin  # the session this assistant talks in (nanobot's channel:chat_id)

    def hint(self, args: dict[str, Any]) -> str:
        action = args.get("action", "?")
        detail = args.get("job_id") or args.get("message") or ""
        return f"cron({action}{', ' + repr(str(detail)[:40]) if detail else ''})"

    async def run(self, action: str = "", **args: Any) -> str:
        try:
            if action == "add":
                return await self._add(**args) + self._notices()
            if action == "list":
                return self._list() + self._notices()
            if action == "remove":
                return self._remove(args.get("job_id")) + self._notices()
        except UsageError as exc:
            raise ToolError(str(exc) + self._notices()) from None
        raise ToolError(f"unknown action {action!r}; use add, list or remove")

    def _notices(self) -> str:
        """What the store had to do (a damaged file kept aside, jobs imported): the user must hear it."""
        notes = "".join(f"\nNote for the user: {note}" for note in self.store.notices)
        self.store.notices.clear()
        return notes

    async def _add(
        self,
        message: str = "",
        every_seconds: int | None = None,
        cron_expr: str | None = None,
        tz: str | None = None,
        at: str | None = None,
        name: str | None = None,
        session: str | None = None,
        missed: str | None = None,
        **_: Any,
    ) -> str:
        running = current_job.get()
        if running is not None:
            raise ToolError(
                f"cannot add jobs while a scheduled job runs (this turn is job {running}); "
                "tell the user what you would schedule instead"
            )
        if not message.strip():
            raise ToolError("add needs a message: what to do when the job fires")
        if missed is not None and missed not in MISSED_POLICIES:
            raise ToolError(f"missed must be one of {', '.join(MISSED_POLICIES)}")
        now = int(time.time() * 1000)
        schedule = parse_schedule(
            every_seconds=every_seconds,
            cron_expr=cron_expr,
            tz=tz,
            at=at,
            default_tz=self.default_tz,
            now_ms=now,
        )
        seen = await self._approve(describe(schedule), message)
        channel, _colon, chat_id = self.origin.partition(":")
        job = self.store.add(
            schedule,
            message,
            now_ms=now,
            name=name,
            session=session,
            missed=missed or "run_once",
            channel=channel or "cli",
            to=chat_id or "direct",
            pending_approval=not seen,
        )
        if (
            job.pending_approval
        ):  # allowed by a flag, the config or an earlier "always": nobody saw this job
            return (
                f"Created job '{job.name}' (id: {job.id}), {describe(job.schedule)}. It waits for the user's "
                f"approval before it fires (`nanobot cron approve {job.id}`); tell the user."
            )
        return (
            f"Created job '{job.name}' (id: {job.id}), {describe(job.schedule)}; next run "
            f"{format_ms(job.next_run_at_ms, job.schedule.tz or self.default_tz)}. It fires while "
            "`nanobot serve` or a chat is running."
        )

    async def _approve(self, when: str, message: str) -> bool:
        """A job runs on a schedule, later, with nobody watching: the user decides (DESIGN: safety).
        Returns whether a person saw and approved this job (else it waits for `nanobot cron approve`)."""
        decision = await self.ctx.approver.approve(
            ApprovalRequest(
                kind="persistence",
                summary=f"cron wants to schedule a job, {when}: {message.strip()[:80]!r}",
                detail=message if len(message.strip()) > 80 else "",
                always_key="cron-add",  # the rest of it
                allow_hint=approve_flag_hint("persistence"),
            )
        )
        if not decision.allowed:
            raise ToolError(
                f"the job was not scheduled — {decision.reason.strip() or 'refused'}. Do not retry "
                "the same call; tell the user what you would schedule, or ask them."
            )
        return decision.by_person

    def _list(self) -> str:
        jobs = self.store.jobs()
        if not jobs:
            return "No scheduled jobs."
        lines = []
        for job in jobs:
            state = "" if job.enabled else " [paused]" if job.schedule.kind != "at" else " [done]"
            state += " [waits for the user's approval]" if job.pending_approval else ""
            said = "" if job.message.strip() == job.name else f" — {job.message.strip()[:200]!r}"
            lines.append(
                f"- {job.name}{said} (id: {job.id}, {describe(job.schedule)}){state}; next run "
                f"{format_ms(job.next_run_at_ms, job.schedule.tz or self.default_tz)}"
                + (
                    f"; last run {format_ms(job.last_run_at_ms, job.schedule.tz or self.default_tz)} "
                    f"{job.last_status}"
                    if job.last_run_at_ms
                    else ""
                )
            )
        return "Scheduled jobs:\n" + "\n".join(lines)

    def _remove(self, job_id: str | None) -> str:
        if not job_id:
            raise ToolError("remove needs job_id (list shows the ids)")
        job = self.store.remove(job_id)
        return f"Removed job '{job.name}' ({job.id})"
