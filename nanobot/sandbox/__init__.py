"""OS confinement for exec: bubblewrap where it works, else Landlock, else an honest "none".

policy.py says what a command may see and do; bwrap.py and landlock.py + keeper.py enforce
it; limits.py bounds processes, file size and memory; confine.py chooses and launches.

The names below are loaded on first use (PEP 562), so the Landlock launcher process, which
imports keeper.py through this package, does not load confine.py, asyncio and the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nanobot.sandbox import launcher
    from nanobot.sandbox.confine import MODES, Confinement, Launch, choose, prefetch
    from nanobot.sandbox.policy import Limits, Policy, build_policy

__all__ = [
    "MODES",
    "Confinement",
    "Launch",
    "Limits",
    "Policy",
    "build_policy",
    "choose",
    "launcher",
    "prefetch",
]

_WHERE = {
    "MODES": "nanobot.sandbox.confine",
    "Confinement": "nanobot.sandbox.confine",
    "Launch": "nanobot.sandbox.confine",
    "choose": "nanobot.sandbox.confine",
    "prefetch": "nanobot.sandbox.confine",
    "Limits": "nanobot.sandbox.policy",
    "Policy": "nanobot.sandbox.policy",
    "build_policy": "nanobot.sandbox.policy",
}


def __getattr__(name: str) -> Any:
    """A name of __all__, imported from its module when first asked for."""
    if name == "launcher":
        return importlib.import_module("nanobot.sandbox.launcher")
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'nanobot.sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
