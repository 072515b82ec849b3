"""Compiled code for the source text that dataclasses and typing write while modules load.

`@dataclass` writes each method it adds (`__init__`, `__repr__`, `__eq__`, ...) as Python source
and runs it with `exec`; typing compiles each annotation written as a string (a ForwardRef). A
one-shot turn does that about 1,800 times, and parsing and compiling that text was a fifth of all
the work the run did (callgrind: 351 of 1,808 million instructions). The text is the same on
every start, so its compiled code is kept: `install()` gives the two modules stand-ins for `exec`
and `compile` that look the text up first (and `re` one for its patterns, below), and what was
new is written at exit.

Regular expressions go the same way: about 190 are compiled as a one-shot turn's modules load
(nanobot's own, the SDKs', the standard library's), 23-32 ms of parsing in Python. For each
pattern and flags compiled while a module is being imported (a module's own text, never what the
program was given later: a glob from the user, a secret to mask), the program `re` hands to its C
engine (`_sre.compile`) is kept and given to the engine again, which checks it as it always does;
`Pattern` objects compare equal exactly when their programs do, and tests/test_code_cache.py
holds every kept one to what `re` makes itself.

The key is everything the compiled code depends on: the text, the mode, the `__future__` flags the
caller passes on, and the optimization level; the file also names the interpreter's bytecode
version, so a code object is only ever given to the Python that made it. A damaged or foreign
file is ignored (and replaced at exit).

Where: beside the package's own bytecode (`nanobot/__pycache__/`, or under PYTHONPYCACHEPREFIX),
one marshal file per interpreter. It has the trust of the `.pyc` files next to it: whoever can
write there can change nanobot's bytecode anyway. Confined commands see that folder read-only
(sandbox policy rule 4). Nothing is written when bytecode writing is off
(PYTHONDONTWRITEBYTECODE), when the folder is read-only, or when fewer than _WORTH_SAVING texts
were new.
Only the `nanobot` command installs it (cli/app.py `run`); importing nanobot changes nothing.
"""

from __future__ import annotations
import __future__

import _sre  # type: ignore[import-not-found]
import atexit
import builtins
import dataclasses
import importlib.util
import marshal
import os
import re
import sys
import typing
from pathlib import Path
from re import _compiler as sre_compile  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from types import CodeType, FrameType
from typing import Any

from nanobot.fsio import load_beside_bytecode, save_beside_bytecode
from nanobot.paths import beside_bytecode

__all__ = ["CodeCache", "default_path", "install", "installed"]

_FUTURE_FLAGS = 0
for _name in __future__.all_feature_names:
    _FUTURE_FLAGS |= getattr(__future__, _name).compiler_flag

# the bytecode's version and the regular expression engine's: entries made by another are not used
_HEADER = importlib.util.MAGIC_NUMBER + f"nanobot code cache 3 sre {_sre.MAGIC}\n".encode()
# Past this many texts a save keeps only what this process used: what is left of older versions.
# A one-shot turn uses about 1,700; the chat, the tools and every command together some 2,500.
_MAX_ENTRIES = 5_000
# A save waits for this many new texts: a few turn up on every start (tokenize's pattern is built
# from a set, so its text changes with each process's hash seed), and rewriting the file for them
# would cost every start a write. The first start, an upgrade or a new command brings hundreds.
_WORTH_SAVING = 20

_installed: CodeCache | None = None


def default_path() -> Path:
    """This interpreter's cache file beside nanobot's bytecode."""
    return beside_bytecode("generated-code")


