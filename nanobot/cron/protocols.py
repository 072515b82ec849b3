"""What the cron tool needs of the job store, as a small Protocol (nanobot.cron.store.JobStore is
one; a test, or another backend, can stand in for it, and mypy checks that it does)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from nanobot.cron.jobs import Job
    from nanobot.cron.schedule import Schedule

__all__ = ["JobStoreLike", "JobStoreAdmin"]

T = TypeVar("T")


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


class JobStoreAdmin(JobStoreLike, Protocol):
    """What `nanobot cron ...` and status ask besides: where the jobs are kept, one job, and changes."""

    @property
    def dir(self) -> Path: ...

    @property
    def path(self) -> Path: ...

    def get(self, job_id: str, /) -> Job:
        """Raises JobNotFoundError."""
        ...

    def update(self, change: Callable[[list[Job]], T], /) -> T:
        """Apply `change` to the job list and save it, under the store's lock."""
        ...

    def set_enabled(self, job_id: str, enabled: bool, /, *, now_ms: int) -> Job: ...

    def approve(self, job_id: str, /, *, now_ms: int) -> Job: ...
