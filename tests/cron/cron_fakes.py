"""A fake clock and a scripted turn runner for the scheduler tests (imported by the cron tests)."""

from __future__ import annotations

import asyncio

from nanobot.cron.jobs import current_job
from nanobot.cron.runner import TurnResult
from nanobot.errors import SessionInUseError


class FakeClock:
    """Time moves only when the scheduler waits (or a test says so); `end_ms` stops a serve loop."""

    def __init__(self, now_ms: int, end_ms: int | None = None) -> None:
        self.now = now_ms
        self.end_ms = end_ms
        self.waits: list[float] = []

    def now_ms(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)

    async def wait(self, stop: asyncio.Event, seconds: float) -> None:
        self.waits.append(seconds)
        await asyncio.sleep(0)
        if stop.is_set():
            return
        self.advance(max(seconds, 0.001))
        if self.end_ms is not None and self.now >= self.end_ms:
            stop.set()


class FakeTurns:
    """Records each turn (session, prompt, the job marked as running) and answers from a script."""

    def __init__(self, answer: str = "done", busy: set[str] | None = None) -> None:
        self.calls: list[tuple[str, str, str | None]] = []
        self.answer = answer
        self.busy = busy or set()

    async def run(self, session_key: str, prompt: str) -> TurnResult:
        if session_key in self.busy:
            raise SessionInUseError(f"session {session_key} is in use")
        self.calls.append((session_key, prompt, current_job.get()))
        return TurnResult(self.answer)
