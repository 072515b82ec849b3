"""The chat's side of reminders: fire due jobs when no `nanobot serve` runs, and show every firing.

Every few seconds the chat (1) prints, above the prompt, what any runner recorded in
cron/runs.jsonl since the chat opened, and (2) takes the runner lock for one tick if nobody
holds it, firing what is due. A job aimed at the chat's own session runs in the open
conversation (behind the user's turn); other jobs open their own session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from nanobot.cron.runner import Firing, JobTurns, Scheduler, TurnResult

if TYPE_CHECKING:
    from nanobot.agent.conversation import Conversation

CHECK_SECONDS = 5.0  # at most this long between looks (sooner when a job is due sooner)


class ChatTurns:
    """Runs a job's turn: in the chat's own conversation when it targets it, else in its own session."""

    def __init__(self, chat_session: str, conversation: Conversation, fallback: JobTurns) -> None:
        self.chat_session = chat_session
        self.conversation = conversation
        self.fallback = fallback  # other sessions' jobs (nanobot.app.AssistantTurns)

    async def run(self, session_key: str, prompt: str) -> TurnResult:
        if session_key == self.chat_session:
            outcome = await self.conversation.send(prompt, by_user=False)
            return TurnResult(outcome.content, outcome.error)
        return await self.fallback.run(session_key, prompt)


class ChatReminders:
    def __init__(self, scheduler: Scheduler, show: Callable[[Firing], None]) -> None:
        self.scheduler = scheduler
        self.show = show
        self.offset = scheduler.store.runs_end()  # only what happens from now on
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.scheduler.lock.release()

    async def _loop(self) -> None:
        while True:
            try:
                self._show_new()
                await self._fire_due()
                self._show_new()
                delay = min(CHECK_SECONDS, self.scheduler.seconds_until_next())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reminders must never take the chat down
                self.show(
                    Firing(
                        "notice", 0, "reminders", f"checking scheduled jobs failed: {exc}", "error"
                    )
                )
                delay = CHECK_SECONDS * 6
            await asyncio.sleep(max(0.5, delay))

    async def _fire_due(self) -> None:
        lock = self.scheduler.lock
        if not lock.try_acquire():
            return  # `nanobot serve` (or another chat) is the runner
        try:
            await self.scheduler.tick()
        finally:
            lock.release()

    def _show_new(self) -> None:
        records, self.offset = self.scheduler.store.read_runs(self.offset)
        for record in records:
            firing = Firing.from_json(record)
            if not firing.quiet:
                self.show(firing)
