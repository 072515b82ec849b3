"""One session's turns: build the request, run the loop, save every step durably.

This is where the pure agent loop meets the session store. Printing stays in the CLI,
which receives events; this module only orchestrates. A turn is the user's (`send`) or one
nobody typed (`inject`: a helper's report, brought by nanobot.agent.reports); both share one
lock, so a report waits behind a running user turn and reports are handled one by one.
Consolidation hangs off the turns through `upkeep` (nanobot.agent.upkeep): room made before a
turn that would not fit, a background check after each.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from nanobot.agent.budget import BudgetSnapshot
from nanobot.agent.consolidation import DEFAULT_PROBE, ConsolidationReport, probe_message
from nanobot.agent.context import ContextBuilder
from nanobot.agent.events import Event, EventSink, Notice, StopReason, TurnDone, TurnOutcome, ignore
from nanobot.agent.loop import LoopHooks, LoopSpec, run_loop
from nanobot.agent.paste import keep_large_paste
from nanobot.agent.upkeep import MemoryUpkeep
from nanobot.errors import UsageError
from nanobot.messages import NOTE_KEY, Message, text_of
from nanobot.policy.egress import EgressPolicy
from nanobot.providers.base import Usage
from nanobot.secrets_mask import REDACTED, find_secrets, mask_secrets, mask_value
from nanobot.session.protocols import SessionWriter
from nanobot.session.save_policy import TurnCheckpoint, save_turn
from nanobot.session.store import Session
from nanobot.session.working_state import with_block
from nanobot.usage.limits import TurnScope, current_turn

# make_room's stand-in for the coming message once it is already saved (and counted in the history)
SAVED_PROBE = ""


@dataclass(frozen=True)
class TurnSettings:
    channel: str = "cli"  # named in the runtime context of each user message
    chat_id: str = "direct"


class _Checkpoint(LoopHooks):
    """A turn's hooks: every new message is saved as it appears, every event goes to `emit`."""

    def __init__(
        self, checkpoint: TurnCheckpoint, transcript: list[Message], emit: EventSink
    ) -> None:
        self.checkpoint = checkpoint
        self.transcript = transcript
        self.emit = emit

    def on_message(self, messages: list[Message]) -> None:
        self.transcript.extend(messages)
        self.checkpoint.save(self.transcript)

    def on_event(self, event: Event) -> None:
        self.emit(event)


