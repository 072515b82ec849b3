"""Token-budget consolidation: summarise old messages into MEMORY.md and HISTORY.md.

The session file is never shortened; consolidation moves `last_consolidated` forward once the
chunk it passes over is durably recorded (a summary in HISTORY.md and the facts in MEMORY.md,
or, after repeated failures, a RAW archive). A crash before the pointer write means the chunk
is summarised again next time: a duplicate HISTORY.md entry, never a lost one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nanobot.agent.budget import ContextBudget
from nanobot.agent.events import EventSink, Notice, ignore
from nanobot.config import AgentDefaults
from nanobot.errors import ConsolidationFailure, ProviderError
from nanobot.memory.store import MemoryStore, MemoryUpdateRefused
from nanobot.messages import Message, parse_timestamp, transcript_lines
from nanobot.providers.base import LLMResponse, Provider
from nanobot.session.runtime_context import user_with_context
from nanobot.session.save_policy import as_sent
from nanobot.session.store import Session, SessionStore

__all__ = [
    "Consolidator", "ConsolidationReport", "SAVE_MEMORY_TOOL", "DEFAULT_PROBE",
    "probe_message", "render_transcript", "parse_save_memory", "ConsolidationFailure",
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
  learned, return the current MEMORY.md unchanged. Never return an empty text."""

# A typical runtime-context block, so the probe costs what the real current message costs.
_SAMPLE_CONTEXT = ("Current time: 2026-01-01 00:00 (Wednesday) America/Argentina/Buenos_Aires (UTC-03:00)\n"
                   "Channel: telegram\nChat ID: 1234567890123456789")
# Stands in for the next user message when it is not known yet (the background check).
DEFAULT_PROBE = ("Can you look at the file we talked about earlier, check what changed since then, "
                 "and tell me what you think we should do next? Keep it short please, a few lines.")

# Transcript limits, from generous to tight; the tighter ones are tried when a single turn is too big.
_RENDER_LADDER: tuple[tuple[int, int | None], ...] = (
    (2000, None), (800, None), (300, None), (300, 6000), (150, 2000), (80, 600), (40, 200),
)
_ARG_CHARS = 200

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
    before: int = 0  # estimated prompt tokens
    after: int = 0

    @property
    def ran(self) -> bool:
        return self.messages > 0

    def receipt(self) -> str:
        if not self.messages:
            return "nothing to consolidate"
        where = "; ".join(_short(e) for e in self.history_entries) or "HISTORY.md"
        raw = " (some archived RAW)" if self.raw_archived else ""
        return f"archived {self.messages} message(s) in HISTORY.md{raw}: {where}"


def _short(line: str, limit: int = 80) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


DEFAULT_TIMEOUT = AgentDefaults.consolidation_timeout_seconds  # seconds for one request, retries included


