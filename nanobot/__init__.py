"""nanobot: a personal AI assistant that lives in the terminal.

The names below are the Python API (docs/python-api.md): load the config, open an assistant on a
session, send it a turn, read the events and the outcome. Everything else is private by convention.
They are loaded on first use, so `import nanobot` (which every `nanobot` command does) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from nanobot.agent.events import (
        Event,
        Notice,
        Retrying,
        StopReason,
        TextDelta,
        ToolFinished,
        ToolStarted,
        TurnDone,
        TurnOutcome,
    )
    from nanobot.app import Assistant, open_assistant
    from nanobot.config import Config, load_config
    from nanobot.errors import ConfigError, MissingKeyError, NanobotError, ProviderError

# public name -> the module that defines it
_PUBLIC = {
    "load_config": "nanobot.config",
    "Config": "nanobot.config",
    "open_assistant": "nanobot.app",
    "Assistant": "nanobot.app",
    "Event": "nanobot.agent.events",
    "TextDelta": "nanobot.agent.events",
    "ToolStarted": "nanobot.agent.events",
    "ToolFinished": "nanobot.agent.events",
    "Retrying": "nanobot.agent.events",
    "Notice": "nanobot.agent.events",
    "TurnDone": "nanobot.agent.events",
    "TurnOutcome": "nanobot.agent.events",
    "StopReason": "nanobot.agent.events",
    "NanobotError": "nanobot.errors",
    "ConfigError": "nanobot.errors",
    "MissingKeyError": "nanobot.errors",
    "ProviderError": "nanobot.errors",
}

__all__ = [
    "__version__",
    "load_config",
    "Config",
    "open_assistant",
    "Assistant",
    "Event",
    "TextDelta",
    "ToolStarted",
    "ToolFinished",
    "Retrying",
    "Notice",
    "TurnDone",
    "TurnOutcome",
    "StopReason",
    "NanobotError",
    "ConfigError",
    "MissingKeyError",
    "ProviderError",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked for (PEP 562)."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'nanobot' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
