"""SIGTERM and SIGHUP (a closed terminal): nothing nanobot started survives it.

On the first signal every process group exec started is killed at once (synchronously, before
any other code runs), then the main task is cancelled; its cleanup saves the session (each
stopped helper leaves its note) and the command exits 128 + the signal: 143 or 129.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from nanobot.tools.shell import ExecTool

SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Termination:
    """Installed around the main coroutine; `signum` says which signal ended it, if one did."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._task: asyncio.Task | None = None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or 0)

    @property
    def reason(self) -> str:
        """Completes "subagent X was stopped ..." in the session notes."""
        if self.signum == signal.SIGHUP:
            return "when the terminal closed (SIGHUP)"
        return (
            f"when nanobot was terminated ({signal.Signals(self.signum).name})"
            if self.signum
            else ""
        )

    def _fire(self, signum: int) -> None:
        if self.signum is not None:
            ExecTool.kill_all_running()  # a command started during cleanup goes too
            return
        self.signum = signum
        ExecTool.kill_all_running()
        if self._task is not None:
            self._task.cancel()

    async def run(self, main: Callable[[Termination], Awaitable[int]]) -> int:
        """Run `main(self)`; on a signal return 128 + its number once `main` has cleaned up."""
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for sig in SIGNALS:
            loop.add_signal_handler(sig, self._fire, sig)
        try:
            code = await main(self)
        except BaseException:  # cancelled, or a write to the terminal that a SIGHUP closed
            if self.signum is None:
                raise
            self._uncancel()
            return self.exit_code
        finally:
            for sig in SIGNALS:
                loop.remove_signal_handler(sig)
            if self.signum is not None:
                ExecTool.kill_all_running()  # anything a helper started while it was being stopped
        return self.exit_code if self.signum is not None else code

    def _uncancel(self) -> None:
        task: Any = self._task
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()  # the cancellation was ours and is handled: asyncio.run must not re-raise it