class Conversation:
    """The turns of one session."""

    def __init__(
        self,
        *,
        session: Session,
        store: SessionWriter,
        context: ContextBuilder,
        loop: LoopSpec,
        upkeep: MemoryUpkeep,
        settings: TurnSettings = TurnSettings(),
        egress: EgressPolicy | None = None,
    ) -> None:
        self.session = session
        self.store = store
        self.context = context
        self.loop = loop
        self.provider = loop.provider
        self.tools = loop.tools
        self.budget = loop.budget
        self.upkeep = upkeep
        self.settings = settings
        self.egress = (
            egress  # the domains the user names count as approved for web_fetch (policy/egress.py)
        )
        self.last_usage = Usage()
        self._turn_lock = asyncio.Lock()

    def build_request(self) -> list[Message]:
        """System prompt + the session's history, which ends with the saved current user message."""
        return self.context.build_messages(
            self.session.get_history(), working_state=self.session.working_state
        )

    async def send(
        self, text: str, *, emit: EventSink = ignore, by_user: bool = True
    ) -> TurnOutcome:
        """Run one user turn. The user's message is saved first: nothing after it can lose it.
        `by_user=False`: a scheduled job's prompt, whose domains are not the user's word (policy/egress.py)."""
        if not text.strip():
            raise UsageError(
                "the message is empty", hint='Type something, e.g. nanobot agent -m "hello".'
            )
        text = self._mask_user_text(text, emit)
        if self.egress is not None and by_user:
            self.egress.note_user_text(text)
        current_turn.set(
            TurnScope()
        )  # the helper limits count per user turn (nanobot/usage/limits.py)
        async with self._turn_lock:
            text = keep_large_paste(text, self.budget, self.context.workspace, emit)
            s = self.settings
            # saved before room is made: a crash during that consolidation must not lose what was typed
            save_turn(
                self.store,
                self.session,
                [self.context.user_message(text, channel=s.channel, chat_id=s.chat_id)],
            )
            await self.upkeep.make_room(SAVED_PROBE, emit)
            request = self.build_request()
            return await self._run_turn(request, new_from=len(request), emit=emit)

    @staticmethod
    def _mask_user_text(text: str, emit: EventSink) -> str:
        """The user's own message passes the masker before it is saved or sent; say so once."""
        masked, found = find_secrets(text)
        if found:
            emit(
                Notice(
                    f"your message held {' and '.join(found)}; it was replaced by {REDACTED} before it was "
                    "saved or sent. Keys belong in the config (providers.<name>.apiKey in "
                    "~/.nanobot/config.json) or an environment variable, not in the chat.",
                    "warning",
                )
            )
        return masked

    async def _run_turn(
        self, request: list[Message], *, new_from: int, emit: EventSink
    ) -> TurnOutcome:
        """Run the loop on `request`, saving every message from index `new_from` on as it appears."""
        checkpoint = TurnCheckpoint(self.store, self.session, skip=new_from)
        transcript = list(request)
        checkpoint.save(transcript)
        hooks = _Checkpoint(checkpoint, transcript, emit)
        result = await run_loop(self.loop, request, hooks)
        outcome = result.outcome
        if outcome.stop_reason is StopReason.MAX_ITERATIONS and outcome.content:
            # the limit notice is a real answer the user sees; keep it so the next turn has the context
            hooks.on_message([{"role": "assistant", "content": outcome.content}])
        if result.requests:
            self.last_usage = outcome.usage
        outcome = replace(
            outcome,
            error=mask_secrets(outcome.error) if outcome.error else None,
            tool_calls=mask_value(outcome.tool_calls),
        )
        self.upkeep.after_turn()
        emit(TurnDone(outcome))
        return outcome

    # -- the next request's size --------------------------------------------------------------------

    def _schemas(self) -> list[dict]:
        return self.tools.schemas()

    def estimate(self, probe: str = DEFAULT_PROBE) -> int:
        """The next request's estimated size, as the budget sees it (for /status too)."""
        return self.budget.estimate(
            self.session,
            system_prompt=self.context.system_prompt,
            tools=self._schemas(),
            probe=probe_message(probe),
        )

    def snapshot(self) -> BudgetSnapshot:
        """The budget's figures for this session's next request (what /status shows)."""
        return self.budget.snapshot(
            self.session,
            system_prompt=self.context.system_prompt,
            tools=self._schemas(),
            probe=probe_message(),
        )

    async def compact(self, *, emit: EventSink = ignore) -> ConsolidationReport:
        """/compact: consolidate everything but the last exchange now."""
        async with self._turn_lock:
            return await self.upkeep.compact(emit=emit)

    # -- turns nobody typed -----------------------------------------------------------------------

    async def inject(self, message: Message, note: Message, *, emit: EventSink) -> TurnOutcome:
        """A turn nobody typed (a helper's report): the request ends with `message` as a labelled user
        message (see nanobot/agent/subagents.py for why); the session keeps only `note` in its place."""
        async with self._turn_lock:
            await self.upkeep.make_room(text_of(message["content"]), emit)
            history = self.session.get_history()
            save_turn(self.store, self.session, [note])
            system: Message = {"role": "system", "content": self.context.system_prompt()}
            # `message` is context for this turn only
            request = [system, *with_block([*history, message], self.session.working_state)]
            return await self._run_turn(request, new_from=len(request), emit=emit)

    async def save_notes(self, notes: list[Message]) -> None:
        """Save nanobot's notes about helpers, between turns. One note per helper: a helper this
        session already has a note of (its report turn saved it) is skipped."""
        async with self._turn_lock:
            noted = {
                m[NOTE_KEY].get("id")
                for m in self.session.messages
                if isinstance(m.get(NOTE_KEY), dict)
            }
            fresh = [note for note in notes if note.get(NOTE_KEY, {}).get("id") not in noted]
            if fresh:
                save_turn(self.store, self.session, fresh)

    async def new_session(self, *, emit: EventSink = ignore) -> ConsolidationReport:
        """/new: record every unconsolidated message in HISTORY.md first, then keep the conversation
        whole as an archived one and start afresh (a crash at any point loses nothing)."""
        async with self._turn_lock:
            report = await self.upkeep.archive_all(emit=emit)
            # its state is archived with it, kept in the log (which moves with the conversation)
            self.store.working_state_log(self.session).close_for_new()
            self.session.working_state = ""
            report.kept_as = self.store.clear(self.session) or ""
            return report
