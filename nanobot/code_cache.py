"""Compiled code for the source text that dataclasses and typing write while modules load.

`@dataclass` writes each method it adds (`__init__`, `__repr__`, `__eq__`, ...) as Python source
and runs it with `exec`; typing compiles each annotation written as a string (a ForwardRef). A
one-shot turn does that about 1,800 times, and parsing and compiling that text was a fifth of all
the work the run did (callgrind: 351 of 1,808 million instructions). The text is the same on
every start, so its compiled code is kept: `install()` gives the two modules stand-ins for `exec`
and `compile` that look the text up first, and what was new is written at exit.

The key is everything the compiled code depends on: the text, the mode, the `__future__` flags the
caller passes on, and the optimization level; the file also names the interpreter's bytecode
version, so a code object is only ever given to the Python that made it. A damaged or foreign
file is ignored (and replaced at exit).

Where: beside the package's own bytecode (`nanobot/__pycache__/`, or under PYTHONPYCACHEPREFIX),
one marshal file per interpreter. It has the trust of the `.pyc` files next to it: whoever can
write there can change nanobot's bytecode anyway. Confined commands see that folder read-only
(sandbox policy rule 4). Nothing is written when bytecode writing is off
(PYTHONDONTWRITEBYTECODE), when the folder is read-only, or when nothing was new.
Only the `nanobot` command installs it (cli/app.py `run`); importing nanobot changes nothing.
"""

from __future__ import annotations
import __future__

import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import sys
import typing
from pathlib import Path
from types import CodeType
from typing import Any

from nanobot.fsio import save_beside_bytecode
from nanobot.paths import beside_bytecode

__all__ = ["CodeCache", "default_path", "install", "installed"]

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag

_HEADER = importlib.util.MAGIC_NUMBER + b"nanobot code cache 2\n"
# Past this many texts a save keeps only what this process used: what is left of older versions.
# A one-shot turn uses about 1,700; the chat, the tools and every command together some 2,500.
_MAX_ENTRIES = 5_000

_installed: CodeCache | None = None


def default_path() -> Path:
    """This interpreter's cache file beside nanobot's bytecode."""
    return beside_bytecode("generated-code")


class CodeCache:
    """Source text -> code object, loaded from `path` and written back by `save()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.misses = 0  # texts compiled by this process (not found in the file)
        # a code object, or its marshal bytes until it is first asked for (loading the file costs
        # the copy of its bytes, not the making of thousands of code objects this run may not need)
        self._code: dict[str, CodeType | bytes] = self._load(path)
        self._used: set[str] = set()

    @staticmethod
    def _load(path: Path) -> dict[str, CodeType | bytes]:
        try:
            data = path.read_bytes()
        except OSError:
            return {}
        if not data.startswith(_HEADER):
            return {}
        try:
            table = marshal.loads(data[len(_HEADER):])
        except (EOFError, ValueError, TypeError):
            return {}
        if not isinstance(table, dict):
            return {}
        return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, bytes)}

    def compiled(self, source: str, mode: str, flags: int, optimize: int = -1) -> CodeType:
        """What `compile(source, "<string>", mode, flags, dont_inherit=True, optimize)` returns."""
        level = sys.flags.optimize if optimize == -1 else optimize
        key = f"{mode} {flags} {level}\n{source}"
        found = self._code.get(key)
        code: CodeType | None = None
        if isinstance(found, bytes):
            try:
                loaded = marshal.loads(found)
            except (EOFError, ValueError, TypeError):
                loaded = None
            code = loaded if isinstance(loaded, CodeType) else None
        elif found is not None:
            code = found
        if code is None:
            code = compile(source, "<string>", mode, flags, True, level)
            self.misses += 1
        self._code[key] = code
        self._used.add(key)
        return code

    def __len__(self) -> int:
        return len(self._code)

    def save(self) -> bool:
        """Write the table if this process compiled anything new; False when nothing was written."""
        if not self.misses:
            return False
        keys = self._code if len(self._code) <= _MAX_ENTRIES else self._used
        table = {k: v if isinstance(v, bytes) else marshal.dumps(v) for k in keys for v in (self._code[k],)}
        if not save_beside_bytecode(self.path, _HEADER + marshal.dumps(table)):
            return False
        self.misses = 0
        return True


def _caller_flags(depth: int) -> int:
    """The `__future__` flags of the code `depth` frames up: what exec and compile pass on."""
    return sys._getframe(depth + 1).f_code.co_flags & _FUTURE_FLAGS


def _exec_with(cache: CodeCache) -> Any:
    real_exec = builtins.exec

    def cached_exec(source: Any, globals: Any = None, locals: Any = None, /) -> None:
        if isinstance(source, str) and globals is not None:
            source = cache.compiled(source, "exec", _caller_flags(1))
        elif globals is None:  # exec's "the caller's namespace", which a stand-in cannot stand for
            frame = sys._getframe(1)
            globals, locals = frame.f_globals, frame.f_locals if locals is None else locals
        real_exec(source, globals, locals)

    return cached_exec


def _compile_with(cache: CodeCache) -> Any:
    real_compile = builtins.compile

    def cached_compile(source: Any, filename: Any, mode: str, flags: int = 0, dont_inherit: bool = False,
                       optimize: int = -1) -> Any:
        if not dont_inherit:
            flags |= _caller_flags(1)
        if isinstance(source, str) and filename == "<string>" and not flags & ~_FUTURE_FLAGS:
            return cache.compiled(source, mode, flags, optimize)
        return real_compile(source, filename, mode, flags, True, optimize)

    return cached_compile


def install(path: Path | None = None) -> CodeCache:
    """Give dataclasses and typing the cached exec and compile, and save at exit. Once per process."""
    global _installed
    if _installed is None:
        cache = CodeCache(path or default_path())
        dataclasses.exec = _exec_with(cache)  # type: ignore[attr-defined]  # a module global shadows the builtin
        typing.compile = _compile_with(cache)  # type: ignore[attr-defined]
        atexit.register(cache.save)
        _installed = cache
    return _installed


def installed() -> CodeCache | None:
    """The cache `install()` put in place, if any."""
    return _installed
