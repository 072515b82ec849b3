"""Timing wrappers for scripts/bench.py: where a turn's local time goes, without editing product code.

`Probe.wrap(owner, name, label)` replaces a function or method with a wrapper that adds its wall
time to `label`; sync and async functions both work. A function imported by name into other
nanobot modules is replaced there too (so `from x import f` callers are timed as well), unless
`everywhere=False`. `restore()` puts every original back.
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
from collections import defaultdict
from typing import Any


class Probe:
    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._undo: list[tuple[Any, str, Any]] = []

    def reset(self) -> None:
        self.totals.clear()
        self.calls.clear()

    def snapshot(self) -> dict[str, float]:
        return dict(self.totals)

    def _wrapper(self, fn: Any, label: str) -> Any:
        totals, calls = self.totals, self.calls
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def timed_async(*a: Any, **kw: Any) -> Any:
                t = time.perf_counter()
                try:
                    return await fn(*a, **kw)
                finally:
                    totals[label] += time.perf_counter() - t
                    calls[label] += 1

            return timed_async

        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                totals[label] += time.perf_counter() - t
                calls[label] += 1

        return timed

    def wrap(self, owner: Any, name: str, label: str, *, everywhere: bool = True) -> bool:
        """Time `owner.name` as `label`; False if it does not exist (a part not built yet)."""
        original = (
            owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        )
        if original is None:
            return False
        raw = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
        timed = self._wrapper(raw, label)
        if isinstance(original, staticmethod):
            timed = staticmethod(timed)
        elif isinstance(original, classmethod):
            timed = classmethod(timed)
        targets = [owner]
        if everywhere and not isinstance(owner, type):
            targets += [
                m
                for n, m in list(sys.modules.items())
                if n.startswith("nanobot") and m is not owner and getattr(m, name, None) is original
            ]
        for target in targets:
            self._undo.append((target, name, original))
            setattr(target, name, timed)
        return True

    def restore(self) -> None:
        while self._undo:
            target, name, original = self._undo.pop()
            setattr(target, name, original)
