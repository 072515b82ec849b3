"""The seam every provider call passes: the limits are asked before it, the ledger records it after.

`MeteredProvider` wraps the whole provider stack (retries and fallbacks inside it, so a record is
one request as the caller made it, with the model that finally answered). Each part of the
assistant holds its own view, made with `for_source`, so the source is stated where the part is
wired (nanobot/app.py), never guessed: the conversation's view says chat or one-shot, the
helpers' says subagent, the consolidator's says consolidation, `nanobot memory tidy`'s says memory-tidy. Which cron job (or the heartbeat)
the call is spent for comes from the scheduler (`nanobot.cron.jobs.current_job`, set while a
job's turn runs and inherited by the helpers and consolidation that turn starts); the
conversation's calls within a job are recorded as source cron (or heartbeat).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nanobot.config import Config, UsageLimits
from nanobot.cron.jobs import current_job
from nanobot.errors import ProviderError, SpendLimitReached
from nanobot.fsio import atomic_write
from nanobot.messages import Message
from nanobot.paths import ensure_private_dir
from nanobot.providers.base import LLMResponse, Provider, StreamTap
from nanobot.providers.retry import failed_attempt
from nanobot.usage.ledger import DaySpend, Ledger, TodaySpend, UsageRecord, ledger_dir
from nanobot.usage.limits import token_refusal

# Calls that ended before the provider reported usage, though it bills them: counted by nanobot.
# "dropped" is a failed call whose connection broke after the request reached the provider (recorded
# as "error"); "cut" an attempt that did and was made again by the retry layer (providers/retry.py),
# recorded on its own.
BILLED_UNREPORTED = ("cancelled", "cut", "dropped")
SOURCES = ("chat", "one-shot", "subagent", "consolidation", "cron", "heartbeat", "memory-tidy")
TURN_SOURCES = (
    "chat",
    "one-shot",
)  # a turn of a conversation; within a job's turn: cron / heartbeat


class UsageMeter:
    """One per ledger folder and process: the ledger, today's spend and the limits."""

    def __init__(
        self,
        limits: UsageLimits,
        directory: Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limits = limits
        self.dir = Path(directory) if directory is not None else ledger_dir()
        self.ledger = Ledger(self.dir)
        self.today = TodaySpend(self.dir, clock=clock)
        self._config: Path | None = None
        self._lock = (
            threading.Lock()
        )  # event loops in several threads may share the meter (one per home)
        self._config_mtime: float | None = None
        self._clock = clock

    def watch(self, config: Path | None) -> None:
        """Read the limits again when `config` changes: raising a limit in the file lets paused work go on
        without a restart (a long-running `nanobot serve`)."""
        self._config = config
        self._config_mtime = _mtime(config)

    def current_limits(self) -> UsageLimits:
        mtime = _mtime(self._config)
        if self._config is not None and mtime != self._config_mtime:
            self._config_mtime = mtime
            from nanobot.config import load_config
            from nanobot.errors import NanobotError

            try:
                self.limits = load_config(self._config).usage.limits
            except NanobotError:
                pass  # a file being edited: the limits it had stay until it reads again
        return self.limits

    def check(self, job: str | None) -> None:
        """Raise SpendLimitReached when a limit forbids a call for `job` (None: not background work)."""
        refusal = self.refusal(job)
        if refusal is not None:
            raise refusal

    def refusal(self, job: str | None) -> SpendLimitReached | None:
        """The limit that forbids a call for `job` now, if one does (what `check` raises)."""
        return token_refusal(self.current_limits(), self.spent_today(), job)

    def paused(self, job: str) -> tuple[str, str] | None:
        """For the scheduler: (which limit today, the line for the user) when `job` must wait."""
        day = self.spent_today()
        refusal = token_refusal(self.current_limits(), day, job)
        if refusal is None:
            return None
        which = f"{day.start:.0f}:{refusal.key}" + (
            f":{job}" if refusal.key == "jobDailyTokens" else ""
        )
        return which, f"{refusal.message}. {refusal.hint}"

    def first_notice(self, key: str) -> bool:
        """True the first time `key` is asked about (by any process): the user is told once about a pause."""
        path = self.dir / "told.json"
        try:
            told = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            told = {}
        told = told if isinstance(told, dict) else {}
        day = f"{self.today.day.start:.0f}"
        listed = told.get(day)
        keys: list[str] = listed if isinstance(listed, list) else []
        if key in keys:
            return False
        try:
            ensure_private_dir(self.dir)
            atomic_write(
                path, json.dumps({day: [*keys, key]}) + "\n"
            )  # only today's: the file stays small
        except OSError:
            pass  # told again later rather than never
        return True

    def spent_today(self) -> DaySpend:
        with self._lock:
            return self.today.refresh()

    def record(self, record: UsageRecord) -> None:
        with self._lock:
            self.ledger.append(record)

    def now(self) -> float:
        return self._clock()

    def close(self) -> None:
        """fsync and close the ledger's files (a later call opens them again)."""
        with self._lock:
            self.ledger.close()
            self.today.close()


def _mtime(path: Path | None) -> float | None:
    try:
        return os.stat(path).st_mtime if path is not None else None
    except OSError:
        return None


_METERS: dict[Path, UsageMeter] = {}


def shared_meter(cfg: Config) -> UsageMeter:
    """The meter of this process for the current nanobot home, with the limits `cfg` sets (read again
    when its file changes)."""
    directory = ledger_dir()
    meter = _METERS.get(directory)
    if meter is None:
        meter = _METERS[directory] = UsageMeter(cfg.usage.limits, directory)
    elif cfg.path is not None and cfg.path == meter._config:
        return meter  # the same file: its limits are read again when it changes (a later edit wins over `cfg`)
    meter.limits = cfg.usage.limits
    meter.watch(cfg.path)
    return meter


class MeteredProvider(Provider):
    """A provider whose every call is checked against the limits first and recorded after."""

    def __init__(
        self, inner: Provider, meter: UsageMeter, *, source: str, session: str, model: str
    ) -> None:
        if source not in SOURCES:
            raise ValueError(f"unknown usage source {source!r}; one of {', '.join(SOURCES)}")
        super().__init__(inner.model)
        self.name = inner.name
        self.capabilities = (
            inner.capabilities
        )  # one object: what the adapter learns, every view sees
        self.inner = inner
        self.meter = meter
        self.source = source
        self.session = session
        self.label = model  # provider/model as configured

    def for_source(self, source: str) -> MeteredProvider:
        """Another view of the same provider and meter, recording `source`."""
        return MeteredProvider(
            self.inner, self.meter, source=source, session=self.session, model=self.label
        )

    def prewarm(self) -> None:
        self.inner.prewarm()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def chat(self, messages: list[Message], **kwargs: Any) -> LLMResponse:
        job = current_job.get()
        self.meter.check(job)  # raises SpendLimitReached: nothing is sent
        started = time.perf_counter()
        response: LLMResponse | None = None
        outcome = "error"
        on_delta = kwargs.get("on_delta")
        tools = kwargs.get("tools")

        tap = StreamTap(on_delta) if on_delta is not None else None
        if tap is not None:
            kwargs["on_delta"] = tap  # what streamed before a cancel or a cut is billed

        def cut(error: ProviderError, model: str) -> None:
            # an attempt the retry layer makes again: billed by the provider once the request reached it
            nonlocal started
            streamed = tap.text if tap is not None else ""
            if error.sent or streamed:
                ms = int((time.perf_counter() - started) * 1000)
                record = self._record(messages, tools, None, "cut", job, ms, streamed)
                record.model = model or record.model  # a fallback model's attempt is its own
                self.meter.record(record)
            if tap is not None:
                tap.pieces.clear()  # the next attempt's text is its own
            started = time.perf_counter()

        attempts = failed_attempt.set(cut)
        try:
            response = await self.inner.chat(messages, **kwargs)
            outcome = "ok"
            return response
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except ProviderError as error:
            if error.sent or (tap is not None and tap.text):
                outcome = "dropped"  # the last attempt was cut too: billed like the others
            raise
        finally:
            failed_attempt.reset(attempts)
            ms = int((time.perf_counter() - started) * 1000)
            self.meter.record(
                self._record(
                    messages,
                    tools,
                    response,
                    outcome,
                    job,
                    ms,
                    tap.text if tap else "",
                )
            )

    def _record(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        response: LLMResponse | None,
        outcome: str,
        job: str | None,
        ms: int,
        streamed: str = "",
    ) -> UsageRecord:
        source = self.source
        if job is not None and source in TURN_SOURCES:
            source = "heartbeat" if job == "heartbeat" else "cron"
        record = UsageRecord(
            t=self.meter.now(),
            session=self.session,
            source=source,
            job=job,
            model=(response.served_by if response is not None else "") or self.label,
            ms=ms,
            outcome=outcome,
        )
        if response is None:
            if outcome in BILLED_UNREPORTED:
                # stopped midway (Ctrl-C, /stop, a deadline) or cut by the network: the request was sent
                # and the provider bills its prompt and what it streamed, but never reported them:
                # count them, and say so (a cut that was retried is recorded apart from the retry)
                self._estimate(record, messages, tools, streamed)
                if outcome == "dropped":
                    record.outcome = "error"
            return record
        usage = response.usage
        if usage.prompt_tokens or usage.completion_tokens:
            record.prompt, record.completion = usage.prompt_tokens, usage.completion_tokens
            record.cache_read, record.cache_write = (
                usage.cache_read_tokens,
                usage.cache_write_tokens,
            )
        else:  # the provider reported nothing (some local servers): count it ourselves, and say so
            said = (response.content or "") + "".join(
                c.raw_arguments or str(c.arguments) for c in response.tool_calls
            )
            self._estimate(record, messages, tools, said)
        return record

    @staticmethod
    def _estimate(
        record: UsageRecord, messages: list[Message], tools: list[dict[str, Any]] | None, said: str
    ) -> None:
        from nanobot.tokens import count_messages, count_text, count_tools

        record.prompt = count_messages(messages) + count_tools(tools)
        record.completion = count_text(said)
        record.estimated = True
