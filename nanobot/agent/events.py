"""Events the agent loop emits, and how a turn ends. The CLI renders them; saving and
consolidation hang off them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from nanobot.providers.base import Usage


@dataclass
class TextDelta:
    text: str


@dataclass
class ToolStarted:
    call_id: str
    name: str
    hint: str  # e.g. read_file("notes.md")


@dataclass
class ToolFinished:
    call_id: str
    name: str
    is_error: bool
    preview: str  # the first line of the result


@dataclass
class Retrying:
    attempt: int
    delay: float
    reason: str


@dataclass
class Notice:
    """A quiet line for the user (consolidation started, subagent finished, ...)."""

    text: str
    level: str = "info"  # "info" | "warning" | "error"


class StopReason(StrEnum):
    """Why a turn (of the main agent or a helper) ended; the value is what `agent -m --json` prints."""

    DONE = "done"  # the model gave its final answer
    MAX_ITERATIONS = "max_iterations"  # the step limit was reached first
    ERROR = "error"  # the provider failed, or the request could not be made to fit


@dataclass
class TurnOutcome:
    """How one turn ended, as the user sees it (and `agent -m --json` prints it)."""

    stop_reason: StopReason = StopReason.DONE
    content: str | None = None
    error: str | None = None
    usage: Usage = field(default_factory=Usage)  # of the turn's last request
    tool_calls: list[dict[str, Any]] = field(
        default_factory=list
    )  # {"name", "arguments", "is_error"}


@dataclass
class TurnDone:
    outcome: TurnOutcome


Event = TextDelta | ToolStarted | ToolFinished | Retrying | Notice | TurnDone
EventSink = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """An EventSink that drops everything."""
