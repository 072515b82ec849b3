"""Load the SDKs' re-export packages on demand; NANOBOT_PLAIN_START=1 turns it off.

This is start-up machinery, not behaviour: with the switch on, `install()` does nothing and the
SDKs import exactly as shipped (a one-shot turn then starts about twice as slowly; see
docs/dev/performance.md). CI runs the CLI tests both ways. Nothing outside providers/factory.py
and providers/probe.py calls it.

Most of `import openai` (and `import anthropic`) is spent in packages such as `openai.types` and
`openai.types.responses`, whose `__init__.py` does nothing but re-export names from hundreds of
submodules (`from .batch import Batch as Batch`). The client imports a few of those submodules
directly; the rest only matter to code that asks for them by name.

`install()` puts a finder first on `sys.meta_path` for the SDK packages. For a package whose
`__init__.py` is only such relative re-exports (plus comments, `from __future__` and a literal
`__all__` list), the package module is made without running that file: each name it would have
bound is imported from its submodule the first time someone reads it (module `__getattr__`,
PEP 562), through the ordinary import system with its locks. Names, objects and classes are the
ones the eager file gives.
A package whose `__init__.py` holds anything else is imported as usual, so an SDK release that
adds code there loses only the speed.

anthropic's own `__init__.py` runs as written, except for its closing imports of other clouds'
clients (`from .lib.foundry import AnthropicFoundry`, `from .lib.vertex import *`, Bedrock,
AWS, Google Cloud): they pulled in the whole beta API's types, half of `import anthropic` (about
0.3 s, 1,200 modules). Such a `from .lib... import` statement is left out, and its names are
bound on first read, when nothing else in the file uses them, they are not in `__all__`, and
(for `*`) the module is a pure re-export package whose names can be read without running it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import Any

__all__ = ["install", "lazy_lib_imports", "re_exports"]

_ROOTS = ("openai.", "anthropic.")
_LAZY_TAIL = ("anthropic",)  # root packages whose `from .lib... import` conveniences load on demand

# One statement of a pure re-export file: a comment line, `from __future__ import x`,
# `from .sub import A as A, B` with or without parentheses (which may hold comments), or
# `__all__ = [...]`, a list of names in quotes.
_STATEMENT = re.compile(
    r"[ \t]*(?:\#[^\n]*)?\n"
    r"|from[ \t]+__future__[ \t]+import[ \t]+(?P<future>\w+)[ \t]*\n"
    r"|from[ \t]+\.(?P<sub>[\w.]*)[ \t]+import[ \t]+(?:\((?P<group>[^)]*)\)|(?P<line>[^\n(#]+))[ \t]*(?:\#[^\n]*)?\n"
    r"|__all__[ \t]*=[ \t]*\[(?P<all>[^\]]*)\][ \t]*(?:\#[^\n]*)?\n"
)
_NAME = re.compile(r"(\w+)(?:\s+as\s+(\w+))?")
_QUOTED = re.compile(r"""\s*(?:"(\w+)"|'(\w+)')\s*""")
_COMMENT = re.compile(r"#[^\n]*")

Bindings = dict[str, tuple[str, str | None]]


def re_exports(source: str) -> tuple[Bindings, list[str] | None] | None:
    """What a package's `__init__.py` binds: name -> (module to import, relative when it starts with
    a dot; the attribute to take from it, or None for the module itself), and its `__all__` if it
    sets one. None when the file does anything but re-export."""
    if not source.endswith("\n"):
        source += "\n"
    bound: Bindings = {}
    exported: list[str] | None = None
    pos = 0
    while pos < len(source):
        m = _STATEMENT.match(source, pos)
        if m is None:
            return None
        pos = m.end()
        if m["future"]:  # the eager file binds the feature's name too
            bound[m["future"]] = ("__future__", m["future"])
        if m["all"] is not None:
            exported = _names_in_quotes(m["all"])
            if exported is None:
                return None
        if m["sub"] is None:
            continue
        sub = m["sub"]
        if sub:  # importing `.a.b` binds `a` on the package, as the eager file does
            head = sub.split(".")[0]
            bound.setdefault(head, ("." + head, None))
        names = _COMMENT.sub("", m["group"] if m["group"] is not None else m["line"])
        for item in filter(None, (part.strip() for part in names.split(","))):
            nm = _NAME.fullmatch(item)
            if nm is None:
                return None
            original, alias = nm[1], nm[2] or nm[1]
            bound[alias] = (
                ("." + sub, original) if sub else ("." + original, None)
            )  # `from . import x`
    return bound, exported


def _names_in_quotes(listed: str) -> list[str] | None:
    items = _COMMENT.sub("", listed).split(",")
    if items and not items[-1].strip():
        items.pop()  # a trailing comma
    found = [_QUOTED.fullmatch(item) for item in items]
    return [m[1] or m[2] for m in found if m] if all(found) else None


def lazy_lib_imports(source: str, package_dir: str) -> tuple[ast.Module, Bindings] | None:
    """The module without its top-level `from .lib... import` statements that may load on demand,
    and what they would have bound; None when no statement qualifies, or when the file defines
    its own module `__getattr__` or builds `__all__` other than as one literal list."""
    tree = ast.parse(source)
    exported: set[str] = set()
    used: set[str] = set()
    candidates: list[ast.ImportFrom] = []
    all_lists = 0
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 1
            and (node.module or "").startswith("lib.")
        ):
            candidates.append(node)
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                used.add(sub.id)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                used.add(sub.name)
            if (
                isinstance(sub, ast.AugAssign)
                and isinstance(sub.target, ast.Name)
                and sub.target.id == "__all__"
                or isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "__all__"
            ):
                return (
                    None  # `__all__ += ...`, `__all__.extend(...)`: names this reading cannot see
                )
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            all_lists += 1
            if not isinstance(node.value, (ast.List, ast.Tuple)) or all_lists > 1:
                return None
            exported |= {
                e.value
                for e in node.value.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
    if "__getattr__" in used:
        return None
    lazy: Bindings = {}
    dropped: list[ast.ImportFrom] = []
    for node in candidates:
        where = "." + (node.module or "")
        if [a.name for a in node.names] == ["*"]:
            names = _star_names(os.path.join(package_dir, *(node.module or "").split(".")))
            if names is None:
                continue
            bound = {name: (where, name) for name in names}
        else:
            bound = {a.asname or a.name: (where, a.name) for a in node.names}
        if bound and not (set(bound) & (exported | used)):
            lazy.update(bound)
            dropped.append(node)
    if not lazy:
        return None
    gone = {id(node) for node in dropped}
    tree.body = [node for node in tree.body if id(node) not in gone]
    return tree, lazy


def _star_names(folder: str) -> list[str] | None:
    """The names `from <folder's package> import *` binds, when its `__init__.py` is pure re-exports."""
    try:
        with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as f:
            read = re_exports(f.read())
    except (OSError, UnicodeDecodeError):
        return None
    if read is None:
        return None
    bound, exported = read
    return (
        exported if exported is not None else [name for name in bound if not name.startswith("_")]
    )


def _bind_on_demand(module: ModuleType, bound: Bindings, *, submodules: bool) -> None:
    """Give `module` a `__getattr__` that imports each name of `bound` when it is first read and
    keeps it on the module (PEP 562), and a `__dir__` that lists them. With `submodules`, another
    name that is one of the package's submodules is imported too: eagerly, a sibling's import
    would have bound it there by then."""
    package = module.__name__

    def __getattr__(name: str) -> Any:
        if name in bound:
            where, attr = bound[name]
            target = importlib.import_module(where, package)
            value = target if attr is None else getattr(target, attr)
        elif (
            submodules
            and not name.startswith("__")
            and importlib.util.find_spec(f"{package}.{name}") is not None
        ):
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module.__dict__[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(bound))

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__)


class _LazyTail:
    """Loader for a root package whose `.lib` conveniences load on demand (see the top)."""

    def __init__(self, real: Any, origin: str) -> None:
        self._real = real
        self._origin = origin

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        try:
            with open(self._origin, encoding="utf-8") as f:
                planned = lazy_lib_imports(f.read(), os.path.dirname(self._origin))
        except (OSError, UnicodeDecodeError, SyntaxError):
            planned = None
        if planned is None:
            self._real.exec_module(module)
            return
        tree, lazy = planned
        _bind_on_demand(module, lazy, submodules=False)
        exec(compile(tree, self._origin, "exec", dont_inherit=True), module.__dict__)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _OnDemandPackage:
    """Loader for a pure re-export package: its names resolve on first read."""

    def __init__(self, real: Any, bound: Bindings, exported: list[str] | None) -> None:
        self._real = real
        self._bound = bound
        self._exported = exported

    def create_module(self, spec: ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        bound = self._bound
        _bind_on_demand(module, bound, submodules=True)
        exported = self._exported
        if exported is None:  # `from package import *` then gives what the eager package's would
            exported = [name for name in bound if not name.startswith("_")]
        module.__dict__["__all__"] = exported

    def __getattr__(
        self, name: str
    ) -> Any:  # get_resource_reader, is_package, ...: the file's loader
        return getattr(self._real, name)


class _Finder:
    """Finds the subpackages under `roots` as the path finder does, and swaps the loader of pure
    re-export ones."""

    def __init__(
        self, roots: tuple[str, ...] = _ROOTS, lazy_tail: tuple[str, ...] = _LAZY_TAIL
    ) -> None:
        self._roots = roots
        self._lazy_tail = lazy_tail

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname in self._lazy_tail:
            spec = PathFinder.find_spec(fullname, path)
            if spec is not None and spec.origin and spec.submodule_search_locations:
                spec.loader = _LazyTail(spec.loader, spec.origin)  # type: ignore[assignment]
            return spec
        if not fullname.startswith(self._roots):
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or not spec.submodule_search_locations or not spec.origin:
            return spec
        try:
            with open(spec.origin, encoding="utf-8") as f:
                read = re_exports(f.read())
        except (OSError, UnicodeDecodeError):
            read = None
        if read is not None:
            spec.loader = _OnDemandPackage(spec.loader, *read)  # type: ignore[assignment]
        return spec

    def invalidate_caches(self) -> None:
        pass


_FINDER = _Finder()


PLAIN_START = "NANOBOT_PLAIN_START"  # "1": import the SDKs as shipped


def install() -> None:
    """Put the finder first on sys.meta_path (once), unless NANOBOT_PLAIN_START=1. SDK packages
    already imported stay as they are."""
    if os.environ.get(PLAIN_START) == "1":
        return
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