class Consolidator:
    """Picks where to cut and summarises; whether a prompt fits is the ContextBudget's question."""

    def __init__(self, provider: Provider, memory: MemoryStore, store: SessionStore, budget: ContextBudget, *,
                 timeout: float = DEFAULT_TIMEOUT, max_rounds: int = 5, max_failures: int = 3,
                 clock: Callable[[], datetime] = datetime.now, memory_writes: bool = True) -> None:
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

    def estimate(self, session: Session, *, system_prompt: SystemPrompt, tool_schemas: list[dict] | None,
                 probe: str = DEFAULT_PROBE) -> int:
        """The next request's size as the budget sees it: system + history + tools + the coming message."""
        return self.budget.estimate(session, system_prompt=system_prompt, tools=tool_schemas,
                                    probe=probe_message(probe))

    def surely_fits(self, session: Session, *, system_prompt: SystemPrompt, tool_schemas: list[dict] | None,
                    probe: str = DEFAULT_PROBE) -> bool:
        return self.budget.session_surely_fits(session, system_prompt=system_prompt, tools=tool_schemas,
                                               probe=probe_message(probe))

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

    async def maybe_consolidate_by_tokens(self, session: Session, *, system_prompt: SystemPrompt,
                                          tool_schemas: list[dict] | None, probe: str = DEFAULT_PROBE,
                                          emit: EventSink = ignore) -> ConsolidationReport:
        """Consolidate while the estimated prompt is over half the budget, if it reached the budget."""
        report = ConsolidationReport()
        if self.surely_fits(session, system_prompt=system_prompt, tool_schemas=tool_schemas, probe=probe):
            return report
        async with self.lock_for(session.key):
            def measure() -> int:
                return self.estimate(session, system_prompt=system_prompt, tool_schemas=tool_schemas, probe=probe)

            estimated = report.before = report.after = measure()
            if estimated < self.budget.budget:
                return report
            target = self.budget.budget // 2
            while report.rounds < self.max_rounds and estimated > target:
                end = self.pick_consolidation_boundary(session, estimated - target)
                if end is None:
                    break
                report.rounds += 1
                await self._consolidate_range(session, end, report, emit)
                estimated = report.after = measure()
        return report

    async def archive_all(self, session: Session, *, emit: EventSink = ignore) -> ConsolidationReport:
        """For /new: record every unconsolidated message; the caller clears the session afterwards."""
        report = ConsolidationReport()
        async with self.lock_for(session.key):
            if len(session.messages) > session.last_consolidated:
                report.rounds = 1
                await self._consolidate_range(session, len(session.messages), report, emit)
        return report

    async def compact(self, session: Session, *, emit: EventSink = ignore) -> ConsolidationReport:
        """For /compact: record everything before the last user message (the last exchange stays)."""
        report = ConsolidationReport()
        async with self.lock_for(session.key):
            msgs = session.messages
            end = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].get("role") == "user"), None)
            if end is not None and end > session.last_consolidated:
                report.rounds = 1
                await self._consolidate_range(session, end, report, emit)
        return report

    # -- the work -----------------------------------------------------------------------------

    async def _consolidate_range(self, session: Session, end: int, report: ConsolidationReport,
                                 emit: EventSink) -> None:
        """Record messages[last_consolidated:end], in as many requests as it takes to fit the window."""
        total = end - session.last_consolidated
        if not self.memory_writes:
            self.store.set_pointer(session, end)
            report.messages += total
            return
        if report.rounds <= 1:  # one quiet line per consolidation, not one per round
            emit(Notice(f"compacting {total} message{'s' if total != 1 else ''} into memory…"))
        while session.last_consolidated < end:
            start = session.last_consolidated
            memory_text = self.memory.state().usable  # an empty or cut-off file is not "nothing remembered"
            piece, request = self._fitting_piece(session.messages, start, self._render_limit(session, end),
                                                 memory_text)
            chunk = list(session.messages[start:piece])
            first_line = await self._summarise_with_retries(chunk, request, report, emit, memory_text)
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

    def _fitting_piece(self, msgs: Sequence[Message], start: int, end: int,
                       memory_text: str) -> tuple[int, list[Message] | None]:
        """The furthest user boundary whose consolidation request fits, and that request.

        A single turn that does not fit even alone is rendered with ever shorter tool results
        and texts; None as the request means nothing makes it fit (MEMORY.md alone is too big).
        """
        bounds = [i for i in range(start + 1, end) if msgs[i].get("role") == "user"] + [end]
        request = self._request(msgs[start:end], memory_text)
        if self._fits(request):
            return end, request
        lo, hi, best = 0, len(bounds) - 2, None  # bounds[-1] == end did not fit
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = self._request(msgs[start:bounds[mid]], memory_text)
            if self._fits(candidate):
                best, lo = (bounds[mid], candidate), mid + 1
            else:
                hi = mid - 1
        if best is not None:
            return best
        piece = bounds[0]
        for tool_chars, text_chars in _RENDER_LADDER[1:]:
            request = self._request(msgs[start:piece], memory_text, tool_chars=tool_chars, text_chars=text_chars)
            if self._fits(request):
                return piece, request
        return piece, None

    def _request(self, chunk: Sequence[Message], memory_text: str, **limits: Any) -> list[Message]:
        stamp = _chunk_time(chunk, self.clock).strftime("[%Y-%m-%d %H:%M]")
        body = (f"## Current MEMORY.md\n\n{memory_text.strip() or '(empty)'}\n\n"
                f"## Conversation excerpt ({len(chunk)} messages)\n\n{render_transcript(chunk, **limits)}")
        return [{"role": "system", "content": _INSTRUCTIONS.format(stamp=stamp)},
                {"role": "user", "content": body}]

    def _fits(self, request: list[Message]) -> bool:
        return self.budget.fits(request, [SAVE_MEMORY_TOOL])

    async def _summarise_with_retries(self, chunk: list[Message], request: list[Message] | None,
                                      report: ConsolidationReport, emit: EventSink, base: str) -> str:
        """Summarise the chunk, or archive it raw after repeated failures; returns the entry's first line."""
        reason = "the consolidation request cannot fit the context window"
        for _ in range(self.max_failures if request is not None else 0):
            assert request is not None
            try:
                return self._record(chunk, await self._ask(request), report, base)
            except ConsolidationFailure as exc:
                reason = str(exc)
                report.failures.append(reason)
        report.raw_archived = True
        first = self.memory.append_raw_archive(chunk, f"summary failed: {reason}")
        emit(Notice(f"memory consolidation failed ({reason}); {len(chunk)} message(s) were archived "
                    f"unsummarised in HISTORY.md: {_short(first)}", level="warning"))
        return first

    async def _ask(self, request: list[Message]) -> tuple[dict[str, Any], bool]:
        """One summarising call; returns (save_memory arguments, reply cut off by the length limit)."""
        capabilities = self.provider.capabilities
        choice: Any = {"name": "save_memory"} if capabilities.forced_tool_choice else "auto"
        try:
            response = await self._chat(request, choice)
        except ProviderError as exc:
            if choice == "auto" or not exc.tool_choice_refused:
                raise ConsolidationFailure(f"provider error: {str(exc).splitlines()[0]}") from exc
            capabilities.forced_tool_choice = False  # this provider cannot force a tool; ask nicely from now on
            try:
                response = await self._chat(request, "auto")
            except ProviderError as again:
                raise ConsolidationFailure(f"provider error: {str(again).splitlines()[0]}") from again
        call = next((c for c in response.tool_calls if c.name == "save_memory"), None)
        if call is None:
            raise ConsolidationFailure("the model did not call save_memory")
        args = parse_save_memory(call.raw_arguments if call.parse_error else call.arguments)
        return args, response.finish_reason == "length"

    async def _chat(self, request: list[Message], choice: Any) -> LLMResponse:
        # its own deadline: a hung call must not hold the session for the client's 600 s x retries
        try:
            response = await asyncio.wait_for(
                self.provider.chat(request, tools=[SAVE_MEMORY_TOOL], tool_choice=choice,
                                   max_tokens=self.budget.reply_tokens, temperature=0.0),
                timeout=self.timeout)
        except TimeoutError:
            raise ConsolidationFailure(f"the consolidation request took longer than {self.timeout:g} s "
                                       "(agents.defaults.consolidationTimeoutSeconds)") from None
        # its counts teach the budget too (the request was counted when it was fitted: cached)
        self.budget.observe(self.budget.raw_tokens(request, [SAVE_MEMORY_TOOL]), response.usage.prompt_tokens)
        return response

    def _record(self, chunk: list[Message], answer: tuple[dict[str, Any], bool],
                report: ConsolidationReport, base: str) -> str:
        """Both or neither: the store writes the entry and the update only if both pass its checks."""
        args, truncated = answer
        try:
            first, outcome = self.memory.record_consolidation(
                args["history_entry"], args["memory_update"], truncated=truncated, base=base,
                when=_chunk_time(chunk, self.clock))
        except MemoryUpdateRefused as exc:
            raise ConsolidationFailure(exc.message) from None
        report.notices.extend(outcome.notices)
        if outcome.status == "held_back":
            report.notices.append(outcome.message)
        return first


