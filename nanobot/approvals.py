"""Who answers a tool's ApprovalRequest during one session, and the record of every answer.

`SessionApprover` sits between the tools and whoever can decide (the chat's prompt, or
RefuseApprover in one-shot mode):
1. a kind the user allowed up front (`--approve KIND`, `tools.autoApprove`) is allowed;
2. an `always_key` the user answered "always" for earlier in this session is allowed;
3. otherwise the inner approver decides (one request at a time: the main turn and its
   subagents never prompt over each other);
and each decision is recorded in the session (`nanobot session show` lists them).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from nanobot.errors import UsageError
from nanobot.tools.approval import ApprovalRequest, Approver, Decision, RefuseApprover

__all__ = ["SessionApprover", "KINDS", "check_kinds"]

# Every kind a tool asks about; "all" in --approve / tools.autoApprove allows every one.
KINDS = (
    "file-outside",
    "persistence",
    "memory-edit",
    "prompt-edit",
    "skill-edit",
    "exec-network",
    "exec-unconfined",
    "exec-ask",
    "exec-unparsable",
    "mcp",
    "web-domain",
)

Recorder = Callable[..., Any]


def check_kinds(kinds: Iterable[str], where: str) -> frozenset[str]:
    """The kinds as a set; an unknown one is a UsageError that lists the known ones."""
    chosen = frozenset(k.strip() for k in kinds if k and k.strip())
    unknown = sorted(chosen - set(KINDS) - {"all"})
    if unknown:
        raise UsageError(
            f"{where}: unknown approval kind {', '.join(map(repr, unknown))}",
            hint=f"Known kinds: {', '.join(KINDS)}, or all.",
        )
    return chosen


class SessionApprover:
    def __init__(
        self,
        ask: Approver | None = None,
        *,
        record: Recorder | None = None,
        auto: Iterable[str] = (),
        auto_label: str = "--approve / tools.autoApprove",
    ) -> None:
        self.ask = ask or RefuseApprover()
        self.record = record
        self.auto = frozenset(auto)
        self.auto_label = auto_label
        self.always: set[str] = set()
        self._lock = asyncio.Lock()

    @property
    def asks_someone(self) -> bool:
        return not isinstance(self.ask, RefuseApprover)

    async def approve(self, request: ApprovalRequest) -> Decision:
        key = request.always_key or request.kind
        async with self._lock:
            if request.kind in self.auto or "all" in self.auto:
                decision, by = Decision(True), self.auto_label
            elif key in self.always:
                decision, by = Decision(True), "an earlier 'always' in this session"
            else:
                decision = await self.ask.approve(request)
                by = (
                    "the user" + (" (always for this session)" if decision.always else "")
                    if self.asks_someone
                    else "nobody to ask (one-shot mode)"
                )
                if decision.allowed and decision.always:
                    self.always.add(key)
                if decision.allowed and self.asks_someone:
                    decision = dataclasses.replace(decision, by_person=True)
            if self.record is not None:
                self.record(
                    kind=request.kind,
                    summary=request.summary,
                    allowed=decision.allowed,
                    by=by,
                    reason=decision.reason,
                )
        return decision
