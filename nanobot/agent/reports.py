"""Report turns: each helper that ends by itself has its report handled as a turn of the
conversation, queued behind any running turn, one at a time.

This is the small object between the two sides, so neither has to know the other: the
SubagentManager tells it how helpers start and end (it is the manager's `ReportSink`), and it
asks the conversation (a `ReportTurnRunner`) to run the turn. Both are built in one pass in
nanobot/app.py, conversation first. Why a report is a fenced user message: see subagents.py.

A report turn that a daily token limit forbids is not run: the report is saved in the session
(`SubagentResult.held_note`), so the model reads it with the next message once the limit allows,
and the user is told once, with how many reports were held, not once per queued turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from nanobot.agent.events import EventSink, Notice
from nanobot.agent.subagents import HelperRecord, SubagentResult
from nanobot.errors import SpendLimitReached
from nanobot.messages import Message
from nanobot.usage.limits import TurnScope, current_turn


class ReportTurnRunner(Protocol):
    """What report turns need of a conversation (nanobot.agent.conversation.Conversation is one)."""

    async def inject(self, message: Message, note: Message, *, emit: EventSink) -> object:
        """Run a turn whose request ends with `message`; the session keeps `note` in its place."""

    async def save_notes(self, notes: list[Message]) -> None:
        """Save helpers' notes between turns; a helper already noted in the session is skipped."""


class ReportTurns:
    """Ended helpers' reports, each run as a turn; where their notices and turns render is `emit`."""

    def __init__(
        self,
        turns: ReportTurnRunner,
        emit: EventSink,
        *,
        spend: Callable[[], SpendLimitReached | None] = lambda: None,
        session: str = "",
    ) -> None:
        self.turns = turns
        self.emit = emit
        self.spend = spend  # the daily limit that forbids a call now, if one does (usage/meter.py)
        self.session = session  # where held reports are kept, for the user's notice
        self._queued: dict[asyncio.Task, SubagentResult] = {}  # report turns queued or running
        self._one_at_a_time = asyncio.Lock()  # each asks the limit once the one before has ended
        self._held: list[SubagentResult] = []  # reports held since the last notice, not yet told
        self._told = False  # the user was told of held reports since a report turn last ran
        self._running: set[str] = set()  # helpers started and not yet ended
        self._refusal: SpendLimitReached | None = None  # the limit that held the last report

    def started(self, record: HelperRecord) -> None:
        self._running.add(record.id)
        self.emit(Notice(f"subagent '{record.label}' ({record.id}) started"))

    def ended(self, result: SubagentResult) -> None:
        self._running.discard(result.id)
        level = "info" if result.status == "completed" else "warning"
        self.emit(Notice(result.record.summary(), level))
        task = asyncio.get_running_loop().create_task(self._report_turn(result))
        self._queued[task] = result
        task.add_done_callback(lambda t: self._queued.pop(t, None))

    async def _report_turn(self, result: SubagentResult) -> object:
        # the helpers this turn starts continue the chain of the helper whose report it handles
        current_turn.set(TurnScope("report", depth=result.record.depth))
        async with self._one_at_a_time:
            refusal = self.spend()
            if refusal is not None:
                await self._hold(result, refusal)
                return None
            if self._refusal is not None:
                self._tell(self._refusal)  # reports held before the limit was raised, if untold
            self._told = False  # the limit allows calls again: a later hold is told anew
            return await self.turns.inject(
                result.report_message(), result.record.note(), emit=self.emit
            )

    async def _hold(self, result: SubagentResult, refusal: SpendLimitReached) -> None:
        """Keep the report in the session instead of running its turn. The user is told once, when no
        other report turn is queued behind this one, how many were held (helpers still running will
        end held the same way while the limit holds, and are only counted)."""
        await self.turns.save_notes([result.held_note(refusal.message)])
        if self._told:
            return
        self._held.append(result)
        self._refusal = refusal
        if any(not t.done() and t is not asyncio.current_task() for t in self._queued):
            return  # the last of the queue tells, with the count (or `stop`, if it cancels them)
        self._tell(refusal)

    def _tell(self, refusal: SpendLimitReached) -> None:
        """The one line for the reports held since the last one (none: nothing to say)."""
        if not self._held:
            return
        held, self._held, self._told = self._held, [], True
        where = f" (`nanobot session show {self.session}`)" if self.session else ""
        what = (
            f"the report of subagent '{held[0].label}' ({held[0].id}) was not handled: it is"
            if len(held) == 1
            else f"{len(held)} helpers' reports were not handled: each is"
        )
        running = len(self._running)
        later = (
            f"; the {'report of the helper' if running == 1 else f'reports of the {running} helpers'} "
            "still running will be kept the same way while the limit holds"
            if running
            else ""
        )
        self.emit(
            Notice(
                f"{refusal.message}. {what[0].upper()}{what[1:]} kept in this session{where}, and "
                f"the model reads "
                f"{'it' if len(held) == 1 else 'them'} with your next message once the limit "
                f"allows{later}. {refusal.hint or ''}".rstrip(),
                "warning",
            )
        )

    def limited(self, text: str) -> None:
        self.emit(Notice(text, "warning"))

    def pending(self) -> int:
        return sum(1 for task in self._queued if not task.done())

    async def wait(self, timeout: float) -> bool:
        pending = [task for task in self._queued if not task.done()]
        if not pending:
            return True
        _, still = await asyncio.wait(pending, timeout=timeout)
        return not still

    async def stop(self, reason: str, stopped: list[HelperRecord]) -> None:
        notes = [record.note() for record in stopped]
        queued = [
            (task, result)
            for task, result in self._queued.items()
            if task is not asyncio.current_task()
        ]
        for task, _ in queued:
            task.cancel()
        if queued:
            await asyncio.gather(*(task for task, _ in queued), return_exceptions=True)
        if self._refusal is not None:
            self._tell(self._refusal)  # held reports the cancelled queue would have counted
        # a report turn that started saved its helper's note first (save_notes skips those); one
        # that never started: its helper did finish, but nobody read the report
        notes += [
            result.record.note(f"; handling its report was stopped {reason}")
            for _, result in queued
        ]
        if notes:
            await self.turns.save_notes(notes)
