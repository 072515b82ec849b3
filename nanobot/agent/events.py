"""Events the agent loop emits. The CLI renders them; saving and consolidation hang off them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class TurnDone:
    content: str | None
    stop_reason: str
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


Event = TextDelta | ToolStarted | ToolFinished | Retrying | Notice | TurnDone
EventSink = Callable[[Event], None]


def ignore(_event: Event) -> None:
    """An EventSink that drops everything."""
