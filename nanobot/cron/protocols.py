"""What the cron tool needs of the job store, as a small Protocol (nanobot.cron.store.JobStore is
one; a test, or another backend, can stand in for it, and mypy checks that it does)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nanobot.cron.jobs import Job
    from nanobot.cron.schedule import Schedule

__all__ = ["JobStoreLike"]


class JobStoreLike(Protocol):
    notices: list[
        str
    ]  # what the user must be told (a damaged file kept aside, jobs imported); read and cleared

    def jobs(self) -> list[Job]: ...

    def add(
        self,
        schedule: Schedule,
        message: str,
        *,
        now_ms: int,
        name: str | None = None,
        session: str | None = None,
        missed: str = "run_once",
        channel: str | None = None,
        to: str | None = None,
        pending_approval: bool = False,
    ) -> Job: ...

    def remove(self, job_id: str, /) -> Job:
        """Raises JobNotFoundError."""
        ...
