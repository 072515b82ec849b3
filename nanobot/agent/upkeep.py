"""Memory upkeep for one session: consolidation in the background after each turn, and before a
turn whose request would not fit, so the session's requests stay inside the context window.

The Consolidator decides whether there is anything to do (it asks the budget) and does it; this
module decides *when* it runs, keeps at most one run going, and routes what it reports: to the
turn that is waiting for it, else to where background events render.
"""

from __future__ import annotations

import asyncio

from nanobot.agent.consolidation import DEFAULT_PROBE, ConsolidationReport, Consolidator
from nanobot.agent.context import ContextBuilder
from nanobot.agent.events import Event, EventSink, Notice, ignore
from nanobot.agent.loop import ToolRunner
from nanobot.config import AgentDefaults
from nanobot.session.store import Session

# a turn waits this long for consolidation to make room, then goes ahead with older turns left
# out of its request while consolidation finishes in the background
ROOM_WAIT_SECONDS = AgentDefaults.consolidation_wait_seconds
# on exit, a consolidation still running after this long is announced (the wait would look like a hang)
QUIET_EXIT_SECONDS = 1.0


class MemoryUpkeep:
    """When one session's consolidation runs, and who hears about it."""

    def __init__(
        self,
        consolidator: Consolidator,
        session: Session,
        context: ContextBuilder,
        tools: ToolRunner,
        *,
        background: EventSink = ignore,
        room_wait_seconds: float = ROOM_WAIT_SECONDS,
    ) -> None:
        self.consolidator = consolidator
        self.session = session
        self.context = context
        self.tools = tools
        self.background = background
        self.room_wait_seconds = room_wait_seconds
        self.last: ConsolidationReport | None = (
            None  # the last consolidation that ran (for /status)
        )
        self._task: asyncio.Task | None = None
        self._waiting: EventSink | None = None  # the turn waiting for it hears what it reports

    async def join(self, timeout: float | None = None) -> bool:
        """Wait for the background consolidation, if one runs; False if `timeout` passed first.

        Cancelling the waiter (Ctrl-C) never cancels the consolidation; its failures are reported by it."""
        task = self._task
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)

    async def close(self, wait: float) -> None:
        """On exit: give a running consolidation `wait` seconds, then stop it. Nothing is lost: the pointer
        moves only past what was recorded, and the next run consolidates the rest."""
        task = self._task
        quiet = min(wait, QUIET_EXIT_SECONDS)
        if await self.join(quiet) or task is None:
            return
        # past this, the user would see nothing happen: say what nanobot waits for, and how long
        self.background(
            Notice(
                f"finishing the memory consolidation before nanobot exits (at most {wait:g} s, "
                "agents.defaults.consolidationExitWaitSeconds; Ctrl-C stops it, nothing is lost)…"
            )
        )
        if await self.join(wait - quiet):
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        self.background(
            Notice(
                f"memory consolidation did not finish within {wait:g} s "
                "(agents.defaults.consolidationExitWaitSeconds); it stopped, nothing was lost, "
                "and the next run goes on with it",
                "warning",
            )
        )

    async def make_room(self, probe: str, emit: EventSink) -> None:
        """Before a turn: when the prompt would not fit, consolidate first, waiting a few seconds at most.

        If consolidation takes longer, the turn goes ahead: the budget leaves the oldest turns out of
        this request (marked) and consolidation finishes in the background."""
        wait = self.room_wait_seconds
        self._waiting = emit
        try:
            # one still running from the last turn gets a few seconds; otherwise the consolidator
            # (asking the budget) decides whether this turn needs room, and makes it
            if await self.join(wait):
                self._start(probe)
                if await self.join(wait):
                    return
            emit(
                Notice(
                    f"memory consolidation is taking longer than {wait:g} s "
                    "(agents.defaults.consolidationWaitSeconds); it goes on in the background, and "
                    "until it is done a request that does not fit leaves the oldest turns out"
                )
            )
        finally:
            self._waiting = None

    def after_turn(self) -> None:
        """After a turn: consolidate in the background if the session needs it (unless one runs)."""
        if self._task is not None and not self._task.done():
            return
        self._start(DEFAULT_PROBE)

    async def compact(self, *, emit: EventSink) -> ConsolidationReport:
        """Consolidate everything but the last exchange now (call it between turns)."""
        await self.join()
        report = await self.consolidator.compact(self.session, emit=emit)
        self._report(report, emit)
        return report

    async def archive_all(self, *, emit: EventSink) -> ConsolidationReport:
        """Archive every unconsolidated message (call it between turns, before clearing the session)."""
        await self.join()
        report = await self.consolidator.archive_all(self.session, emit=emit)
        self._report(report, emit)
        return report

    def _route(self, event: Event) -> None:
        (self._waiting or self.background)(event)

    def _start(self, probe: str) -> None:
        self._task = asyncio.get_running_loop().create_task(self._consolidate(probe))

    async def _consolidate(self, probe: str) -> None:
        try:
            report = await self.consolidator.maybe_consolidate_by_tokens(
                self.session,
                system_prompt=self.context.system_prompt,
                tool_schemas=self.tools.schemas(),
                probe=probe,
                emit=self._route,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never lost: the pointer did not move, the next check tries again
            self._route(
                Notice(
                    f"memory consolidation failed: {exc}; nothing was lost, it will be tried again "
                    "after the next turn",
                    "warning",
                )
            )
            return
        self._report(report, self._route)

    def _report(self, report: ConsolidationReport, emit: EventSink) -> None:
        if report.ran:
            self.last = report
        for message in report.notices:
            emit(Notice(message, "warning"))
