"""Background subagents: a short agent loop with restricted tools, reporting back when done.

A subagent never prints and never touches the session; when it ends (finished, failed,
stopped at its limit, or cancelled) the manager hands a SubagentResult to `on_done`, and
the conversation injects it as an assistant message and lets the main agent react.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from nanobot.agent.budget import ContextBudget
from nanobot.agent.loop import run_loop
from nanobot.providers.base import Provider

MAX_SUBAGENT_ITERATIONS = 15


@dataclass
class SubagentResult:
    id: str
    label: str
    task: str
    status: str  # "completed" | "failed" | "limit" | "cancelled"
    content: str

    def as_message(self) -> dict[str, Any]:
        """The assistant message injected into the parent conversation."""
        verb = {"completed": "finished", "failed": "failed", "limit": "stopped at its step limit",
                "cancelled": "was stopped"}[self.status]
        return {"role": "assistant",
                "content": f"[Subagent '{self.label}' ({self.id}) {verb}]\nTask: {self.task}\n\n"
                           f"Report:\n{self.content or '(no report)'}"}


@dataclass
class _Running:
    id: str
    label: str
    task: str
    handle: asyncio.Task = field(repr=False)


def subagent_system_prompt(workspace: Path) -> str:
    return (
        "You are a subagent: a background helper working for nanobot, the main assistant, on one task.\n"
        f"Workspace: {workspace} (relative paths resolve here).\n"
        "You cannot talk to the user and cannot start other subagents. Work with the tools you have, "
        "verify what you do, and stay within the task.\n"
        "End with a concise report for the main assistant: what you did, what you found (with file paths "
        "and key facts), and anything left undone."
    )


class SubagentManager:
    def __init__(self, provider: Provider, tools: Any, workspace: Path, *,
                 on_done: Callable[[SubagentResult], None] | None = None,
                 on_start: Callable[[str, str], None] | None = None,
                 max_iterations: int = MAX_SUBAGENT_ITERATIONS, budget: ContextBudget | None = None) -> None:
        self.provider = provider
        self.tools = tools  # a ToolRegistry without spawn
        self.workspace = workspace
        self.on_done = on_done
        self.on_start = on_start
        self.max_iterations = max_iterations
        self.budget = budget  # keeps each request inside the context window, as for the main agent
        self._running: dict[str, _Running] = {}
        self._counter = itertools.count(1)

    def spawn(self, task: str, label: str | None = None) -> tuple[str, str]:
        """Start a subagent in the background; returns (id, label) at once."""
        sub_id = f"sa-{secrets.token_hex(3)}"
        label = (label or "").strip() or f"task {next(self._counter)}"
        handle = asyncio.get_running_loop().create_task(self._run(sub_id, label, task))
        self._running[sub_id] = _Running(sub_id, label, task, handle)
        # however the task ends (even cancelled before its first step), it stops counting as running
        handle.add_done_callback(lambda _t: self._running.pop(sub_id, None))
        if self.on_start is not None:
            self.on_start(sub_id, label)
        return sub_id, label

    def running(self) -> list[tuple[str, str, str]]:
        return [(r.id, r.label, r.task) for r in self._running.values()]

    async def cancel_all(self) -> int:
        """Stop every running subagent (their exec process groups are killed); returns how many."""
        handles = [r.handle for r in self._running.values() if not r.handle.done()]
        for handle in handles:
            handle.cancel()
        if handles:
            await asyncio.gather(*handles, return_exceptions=True)
        return len(handles)

    async def wait(self, timeout: float) -> bool:
        """Wait until no subagent runs; False if the timeout passed first."""
        handles = [r.handle for r in self._running.values()]
        if not handles:
            return True
        _, pending = await asyncio.wait(handles, timeout=timeout)
        return not pending

    async def _run(self, sub_id: str, label: str, task: str) -> None:
        messages = [{"role": "system", "content": subagent_system_prompt(self.workspace)},
                    {"role": "user", "content": task}]
        try:
            result = await run_loop(self.provider, self.tools, messages, max_iterations=self.max_iterations,
                                    stream=False, budget=self.budget)
            if result.stop_reason == "error":
                outcome = SubagentResult(sub_id, label, task, "failed", result.error or "unknown error")
            elif result.stop_reason == "max_iterations":
                outcome = SubagentResult(sub_id, label, task, "limit", _last_text(result.new_messages))
            else:
                outcome = SubagentResult(sub_id, label, task, "completed", result.content or "")
        except Exception as exc:  # a crashed helper is reported, never silently lost
            outcome = SubagentResult(sub_id, label, task, "failed", f"{type(exc).__name__}: {exc}")
        self._running.pop(sub_id, None)  # before on_done, so the report's turn sees it finished
        if self.on_done is not None:
            self.on_done(outcome)


def _last_text(messages: list[dict]) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "assistant" and msg.get("content"):
            return str(msg["content"])
    return "(it made no report before reaching the limit)"