class CodeCache:
    """Source text -> code object, loaded from `path` and written back by `save()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.misses = 0  # texts compiled by this process (not found in the file)
        # text -> marshal bytes: loading the file costs the copy of its bytes, not the making of
        # thousands of code objects this run may not need, and a code object handed out is not
        # kept alive here after its caller is done with it
        self._code: dict[str, bytes] = self._load(path)
        self._used: set[str] = set()

    @staticmethod
    def _load(path: Path) -> dict[str, bytes]:
        table = load_beside_bytecode(path, _HEADER)
        if not isinstance(table, dict):
            return {}
        return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, bytes)}

    def compiled(self, source: str, mode: str, flags: int, optimize: int = -1) -> CodeType:
        """What `compile(source, "<string>", mode, flags, dont_inherit=True, optimize)` returns."""
        level = sys.flags.optimize if optimize == -1 else optimize
        key = f"{mode} {flags} {level}\n{source}"
        found = self._code.get(key)
        code: CodeType | None = None
        if found is not None:
            try:
                loaded = marshal.loads(found)
            except (EOFError, ValueError, TypeError):
                loaded = None
            code = loaded if isinstance(loaded, CodeType) else None
        if code is None:
            code = compile(source, "<string>", mode, flags, True, level)
            self._code[key] = marshal.dumps(code)
            self.misses += 1
        self._used.add(key)
        return code

    def regex(self, pattern: str | bytes, flags: int) -> re.Pattern[Any]:
        """What `re.compile(pattern, flags)` makes, from the kept program when there is one."""
        text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
        key = f"regex {flags} {'b' if isinstance(pattern, bytes) else 's'}\n{text}"
        found = self._code.get(key)
        if found is not None:
            try:
                compiled: re.Pattern[Any] = _sre.compile(pattern, *marshal.loads(found))
            except Exception:  # a damaged entry, or one the engine refuses: made again below
                pass
            else:
                self._used.add(key)
                return compiled
        parsed = sre_parse.parse(pattern, flags)
        program = [int(op) for op in sre_compile._code(parsed, flags)]  # opcodes are int subclasses
        groupindex = dict(parsed.state.groupdict)
        names: list[str | None] = [None] * parsed.state.groups
        for name, index in groupindex.items():
            names[index] = name
        parts = (int(flags | parsed.state.flags), program, parsed.state.groups - 1, groupindex, tuple(names))
        compiled = _sre.compile(pattern, *parts)
        self._code[key] = marshal.dumps(parts)
        self._used.add(key)
        self.misses += 1
        return compiled

    def patterns(self) -> list[tuple[str | bytes, int]]:
        """The (pattern, flags) pairs whose programs are kept."""
        found = []
        for key in self._code:
            if key.startswith("regex "):
                head, _, text = key.partition("\n")
                _, flags, kind = head.split(" ")
                found.append((text.encode("latin-1") if kind == "b" else text, int(flags)))
        return found

    def __len__(self) -> int:
        return len(self._code)

    def save(self) -> bool:
        """Write the table if this process compiled enough new texts; False when nothing was written."""
        if self.misses < _WORTH_SAVING:
            return False
        entries = dict(self._code)  # a copy taken at once: a daemon thread may still be importing
        table = entries if len(entries) <= _MAX_ENTRIES else {k: entries[k] for k in set(self._used) & set(entries)}
        if not save_beside_bytecode(self.path, _HEADER, table):
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


def _regex_with(cache: CodeCache) -> Any:
    real_compile = sre_compile.compile

    def cached_regex(pattern: Any, flags: int = 0) -> Any:
        if isinstance(pattern, (str, bytes)) and not flags & re.DEBUG and _importing():
            return cache.regex(pattern, int(flags))
        return real_compile(pattern, flags)

    return cached_regex


def _importing() -> bool:
    """Whether a module is being imported further up the stack: a pattern compiled there is the
    module's own text. Patterns compiled later may hold what the program was given (a file name
    in a glob, a secret to mask) and are never written to the file."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _regex_program_matches() -> bool:
    """Whether this Python's `re` builds patterns the way CodeCache.regex rebuilds them (checked
    once, on a pattern with a named group, flags and a look-behind)."""
    try:
        probe = CodeCache(Path(os.devnull))
        sample = r"(?i)(?P<word>\w+)\s*(?<!x)=\s*(\d{2,})$"
        return probe.regex(sample, 0) == sre_compile.compile(sample, 0)
    except Exception:
        return False


def _save_at_exit(cache: CodeCache) -> None:
    try:
        cache.save()
    except Exception:  # a cache: never a traceback on the way out, the next start compiles again
        pass


def install(path: Path | None = None) -> CodeCache:
    """Give dataclasses and typing the cached exec and compile, and `re` its kept programs, and
    save at exit. Once per process."""
    global _installed
    if _installed is None:
        cache = CodeCache(path or default_path())
        dataclasses.exec = _exec_with(cache)  # type: ignore[attr-defined]  # a module global shadows the builtin
        typing.compile = _compile_with(cache)  # type: ignore[attr-defined]
        if _regex_program_matches():
            sre_compile.compile = _regex_with(cache)
        atexit.register(_save_at_exit, cache)
        _installed = cache
    return _installed


def installed() -> CodeCache | None:
    """The cache `install()` put in place, if any."""
    return _installed
