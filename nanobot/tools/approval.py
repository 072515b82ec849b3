"""The seam between a tool that wants to do something risky and the person who decides.

A tool builds an ApprovalRequest and awaits `ctx.approver.approve(request)`. Who answers
depends on where nanobot runs: the chat asks the user (y once / a always this session /
n with an optional reason), one-shot mode refuses with the flag or config that allows it,
and tests script the answers. The tool never prints or prompts itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ApprovalRequest:
    kind: str  # what is risky: "exec-network", "exec-unconfined", "exec-ask", "exec-unparsable", "file-outside", "persistence", "memory-edit", "prompt-edit", "skill-edit", "mcp", "web-domain"
    summary: str  # one line shown to the user, e.g. "exec wants network access: curl example.com"
    detail: str = ""  # more to show before asking: the full command, or a diff
    always_key: str = ""  # what "always for this session" remembers (defaults to kind)
    allow_hint: str = (
        ""  # the flag or config key that allows it without asking, for one-shot refusals
    )


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""  # why it was refused (the user's words or the policy's), passed to the model
    always: bool = False  # the user answered "always for this session" (remembered by always_key)
    by_person: bool = False  # a person saw this very request and allowed it (not a flag, config or earlier "always")


def approve_flag_hint(kind: str) -> str:
    """The flag and config key that allow `kind` without asking (for a one-shot refusal)."""
    return f'`--approve {kind}` (or "tools.autoApprove": ["{kind}"] in the config)'


class Approver(Protocol):
    async def approve(self, request: ApprovalRequest) -> Decision: ...


class RefuseApprover:
    """Where nobody can be asked (one-shot mode, no terminal): refuse and say what allows it."""

    async def approve(self, request: ApprovalRequest) -> Decision:
        hint = f"; to allow it, use {request.allow_hint}" if request.allow_hint else ""
        return Decision(False, f"refused without asking: nobody can approve it in this mode{hint}")