def _as_markdown(value: Any, depth: int = 0) -> str:
    """A memory update sent as an object or a list of facts, as MEMORY.md markdown."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        parts = []
        for key, item in value.items():
            body = _as_markdown(item, depth + 1).strip("\n")
            parts.append(f"{'#' * min(depth + 2, 6)} {key}\n\n{body}" if body else f"{'#' * min(depth + 2, 6)} {key}")
        return "\n\n".join(parts) + "\n"
    if isinstance(value, (list, tuple)):
        lines = []
        for item in value:
            text = _as_markdown(item, depth + 1).strip()
            if not text:
                continue
            lines.append(text if isinstance(item, (dict, list)) or text.startswith(("- ", "* ", "#")) else f"- {text}")
        return "\n".join(lines) + "\n"
    if value is None:
        return ""
    return str(value)


def _as_entry(value: Any) -> str:
    """A history entry sent as an object ({date, summary}) or a list of sentences, as one paragraph."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        stamp = next((str(value[k]) for k in ("date", "timestamp", "time", "when") if value.get(k)), "")
        body = " ".join(_as_entry(v) for k, v in value.items() if k not in ("date", "timestamp", "time", "when"))
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
        raise ConsolidationFailure(f"save_memory arguments must be an object, got {type(value).__name__}")
    if "history_entry" not in value and isinstance(value.get("arguments"), (dict, str)):
        return parse_save_memory(value["arguments"])  # {"name": "save_memory", "arguments": {...}}
    out = {}
    for name, convert in (("history_entry", _as_entry), ("memory_update", _as_markdown)):
        item = value.get(name)
        if item is None or isinstance(item, bool) or isinstance(item, (int, float)):
            raise ConsolidationFailure(f"save_memory argument {name} is missing or not text")
        out[name] = convert(_decode_json_text(item))
    return out


# -- transcript ------------------------------------------------------------------------------


def _chunk_time(chunk: Sequence[Message], clock: Callable[[], datetime]) -> datetime:
    for msg in chunk:
        when = parse_timestamp(msg.get("timestamp"))
        if when is not None:
            return when
    return clock()


def render_transcript(chunk: Sequence[Message], *, tool_chars: int = 2000, text_chars: int | None = None) -> str:
    """`[YYYY-MM-DD HH:MM] ROLE: text` lines; tool calls summarised, long tool results cut."""
    lines = []
    for msg in chunk:
        when = parse_timestamp(msg.get("timestamp"))
        stamp = f"[{when:%Y-%m-%d %H:%M}] " if when else ""
        lines += [stamp + line for line in transcript_lines(msg, text_chars=text_chars, tool_chars=tool_chars,
                                                            arg_chars=_ARG_CHARS)]
    return "\n".join(lines)
