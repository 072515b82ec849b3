"""The job store: `<workspace>/cron/jobs.json`, rewritten atomically under a file lock.

Every change is read-modify-write under the lock, so `nanobot cron add`, the chat's cron
tool and a running `nanobot serve` never overwrite each other. A file that cannot be parsed
is moved aside (never emptied) and a notice says where it went. Every run is appended to
`cron/runs.jsonl` (when, which job, which session, outcome, result).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from nanobot import paths
from nanobot.cron.jobs import Job, JobFormatError, camel_job, decode_store, encode_store
from nanobot.cron.schedule import Schedule, next_run
from nanobot.errors import JobNotFoundError, LockHeld, StoreBusyError, UsageError
from nanobot.fsio import ExclusiveLock, append_durably, atomic_write, rotate_when_larger

__all__ = ["JobStore", "JobNotFoundError", "StoreBusyError"]

T = TypeVar("T")
LOCK_WAIT_SECONDS = 10.0
REREAD_DELAY_SECONDS = 0.3
LOG_LIMIT_BYTES = 10_000_000  # runs.jsonl and cron.log: past this, the file becomes <name>.1
# nanobot 0.3.x's `nanobot agent` logs the jobs its cron tool adds, changes and removes here, for
# its gateway to merge into jobs.json; the lines merged are kept in <name>.imported
NANOBOT_ACTIONS = "action.jsonl"


def cron_dir(workspace: Path) -> Path:
    return workspace / "cron"


class JobStore:
    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.dir = cron_dir(workspace)
        self.path = self.dir / "jobs.json"
        self.runs_path = self.dir / "runs.jsonl"
        self.actions_path = self.dir / NANOBOT_ACTIONS
        self.notices: list[
            str
        ] = []  # what the user must be told (a file kept aside, jobs imported)
        self._extra: dict[str, Any] = {}

    # -- reading ------------------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        legacy = paths.nanobot_home() / "cron" / "jobs.json"
        if not self.path.exists() and not legacy.is_file() and not self.actions_path.is_file():
            return []  # nothing to read, and a listing creates no folder (the lock would)
        with self._locked():
            return self._load()

    def get(self, job_id: str) -> Job:
        for job in self.jobs():
            if job.id == job_id:
                return job
        raise JobNotFoundError(
            f"no job with id {job_id!r}", hint="`nanobot cron list` shows the jobs and their ids."
        )

    def update(self, change: Callable[[list[Job]], T]) -> T:
        """Apply `change` to the job list (in place) and save it, all under the lock."""
        with self._locked():
            jobs = self._load()
            result = change(jobs)
            self._save(jobs)
            return result

    # -- changes ------------------------------------------------------------------------------

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
    ) -> Job:
        if not message.strip():
            raise UsageError("a job needs a message: what the assistant should do when it fires")

        def add(jobs: list[Job]) -> Job:
            taken = {j.id for j in jobs}
            job_id = secrets.token_hex(4)
            while job_id in taken:
                job_id = secrets.token_hex(4)
            job = Job(
                id=job_id,
                name=(name or message.strip().splitlines()[0][:30]).strip(),
                schedule=schedule,
                message=message,
                session=session or None,
                missed=missed,
                channel=channel,
                to=to,
                created_at_ms=now_ms,
                updated_at_ms=now_ms,
                delete_after_run=schedule.kind == "at",
                pending_approval=pending_approval,
            )
            job.next_run_at_ms = next_run(schedule, now_ms, anchor_ms=now_ms)
            jobs.append(job)
            return job

        return self.update(add)

    def remove(self, job_id: str) -> Job:
        def remove(jobs: list[Job]) -> Job:
            job = _find(jobs, job_id)
            jobs.remove(job)
            return job

        return self.update(remove)

    def set_enabled(self, job_id: str, enabled: bool, *, now_ms: int) -> Job:
        def change(jobs: list[Job]) -> Job:
            job = _find(jobs, job_id)
            job.enabled = enabled
            job.updated_at_ms = now_ms
            # resuming never replays what was missed while paused
            job.next_run_at_ms = (
                next_run(job.schedule, now_ms, anchor_ms=job.created_at_ms) if enabled else None
            )
            return job

        return self.update(change)

    def approve(self, job_id: str, *, now_ms: int) -> Job:
        """The user approves a job the assistant added: from now on it fires."""

        def change(jobs: list[Job]) -> Job:
            job = _find(jobs, job_id)
            job.pending_approval = False
            job.updated_at_ms = now_ms
            return job

        return self.update(change)

    # -- run records --------------------------------------------------------------------------

    def append_run(self, entry: dict[str, Any]) -> None:
        rotate_when_larger(self.runs_path, LOG_LIMIT_BYTES)
        append_durably(self.runs_path, json.dumps(entry, ensure_ascii=False) + "\n")

    def read_runs(self, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
        """Complete records written after byte `offset`, and the offset to read from next."""
        try:
            with open(self.runs_path, "rb") as fh:
                if offset > os.fstat(fh.fileno()).st_size:
                    offset = 0  # the file was rotated: read the new one from its start
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return [], 0
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        records = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records, offset + end

    def runs_end(self) -> int:
        try:
            return self.runs_path.stat().st_size
        except FileNotFoundError:
            return 0

    # -- the file -----------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        lock = ExclusiveLock(self.path, timeout=LOCK_WAIT_SECONDS)
        try:
            lock.acquire()
        except LockHeld:
            raise StoreBusyError(
                f"{self.path} stayed locked by another nanobot process for "
                f"{LOCK_WAIT_SECONDS:.0f}s",
                hint="Try again in a moment.",
            ) from None
        try:
            yield
        finally:
            lock.release()

    def _load(self) -> list[Job]:
        jobs = self._read()
        self._merge_nanobot_actions(jobs)
        return jobs

    def _read(self) -> list[Job]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return self._import_legacy()
        if not text.strip():
            return []
        try:
            jobs, self._extra = decode_store(json.loads(text))
        except (ValueError, JobFormatError):
            # an editor may be halfway through saving it by hand: look again before judging
            time.sleep(REREAD_DELAY_SECONDS)
            try:
                jobs, self._extra = decode_store(json.loads(self.path.read_text(encoding="utf-8")))
            except FileNotFoundError:
                return []
            except (ValueError, JobFormatError) as exc:
                self._keep_aside(exc)
                return []
        return jobs

    def _keep_aside(self, exc: Exception) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        aside = self.path.with_name(f"jobs.json.corrupt-{stamp}")
        n = 1
        while aside.exists():
            n += 1
            aside = self.path.with_name(f"jobs.json.corrupt-{stamp}-{n}")
        self.path.rename(aside)
        self._extra = {}
        self._notice(
            f"{self.path} could not be read ({exc}); it was kept as {aside.name} and no job "
            f"from it will fire. Fix that file and move it back to jobs.json (when no other "
            f"job has been added since), or add the jobs again."
        )

    def _import_legacy(self) -> list[Job]:
        """A nanobot user's jobs live in ~/.nanobot/cron/jobs.json: bring them into the workspace once."""
        legacy = paths.nanobot_home() / "cron" / "jobs.json"
        if legacy.resolve() == self.path.resolve() or not legacy.is_file():
            return []
        try:
            jobs, self._extra = decode_store(json.loads(legacy.read_text(encoding="utf-8")))
        except (OSError, ValueError, JobFormatError) as exc:
            self._notice(
                f"nanobot's jobs file {legacy} could not be read ({exc}); it was left as it "
                "was and none of its jobs were imported"
            )
            self._save([])  # remember that the import was tried: the notice is not repeated
            return []
        self._save(jobs)
        self._notice(
            f"imported {len(jobs)} job(s) from {legacy} (nanobot's location) into {self.path}; "
            "the original was left as it was"
        )
        return jobs

    def _merge_nanobot_actions(self, jobs: list[Job]) -> None:
        """Apply nanobot 0.3.x's cron/action.jsonl to `jobs` and save them, as its gateway does
        (under its lock, <workspace>/cron.lock), so a reminder made in its `nanobot agent` is not
        lost here. The log is then emptied, as nanobot empties it, its lines kept aside first."""
        try:
            if self.actions_path.stat().st_size == 0:
                return
        except OSError:
            return
        lock = ExclusiveLock(self.dir, timeout=LOCK_WAIT_SECONDS)
        try:
            lock.acquire()
        except LockHeld:
            return  # nanobot is writing to it: merged next time
        try:
            data = self.actions_path.read_bytes()
            applied, skipped = 0, 0
            for line in data.decode("utf-8", errors="replace").splitlines():
                if not line.strip():
                    continue
                try:
                    action = json.loads(line)
                    params = action["params"]
                    at = next((i for i, job in enumerate(jobs) if job.id == params.get("id")), None)
                    if action["action"] == "del":
                        jobs[:] = [job for job in jobs if job.id != params.get("job_id")]
                    elif at is None:
                        jobs.append(Job.from_json(camel_job(params), len(jobs)))
                    else:  # nanobot's copy knows nothing of a wait for approval: it stays
                        changed = Job.from_json(camel_job(params), at)
                        changed.pending_approval = jobs[at].pending_approval
                        jobs[at] = changed
                    applied += 1
                except (ValueError, KeyError, TypeError, AttributeError, JobFormatError):
                    skipped += 1
            self._save(jobs)
            append_durably(self.actions_path.with_name(NANOBOT_ACTIONS + ".imported"), data)
            os.truncate(self.actions_path, 0)
        finally:
            lock.release()
        unread = f"; {skipped} line(s) could not be read" if skipped else ""
        self._notice(
            f"merged {applied} job change(s) nanobot left in {self.actions_path} into {self.path}, "
            f"as nanobot's gateway would{unread}; the lines are kept in {NANOBOT_ACTIONS}.imported"
        )

    def _notice(self, text: str) -> None:
        """Tell whoever called (`notices`) and every open chat (a record in runs.jsonl)."""
        self.notices.append(text)
        self.append_run(
            {
                "kind": "notice",
                "at_ms": int(time.time() * 1000),
                "title": "nanobot reminders",
                "text": text,
                "status": "error",
            }
        )

    def _save(self, jobs: list[Job]) -> None:
        atomic_write(
            self.path,
            json.dumps(encode_store(jobs, self._extra), indent=2, ensure_ascii=False) + "\n",
        )


def _find(jobs: list[Job], job_id: str) -> Job:
    for job in jobs:
        if job.id == job_id:
            return job
    raise JobNotFoundError(
        f"no job with id {job_id!r}", hint="`nanobot cron list` shows the jobs and their ids."
    )
