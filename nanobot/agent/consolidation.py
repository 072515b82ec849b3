"""Token-budget consolidation: summarise old messages into MEMORY.md and HISTORY.md.

The session file is never shortened; consolidation moves `last_consolidated` forward once the
chunk it passes over is durably recorded (a summary in HISTORY.md and the facts in MEMORY.md,
or, after repeated failures, a RAW archive). Each entry ends with a marker naming its chunk, so a
crash before the pointer write is completed next time without a second entry. What counts as a
failure, and what a consolidation may spend, is in compaction.py.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nanobot.agent.budget import ContextBudget
from nanobot.agent.compaction import (
    MARKER_SCAN_BYTES,
    ConsolidationPostponed,
    chunk_marker,
    cut_transcript,
    is_outage,
    recorded_count,
    short_reason,
)
from nanobot.agent.events import EventSink, Notice, ignore
from nanobot.config import AgentDefaults
from nanobot.errors import ConsolidationFailure, NanobotError, ProviderError, SpendLimitReached
from nanobot.memory.protocols import ConsolidationMemory
from nanobot.memory.store import MemoryUpdateRefused
from nanobot.messages import Message, cut_middle, parse_timestamp, transcript_lines
from nanobot.providers.base import LLMResponse, Provider
from nanobot.secrets_mask import mask_secrets
from nanobot.session.protocols import SessionWriter
from nanobot.session.runtime_context import user_with_context
from nanobot.session.save_policy import as_sent
from nanobot.session.store import Session
from nanobot.session.working_state import SHAPE, count_items, items_phrase

__all__ = [
    "Consolidator",
    "ConsolidationReport",
    "SAVE_MEMORY_TOOL",
    "DEFAULT_PROBE",
    "probe_message",
    "render_transcript",
    "parse_save_memory",
    "ConsolidationFailure",
]

SAVE_MEMORY_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "save_memory",
        "description": "Archive the conversation excerpt: a dated HISTORY.md entry and the full new MEMORY.md.",
        "parameters": {
            "type": "object",
            "properties": {
                "history_entry": {
                    "type": "string",
                    "description": "One paragraph starting with [YYYY-MM-DD HH:MM]: what happened, with the "
                    "names, files, commands, decisions and numbers someone would grep for.",
                },
                "memory_update": {
                    "type": "string",
                    "description": "The complete new MEMORY.md: every still-true existing fact plus the new "
                    "lasting facts from this excerpt (markdown).",
                },
                "session_checkpoint": {
                    "type": "string",
                    "description": "The working state of this conversation, replacing the previous one.",
                },
            },
            "required": ["history_entry", "memory_update"],
        },
    },
}

_INSTRUCTIONS = """You maintain the long-term memory of nanobot, a personal AI assistant.
Below is the current MEMORY.md and an excerpt of an older conversation that is about to leave the
assistant's context. Call the save_memory tool exactly once:
- history_entry: one paragraph that starts with {stamp} (the time of the excerpt's first message),
  summarising what happened. Be specific enough to find it later with grep: people, names, file
  paths, commands, decisions, numbers, dates, errors and their fixes.
- memory_update: the COMPLETE new MEMORY.md. Keep every existing fact that is still true (do not
  shorten or drop them), add lasting facts learned in the excerpt (who the user is, preferences,
  projects, decisions, names), and correct facts the excerpt contradicts. If nothing new was
  learned, return the current MEMORY.md unchanged. Never return an empty text.
- session_checkpoint: the task in hand in THIS conversation, replacing the previous checkpoint (keep
  what still matters, drop what is done), short, in this shape:
{shape}"""

# A typical runtime-context block, so the probe costs what the real current message costs.
_SAMPLE_CONTEXT = (
    "Current time: 2026-01-01 00:00 (Wednesday) America/Argentina/Buenos_Aires (UTC-03:00)\n"
    "Channel: telegram\nChat ID: 1234567890123456789"
)
# Stands in for the next user message when it is not known yet (the background check).
DEFAULT_PROBE = (
    "Can you look at the file we talked about earlier, check what changed since then, "
    "and tell me what you think we should do next? Keep it short please, a few lines."
)

# Transcript limits, from generous to tight; the tighter ones are tried when a single turn is too big.
_RENDER_LADDER: tuple[tuple[int, int | None], ...] = (
    (2000, None),
    (800, None),
    (300, None),
    (300, 6000),
    (150, 2000),
    (80, 600),
    (40, 200),
)
_ARG_CHARS = 200
# Below this many tokens of room an excerpt is too short to be worth a summarising call.
_MIN_EXCERPT_TOKENS = 200

SystemPrompt = str | Callable[[], str]


def probe_message(text: str = DEFAULT_PROBE) -> Message:
    """A stand-in for the next user message, at the size it is sent (with a runtime-context block)."""
    return as_sent(user_with_context(text, _SAMPLE_CONTEXT))


@dataclass
class ConsolidationReport:
    rounds: int = 0
    messages: int = 0  # messages the pointer moved past
    history_entries: list[str] = field(default_factory=list)  # first line of each entry written
    raw_archived: bool = False
    failures: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)  # for the user (held-back memory updates, ...)
    checkpoint: str = ""  # the session's working state after this run (session/working_state.py)
    checkpoint_version: int = 0  # the version this run wrote last (0: none)
    before: int = 0  # estimated prompt tokens
    after: int = 0
    failed_calls: int = (
        0  # calls that failed (wrong answer or rejected request), all chunks together
    )
    postponed: str = (
        ""  # why consolidation stopped without archiving (provider unavailable, cannot fit)
    )
    kept_as: str = ""  # /new: the name the old conversation is kept under (`<key>@<stamp>`)
    # /new: the working state leaves with the conversation, so the lines say nothing of keeping it
    ends_conversation: bool = False

    @property
    def ran(self) -> bool:
        return self.messages > 0

    def receipt(self) -> str:
        if not self.messages:
            return (
                f"nothing archived: {self.postponed}"
                if self.postponed
                else "nothing to consolidate"
            )
        where = "; ".join(_short(e) for e in self.history_entries) or "HISTORY.md"
        raw = " (some archived RAW)" if self.raw_archived else ""
        return f"archived {self.messages} message(s) in HISTORY.md{raw}: {where}"


def _short(line: str, limit: int = 80) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


DEFAULT_TIMEOUT = (
    AgentDefaults.consolidation_timeout_seconds
)  # seconds for one request, retries included


class Consolidator:
    """Picks where to cut and summarises; whether a prompt fits is the ContextBudget's question."""

    def __init__(
        self,
        provider: Provider,
        memory: ConsolidationMemory,
        store: SessionWriter,
        budget: ContextBudget,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        max_rounds: int = 5,
        max_failures: int = 3,
        clock: Callable[[], datetime] = datetime.now,
        memory_writes: bool = True,
    ) -> None:
        self.provider = provider
        self.memory = memory
        self.store = store
        self.budget = budget
        self.timeout = timeout
        self.max_rounds = max_rounds
        self.max_failures = max_failures
        self.clock = clock
        # False for a background session (a cron job's, the heartbeat's): its consolidated messages stay in
        # its session file only; MEMORY.md and HISTORY.md are left alone and no model call is made
        self.memory_writes = memory_writes
        self._locks: dict[str, asyncio.Lock] = {}
        self._announced: set[str] = (
            set()
        )  # postponement reasons the user was told about (once each)
        # sessions whose last automatic consolidation was postponed: the next one starts without its
        # "compacting …" line, which a postponement said once would leave without an end every turn
        self._postponed: set[str] = set()

    def estimate(
        self,
        session: Session,
        *,
        system_prompt: SystemPrompt,
        tool_schemas: list[dict] | None,
        probe: str = DEFAULT_PROBE,
    ) -> int:
        """The next request's size as the budget sees it: system + history + tools + the coming message."""
        return self.budget.estimate(
            session, system_prompt=system_prompt, tools=tool_schemas, probe=probe_message(probe)
        )

    def surely_fits(
        self,
        session: Session,
        *,
        system_prompt: SystemPrompt,
        tool_schemas: list[dict] | None,
        probe: str = DEFAULT_PROBE,
    ) -> bool:
        return self.budget.session_surely_fits(
            session, system_prompt=system_prompt, tools=tool_schemas, probe=probe_message(probe)
        )

    # -- choosing what to consolidate -------------------------------------------------------

    def pick_consolidation_boundary(self, session: Session, tokens_to_remove: int) -> int | None:
        """The index of a user message to cut before, removing at least `tokens_to_remove` tokens.

        Falls back to the furthest user boundary when none removes enough; None when there is none.
        """
        msgs, start = session.messages, session.last_consolidated
        removed, best = 0, None
        for i in range(start, len(msgs)):
            if i > start and msgs[i].get("role") == "user":
                best = i
                if removed >= tokens_to_remove:
                    return i
            removed += self.budget.stored_tokens(msgs[i])
        return best

    # -- public entry points ----------------------------------------------------------------

    def lock_for(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def maybe_consolidate_by_tokens(
        self,
        session: Session,
        *,
        system_prompt: SystemPrompt,
        tool_schemas: list[dict] | None,
        probe: str = DEFAULT_PROBE,
        emit: EventSink = ignore,
    ) -> ConsolidationReport:
        """Consolidate while the estimated prompt is over half the budget, if it reached the budget."""
        report = ConsolidationReport()
        if self.surely_fits(
            session, system_prompt=system_prompt, tool_schemas=tool_schemas, probe=probe
        ):
            return report
        async with self.lock_for(session.key):

            def measure() -> int:
                return self.estimate(
                    session, system_prompt=system_prompt, tool_schemas=tool_schemas, probe=probe
                )

            estimated = report.before = report.after = measure()
            if estimated < self.budget.consolidate_at:
                return report
            target = self.budget.consolidate_at // 2
            with self._outcome(session, report, emit):
                while (
                    report.rounds < self.max_rounds
                    and estimated > target
                    and not self._spent(report)
                ):
                    end = self.pick_consolidation_boundary(session, estimated - target)
                    if end is None:
                        break
                    report.rounds += 1
                    work = self._consolidate_range(
                        session, end, report, emit, announce=session.key not in self._postponed
                    )
                    if not await self._postponable(work, report, emit):
                        break
                    estimated = report.after = measure()
            if report.postponed:
                self._postponed.add(session.key)
            elif report.messages:  # it ran: a later outage is news again, and is said
                self._postponed.discard(session.key)
                self._announced.clear()
        return report

    async def archive_all(
        self, session: Session, *, emit: EventSink = ignore
    ) -> ConsolidationReport:
        """For /new: record every unconsolidated message; the caller then keeps the conversation as an
        archived one and starts the session afresh (SessionWriter.clear)."""
        report = ConsolidationReport(ends_conversation=True)
        async with self.lock_for(session.key):
            if len(session.messages) > session.last_consolidated:
                report.rounds = 1
                with self._outcome(session, report, emit):
                    await self._consolidate_range(
                        session, len(session.messages), report, emit, must_record=True
                    )
        return report

    async def compact(self, session: Session, *, emit: EventSink = ignore) -> ConsolidationReport:
        """For /compact: record everything before the last user message (the last exchange stays)."""
        report = ConsolidationReport()
        async with self.lock_for(session.key):
            msgs = session.messages
            end = next(
                (i for i in range(len(msgs) - 1, -1, -1) if msgs[i].get("role") == "user"), None
            )
            if end is not None and end > session.last_consolidated:
                report.rounds = 1
                with self._outcome(session, report, emit):
                    await self._postponable(
                        self._consolidate_range(session, end, report, emit), report, emit
                    )
            report.checkpoint = session.working_state
        return report

    @contextmanager
    def _outcome(
        self, session: Session, report: ConsolidationReport, emit: EventSink
    ) -> Iterator[None]:
        """The closing line of a compaction, and its outcome kept with the session (for status and doctor)."""
        log = self.store.working_state_log(session)
        try:
            yield
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                with suppress(NanobotError):
                    log.record_compaction(
                        ok=False,
                        archived=report.messages,
                        reason=str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    )
            raise
        report.checkpoint = session.working_state
        items = count_items(session.working_state)
        if report.raw_archived:
            reason = report.failures[-1] if report.failures else "the summary failed"
            log.record_compaction(ok=False, archived=report.messages, reason=reason, items=items)
        elif report.postponed:
            log.record_compaction(
                ok=False, archived=report.messages, reason=report.postponed, items=items
            )
        elif report.messages:
            log.record_compaction(ok=True, archived=report.messages, items=items)
        if report.messages:
            archived = f"{report.messages} message{'s' if report.messages != 1 else ''} archived"
            if report.ends_conversation:
                emit(Notice(f"compaction done: {archived}"))
                return
            kept = (
                f"kept {items_phrase(items)} of working state"
                if session.working_state
                else "no working state kept"
            )
            emit(Notice(f"compaction done: {kept}; {archived}"))

    # -- the work -----------------------------------------------------------------------------

    def _spent(self, report: ConsolidationReport) -> bool:
        """This consolidation paid for all the failing calls it may (compaction.py, rule 2)."""
        return report.failed_calls >= self.max_failures or bool(report.postponed)

    async def _postponable(
        self, work: Awaitable[None], report: ConsolidationReport, emit: EventSink
    ) -> bool:
        """Run `work`; False when it was postponed (said once per reason: it may recur every turn)."""
        try:
            await work
        except ConsolidationPostponed as exc:
            report.postponed = exc.message
            report.failures.append(exc.message)
            said = re.sub(
                r"[\d,.]+", "#", exc.message
            )  # the same reason with other figures is no news
            if said not in self._announced:
                self._announced.add(said)
                emit(
                    Notice(
                        f"memory consolidation postponed: {exc.message}. Nothing was archived; it is tried "
                        "again after the next turn",
                        level="warning",
                    )
                )
            return False
        return True

    def _recorded_end(self, session: Session, start: int) -> int | None:
        """Where an entry already in HISTORY.md (by a process killed before its pointer write) ends."""
        count = recorded_count(
            self.memory.history_tail(MARKER_SCAN_BYTES), session.key, session.messages[start]
        )
        return start + count if count and start + count <= len(session.messages) else None

    async def _consolidate_range(
        self,
        session: Session,
        end: int,
        report: ConsolidationReport,
        emit: EventSink,
        *,
        must_record: bool = False,
        announce: bool = True,
    ) -> None:
        """Record messages[last_consolidated:end], in as many requests as it takes to fit the window.

        `must_record` (for /new): what cannot be summarised now is archived RAW rather than left.
        `announce`: say when it starts (not when retrying a postponed one: its end may go unsaid)."""
        total = end - session.last_consolidated
        if not self.memory_writes:
            self.store.set_pointer(session, end)
            report.messages += total
            return
        if announce and report.rounds <= 1:  # one quiet line per consolidation, not one per round
            emit(Notice(f"compacting {total} message{'s' if total != 1 else ''} into memory…"))
        while session.last_consolidated < end:
            start = session.last_consolidated
            done = self._recorded_end(session, start)
            if done is not None:  # written before a kill; only the pointer was missing
                self.store.set_pointer(session, done)
                report.messages += done - start
                continue
            if self._spent(report):
                if not must_record:
                    return
                chunk = list(session.messages[start:end])
                why = report.postponed or "the summariser failed too often in this consolidation"
                self._archive_raw(
                    chunk, why, report, emit, chunk_marker(session.key, chunk[0], len(chunk))
                )
                self.store.set_pointer(session, end)
                report.messages += end - start
                return
            memory_text = (
                self.memory.state().usable
            )  # an empty or cut-off file is not "nothing remembered"
            piece, request = self._fitting_piece(
                session.messages,
                start,
                self._render_limit(session, end),
                memory_text,
                session.working_state,
            )
            chunk = list(session.messages[start:piece])
            marker = chunk_marker(session.key, chunk[0], len(chunk))
            try:
                self._check_fits(request, memory_text)
                first_line = await self._summarise_with_retries(
                    chunk, request, report, emit, memory_text, marker, session
                )
            except ConsolidationPostponed as exc:
                if not must_record:
                    raise
                report.postponed = exc.message  # the rest is archived without another call
                first_line = self._archive_raw(chunk, exc.message, report, emit, marker)
            if first_line:
                report.history_entries.append(first_line)
            # HISTORY.md (and MEMORY.md) are durable now; only then does the chunk leave the prompt
            self.store.set_pointer(session, piece)
            report.messages += piece - start

    def _render_limit(self, session: Session, end: int) -> int:
        """A user boundary <= end whose chunk is worth rendering: a few budgets of stored tokens.

        Transcripts cut long tool results, so a chunk of 4x the budget may still fit; a bigger one
        (a /new on a huge unconsolidated tail) would only cost time to render and then be split.
        """
        msgs, start = session.messages, session.last_consolidated
        limit, total, last = 4 * self.budget.budget, 0, None
        for i in range(start, end):
            if i > start and msgs[i].get("role") == "user":
                if total > limit:
                    return last or i
                last = i
            total += self.budget.stored_tokens(msgs[i])
        return end if total <= limit or last is None else last

    def _fitting_piece(
        self, msgs: Sequence[Message], start: int, end: int, memory_text: str, state: str = ""
    ) -> tuple[int, list[Message] | None]:
        """The furthest user boundary whose consolidation request fits, and that request.

        A single turn that does not fit even alone is rendered with ever shorter tool results
        and texts; None as the request means nothing makes it fit (MEMORY.md alone is too big).
        """
        bounds = [i for i in range(start + 1, end) if msgs[i].get("role") == "user"] + [end]
        request = self._request(msgs[start:end], memory_text, state)
        if self._fits(request):
            return end, request
        lo, hi, best = 0, len(bounds) - 2, None  # bounds[-1] == end did not fit
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = self._request(msgs[start : bounds[mid]], memory_text, state)
            if self._fits(candidate):
                best, lo = (bounds[mid], candidate), mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return best
        piece = bounds[0]
        for tool_chars, text_chars in _RENDER_LADDER[1:]:
            request = self._request(
                msgs[start:piece], memory_text, state, tool_chars=tool_chars, text_chars=text_chars
            )
            if self._fits(request):
                return piece, request
        return piece, self._cut_to_fit(msgs[start:piece], memory_text, state)

    def _cut_to_fit(
        self, chunk: Sequence[Message], memory_text: str, state: str = ""
    ) -> list[Message] | None:
        """The tightest transcript of `chunk`, cut in the middle to the room the request leaves it;
        None when even an excerpt of a few lines cannot fit (MEMORY.md and the instructions fill it)."""
        tool_chars, text_chars = _RENDER_LADDER[-1]
        full = render_transcript(chunk, tool_chars=tool_chars, text_chars=text_chars)
        fixed = self.budget.tokens(
            self._request(chunk, memory_text, state, transcript=""), [SAVE_MEMORY_TOOL]
        )
        room = self.budget.budget - fixed
        if room < _MIN_EXCERPT_TOKENS:
            return None
        chars_per_token = len(full) / max(1, self.budget.counter.count_text(full))
        keep = int(room / self.budget.calibration.ratio * chars_per_token * 0.9)
        for _ in range(
            6
        ):  # token density varies along the text: a few tries, each a little shorter
            request = self._request(
                chunk, memory_text, state, transcript=cut_transcript(full, keep)
            )
            if self._fits(request):
                return request
            keep = int(keep * 0.8)
        return None

    def _check_fits(self, request: list[Message] | None, memory_text: str) -> None:
        """Raise ConsolidationPostponed, saying what to do, when no summarising call can succeed."""
        if request is None:
            raise ConsolidationPostponed(
                f"no summarising request fits the {self.budget.budget:,}-token prompt budget, because the "
                "instructions and MEMORY.md fill it; shorten MEMORY.md (`nanobot memory edit`) or raise "
                "agents.defaults.contextWindowTokens. Until then the oldest turns are left out of each "
                "request (they stay in the session)"
            )
        memory = self.budget.calibration.adjust(self.budget.counter.count_text(memory_text))
        if memory > self.budget.reply_tokens:
            raise ConsolidationPostponed(
                f"MEMORY.md takes ~{memory:,} tokens, and the summariser must write it back whole in a reply "
                f"of at most {self.budget.reply_tokens:,} tokens; shorten MEMORY.md (`nanobot memory edit`) or "
                "raise agents.defaults.maxTokens (a reply gets at most a quarter of contextWindowTokens). Until "
                "then the oldest turns are left out of each request (they stay in the session)"
            )

    def _request(
        self,
        chunk: Sequence[Message],
        memory_text: str,
        state: str = "",
        *,
        transcript: str | None = None,
        **limits: Any,
    ) -> list[Message]:
        stamp = _chunk_time(chunk, self.clock).strftime("[%Y-%m-%d %H:%M]")
        text = render_transcript(chunk, **limits) if transcript is None else transcript
        body = (
            f"## Previous session checkpoint\n\n{state.strip() or '(none yet)'}\n\n"
            f"## Current MEMORY.md\n\n{memory_text.strip() or '(empty)'}\n\n"
            f"## Conversation excerpt ({len(chunk)} messages)\n\n{text}"
        )
        return [
            {"role": "system", "content": _INSTRUCTIONS.format(stamp=stamp, shape=SHAPE)},
            {"role": "user", "content": body},
        ]

    def _fits(self, request: list[Message]) -> bool:
        return self.budget.fits(request, [SAVE_MEMORY_TOOL])

    async def _summarise_with_retries(
        self,
        chunk: list[Message],
        request: list[Message] | None,
        report: ConsolidationReport,
        emit: EventSink,
        base: str,
        marker: str,
        session: Session,
    ) -> str:
        """Summarise the chunk, or archive it raw after repeated failures; returns the entry's first line.

        Raises ConsolidationPostponed when the provider is unavailable: an outage is not a failure."""
        assert request is not None  # _check_fits
        reason = "the summariser failed too often in this consolidation"
        while report.failed_calls < self.max_failures:
            try:
                return self._record(chunk, await self._ask(request), report, base, marker, session)
            except ConsolidationFailure as exc:
                reason = str(exc)
                report.failures.append(reason)
                report.failed_calls += 1
        return self._archive_raw(chunk, f"summary failed: {reason}", report, emit, marker)

    def _archive_raw(
        self,
        chunk: list[Message],
        reason: str,
        report: ConsolidationReport,
        emit: EventSink,
        marker: str,
    ) -> str:
        report.raw_archived = True
        first = self.memory.append_raw_archive(chunk, reason, marker=marker)
        emit(
            Notice(
                f"memory consolidation failed ({reason}); {len(chunk)} message(s) were archived "
                f"unsummarised in HISTORY.md: {_short(first)}",
                level="warning",
            )
        )
        return first

    async def _ask(self, request: list[Message]) -> tuple[dict[str, Any], bool]:
        """One summarising call; returns (save_memory arguments, reply cut off by the length limit)."""
        capabilities = self.provider.capabilities
        choice: Any = {"name": "save_memory"} if capabilities.forced_tool_choice else "auto"
        try:
            response = await self._chat(request, choice)
        except ProviderError as exc:
            if choice == "auto" or not exc.tool_choice_refused:
                raise _provider_failure(exc) from exc
            capabilities.forced_tool_choice = (
                False  # this provider cannot force a tool; ask nicely from now on
            )
            try:
                response = await self._chat(request, "auto")
            except ProviderError as again:
                raise _provider_failure(again) from again
        call = next((c for c in response.tool_calls if c.name == "save_memory"), None)
        if call is None:
            raise ConsolidationFailure("the model did not call save_memory")
        args = parse_save_memory(call.raw_arguments if call.parse_error else call.arguments)
        return args, response.finish_reason == "length"

    async def _chat(self, request: list[Message], choice: Any) -> LLMResponse:
        # its own deadline: a hung call must not hold the session for the client's 600 s x retries
        try:
            response = await asyncio.wait_for(
                self.provider.chat(
                    request,
                    tools=[SAVE_MEMORY_TOOL],
                    tool_choice=choice,
                    max_tokens=self.budget.reply_tokens,
                    temperature=0.0,
                ),
                timeout=self.timeout,
            )
        except TimeoutError:
            raise ConsolidationPostponed(
                f"the consolidation request took longer than {self.timeout:g} s "
                "(agents.defaults.consolidationTimeoutSeconds)"
            ) from None
        # its counts teach the budget too (the request was counted when it was fitted: cached)
        self.budget.observe(
            self.budget.raw_tokens(request, [SAVE_MEMORY_TOOL]),
            response.usage.prompt_tokens,
            fallback=response.fallback,
        )
        return response

    def _record(
        self,
        chunk: list[Message],
        answer: tuple[dict[str, Any], bool],
        report: ConsolidationReport,
        base: str,
        marker: str,
        session: Session,
    ) -> str:
        """Both or neither: the store writes the entry and the update only if both pass its checks.

        The session's new working state is written first: a process killed after the HISTORY.md
        entry is found by its marker and never asks again, so the checkpoint must already be kept
        (a kill before the entry asks again, and the model merges the version it then receives)."""
        args, truncated = answer
        entry = args["history_entry"]
        self._keep_checkpoint(session, args.get("session_checkpoint", ""), len(chunk), report)
        try:
            first, outcome = self.memory.record_consolidation(
                f"{entry.rstrip()}\n{marker}" if entry.strip() else entry,
                args["memory_update"],
                truncated=truncated,
                base=base,
                when=_chunk_time(chunk, self.clock),
            )
        except MemoryUpdateRefused as exc:
            raise ConsolidationFailure(exc.message) from None
        report.notices.extend(outcome.notices)
        if outcome.status == "held_back":
            report.notices.append(outcome.message)
        return first

    def _keep_checkpoint(
        self, session: Session, text: str, archived: int, report: ConsolidationReport
    ) -> None:
        """A new version of the session's working state, durable before the pointer moves; a reply
        without one keeps the previous version (an older model), and says so."""
        text = mask_secrets(text.strip())
        if not text:
            kept = (
                "the previous working state is kept"
                if session.working_state
                else "no working state is kept yet"
            )
            if not report.ends_conversation and "session_checkpoint" not in " ".join(
                report.notices
            ):
                report.notices.append(
                    f"the model returned no session_checkpoint with its summary; {kept}"
                )
            return
        limit = max(
            256, self.budget.budget // 8
        )  # it rides on every request: a small share of the budget
        tokens = self.budget.counter.count_text(text)
        if tokens > limit:
            whole, keep = text, len(text)
            while tokens > limit and keep > 0:
                keep = int(keep * limit / tokens * 0.95)
                text = cut_middle(
                    whole, keep, lambda n: f"\n[... {n:,} characters of the checkpoint cut ...]\n"
                )
                tokens = self.budget.counter.count_text(text)
            report.notices.append(
                f"the model's session_checkpoint was longer than {limit:,} tokens; its middle "
                "was cut"
            )
        version = self.store.working_state_log(session).add_version(text, archived=archived)
        session.working_state = text
        report.checkpoint, report.checkpoint_version = text, version.number


def _provider_failure(exc: ProviderError) -> NanobotError:
    """An outage postpones the consolidation; a request the provider rejects counts as a failure."""
    if isinstance(exc, SpendLimitReached):  # nanobot's own limit, not the provider: named as such
        return ConsolidationPostponed(exc.message)
    if is_outage(exc):
        return ConsolidationPostponed(f"the provider is unavailable ({short_reason(exc)})")
    return ConsolidationFailure(f"provider error: {short_reason(exc)}")


def _as_markdown(value: Any, depth: int = 0) -> str:
    """A memory update sent as an object or a list of facts, as MEMORY.md markdown."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            body = _as_markdown(item, depth + 1).strip("\n")
            parts.append(
                f"{'#' * min(depth + 2, 6)} {key}\n\n{body}"
                if body
                else f"{'#' * min(depth + 2, 6)} {key}"
            )
        return "\n\n".join(parts) + "\n"
    if isinstance(value, (list, tuple)):
        lines = []
        for item in value:
            text = _as_markdown(item, depth + 1).strip()
            if not text:
                continue
            lines.append(
                text
                if isinstance(item, (dict, list)) or text.startswith(("- ", "* ", "#"))
                else f"- {text}"
            )
        return "\n".join(lines) + "\n"
    if value is None:
        return ""
    return str(value)


def _as_entry(value: Any) -> str:
    """A history entry sent as an object ({date, summary}) or a list of sentences, as one paragraph."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        stamp = next(
            (str(value[k]) for k in ("date", "timestamp", "time", "when") if value.get(k)), ""
        )
        body = " ".join(
            _as_entry(v) for k, v in value.items() if k not in ("date", "timestamp", "time", "when")
        )
        if stamp and not stamp.startswith("["):
            stamp = f"[{stamp}]"
        return f"{stamp} {body}".strip()
    if isinstance(value, (list, tuple)):
        return " ".join(_as_entry(v) for v in value).strip()
    return "" if value is None else str(value)


def _decode_json_text(value: Any) -> Any:
    """A JSON string that holds an object or a list (models double-encode); other text stays text."""
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def parse_save_memory(raw: Any) -> dict[str, str]:
    """save_memory arguments as two texts, from the shapes models really send; raises ConsolidationFailure.

    The arguments may be an object, a JSON string (even double-encoded) or a one-element list;
    `memory_update` may be markdown text, an object of sections or a list of facts (also as a
    JSON string); `history_entry` may be text, an object ({date, summary}) or a list.
    """
    value = raw
    for _ in range(3):  # a JSON string may itself hold a JSON string (double-encoded)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ConsolidationFailure("save_memory arguments are not valid JSON") from None
        elif isinstance(value, list) and len(value) == 1:
            value = value[0]
        else:
            break
    if not isinstance(value, dict):
        raise ConsolidationFailure(
            f"save_memory arguments must be an object, got {type(value).__name__}"
        )
    if "history_entry" not in value and isinstance(value.get("arguments"), (dict, str)):
        return parse_save_memory(value["arguments"])  # {"name": "save_memory", "arguments": {...}}
    out = {}
    for name, convert in (("history_entry", _as_entry), ("memory_update", _as_markdown)):
        item = value.get(name)
        if item is None or isinstance(item, bool) or isinstance(item, (int, float)):
            raise ConsolidationFailure(f"save_memory argument {name} is missing or not text")
        out[name] = convert(_decode_json_text(item))
    checkpoint = value.get("session_checkpoint")  # optional: an older model leaves it out
    if checkpoint is not None and not isinstance(checkpoint, bool):
        out["session_checkpoint"] = _as_markdown(_decode_json_text(checkpoint))
    return out


# -- transcript ------------------------------------------------------------------------------


def _chunk_time(chunk: Sequence[Message], clock: Callable[[], datetime]) -> datetime:
    for msg in chunk:
        when = parse_timestamp(msg.get("timestamp"))
        if when is not None:
            return when
    return clock()


def render_transcript(
    chunk: Sequence[Message], *, tool_chars: int = 2000, text_chars: int | None = None
) -> str:
    """`[YYYY-MM-DD HH:MM] ROLE: text` lines; tool calls summarised, long tool results cut."""
    lines = []
    for msg in chunk:
        when = parse_timestamp(msg.get("timestamp"))
        stamp = f"[{when:%Y-%m-%d %H:%M}] " if when else ""
        lines += [
            stamp + line
            for line in transcript_lines(
                msg, text_chars=text_chars, tool_chars=tool_chars, arg_chars=_ARG_CHARS
            )
        ]
    return "\n".join(lines)
