"""The import layers the package map in docs/dev/architecture.md states, read from the source with `ast`."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

import nanobot

PACKAGE = Path(nanobot.__file__).parent
UI_LIBRARIES = {"typer", "rich", "prompt_toolkit"}
# errors/messages/paths import the standard library only; fsio adds nanobot.errors.
LOWEST_LAYER = {
    "errors.py": set(),
    "messages.py": set(),
    "paths.py": set(),
    "fsio.py": {"nanobot.errors"},
}
# The agent loop never prints or touches files: no file, path, store or UI module reaches it.
NO_IO_MODULES = ["agent/loop.py", "agent/events.py"]
IO_IMPORTS = {
    "os",
    "io",
    "shutil",
    "pathlib",
    "tempfile",
    "fileinput",
    "fcntl",
    "builtins",
    "nanobot.fsio",
    "nanobot.paths",
    "nanobot.session.store",
    "nanobot.memory.store",
    "nanobot.memory.history",
    "nanobot.cli",
} | UI_LIBRARIES
IO_CALLS = {"print", "open", "input"}


def _sources() -> list[Path]:
    """Every module but `python -m nanobot`'s entry point, which only calls the CLI."""
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE) != Path("__main__.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per test process (the tests only read it)."""
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a module's tree, walked once per test process (each rule below reads them all)."""
    return tuple(ast.walk(_tree(path)))


@functools.cache
def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (function-level imports included)."""
    found: list[tuple[int, str]] = []
    for node in _nodes(path):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = ".".join(
                    path.relative_to(PACKAGE.parent).with_suffix("").parts[: -node.level]
                )
                module = f"{package}.{node.module}" if node.module else package
            else:
                module = node.module or ""
            # `from nanobot.x import y` imports the module nanobot.x.y when y is one
            submodules = [
                f"{module}.{alias.name}"
                for alias in node.names
                if _is_module(f"{module}.{alias.name}")
            ]
            found += [(node.lineno, name) for name in submodules or [module]]
    return found


def _is_module(dotted: str) -> bool:
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return dotted.startswith("nanobot.") and (path.with_suffix(".py").exists() or path.is_dir())


def _root(module: str) -> str:
    return module.split(".")[0]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{line}"


def test_the_walker_sees_imports_at_every_depth(tmp_path):
    sample = PACKAGE / "cli" / "app.py"
    roots = {_root(module) for _, module in _imports(sample)}
    assert "typer" in roots and "nanobot" in roots


def test_ui_libraries_are_imported_only_under_cli():
    leaks = [
        f"{_where(path, line)} imports {module}"
        for path in _sources()
        if path.relative_to(PACKAGE).parts[0] != "cli"
        for line, module in _imports(path)
        if _root(module) in UI_LIBRARIES
    ]
    assert leaks == []


def test_nothing_outside_cli_imports_the_cli():
    upward = [
        f"{_where(path, line)} imports {module}"
        for path in _sources()
        if path.relative_to(PACKAGE).parts[0] != "cli"
        for line, module in _imports(path)
        if module == "nanobot.cli" or module.startswith("nanobot.cli.")
    ]
    assert upward == []


def test_lowest_layer_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name, allowed in LOWEST_LAYER.items():
        path = PACKAGE / name
        assert path.exists(), name
        wrong = [
            f"{_where(path, line)} imports {module}"
            for line, module in _imports(path)
            if _root(module) not in stdlib and module not in allowed
        ]
        assert wrong == [], name


def test_the_agent_loop_imports_no_printing_or_file_modules():
    for name in NO_IO_MODULES:
        path = PACKAGE / name
        tree = _tree(path)
        wrong = [
            f"{_where(path, line)} imports {module}"
            for line, module in _imports(path)
            if module in IO_IMPORTS
            or _root(module) in IO_IMPORTS
            or any(module.startswith(m + ".") for m in IO_IMPORTS)
        ]
        calls = [
            f"{_where(path, node.lineno)} calls {node.func.id}()"
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in IO_CALLS
        ]
        assert wrong + calls == [], name


def _exception_classes(nodes: tuple[ast.AST, ...], known: set[str]) -> set[str]:
    """Classes whose bases are exceptions (builtin or defined in `known`), followed to a fixed point."""
    found: set[str] = set()
    classes = [node for node in nodes if isinstance(node, ast.ClassDef)]
    while True:
        more = {
            node.name
            for node in classes
            if any(
                (
                    isinstance(base, ast.Name)
                    and (base.id in known | found or base.id.endswith(("Error", "Exception")))
                )
                for base in node.bases
            )
        } - found
        if not more:
            return found
        found |= more


def test_every_error_class_lives_in_errors_py_and_is_drawn_in_its_tree():
    errors_py = PACKAGE / "errors.py"
    tree = _tree(errors_py)
    defined = _exception_classes(_nodes(errors_py), set())
    assert {"NanobotError", "StorageError", "MemoryBusy", "SkillError", "CallFailed"} <= defined
    drawing = ast.get_docstring(tree) or ""
    assert [name for name in sorted(defined) if f" {name}" not in drawing] == []
    elsewhere = []
    for path in _sources():
        if path == errors_py:
            continue
        local = {
            name for name in _exception_classes(_nodes(path), defined) if not name.startswith("_")
        }
        elsewhere += [f"{path.relative_to(PACKAGE.parent)}: {name}" for name in sorted(local)]
    assert elsewhere == []


def _drawn_parents(drawing: str) -> dict[str, str | None]:
    """The tree in errors.py's docstring as {class: its parent in the drawing}."""
    parents: dict[str, str | None] = {}
    stack: list[str] = []
    for line in drawing.splitlines():
        stripped = line.lstrip(" |")
        if not stripped.startswith(("* ", "+ ")):
            continue
        name = stripped[2:].split()[0]
        depth = 0 if stripped.startswith("* ") else (len(line) - len(stripped)) // 2
        del stack[depth:]
        parents[name] = stack[-1] if stack else None
        stack.append(name)
    return parents


def test_the_error_tree_drawing_matches_the_classes():
    tree = _tree(PACKAGE / "errors.py")
    drawn = _drawn_parents(ast.get_docstring(tree) or "")
    actual = {
        node.name: node.bases[0].id
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.bases and isinstance(node.bases[0], ast.Name)
    }
    # a root of the drawing (`* NanobotError`) derives from Exception itself
    assert {name: drawn.get(name, "(not drawn)") or "Exception" for name in actual} == actual
    assert actual["ConsolidationFailure"] == actual["CallFailed"] == "NanobotError"


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    # a top-level `if` (e.g. `if TYPE_CHECKING:`) binds names at module level too
    body = [
        n
        for node in tree.body
        for n in ([node, *node.body, *node.orelse] if isinstance(node, ast.If) else [node])
    ]
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_every_name_in_an_all_list_is_defined_in_its_module():
    drifted = []
    for path in _sources():
        tree = _tree(path)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
            ):
                listed = [
                    e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)
                ]
                drifted += [
                    f"{path.relative_to(PACKAGE.parent)}: {name}"
                    for name in listed
                    if name not in _top_level_names(tree)
                ]
    assert drifted == []


# Leaf data modules of the provider table, below `config.py`, which reads them.
PROVIDER_TABLE = {"nanobot.provider_table", "nanobot.reasoning"}
# tests/ folders that are no package's: end-to-end stories through the real command, and the
# hostile and benign corpora (docs/dev/testing.md, "Where a test goes").
TEST_FOLDERS_BESIDE = {"scenarios", "security"}


def _map_entries() -> list[tuple[list[str], str]]:
    """The package map (docs/dev/architecture.md) as (names on the entry's first line, the entry's whole text)."""
    page = (PACKAGE.parent / "docs" / "dev" / "architecture.md").read_text(encoding="utf-8")
    block = page.split("## The package map", 1)[1].split("```", 2)[1]
    entries: list[tuple[list[str], str]] = []
    for line in block.splitlines()[2:]:
        if line.startswith("  ") and not line.startswith("   "):
            names = line.strip().split("  ")[0].split()
            entries.append((names, line))
        elif entries and line.strip():
            entries[-1] = (entries[-1][0], entries[-1][1] + " " + line)
    return entries


def _unit(module: str) -> str | None:
    """The map's name for where `nanobot.x.y` lives: `x.py` or `x/`."""
    parts = module.split(".")
    if parts[0] != "nanobot" or len(parts) < 2:
        return None
    if (PACKAGE / parts[1]).is_dir():
        return parts[1] + "/"
    return parts[1] + ".py" if (PACKAGE / f"{parts[1]}.py").exists() else None


def test_the_package_map_names_every_module():
    entries = _map_entries()
    named = {name for names, _ in entries for name in names}
    units = {p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    units |= {
        p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()
    }
    assert sorted(units - named) == []
    missing = []
    for names, text in entries:
        words = set(text.replace(",", " ").replace("(", " ").replace(")", " ").split())
        for package in (PACKAGE / n.rstrip("/") for n in names if n.endswith("/")):
            missing += [
                f"{package.name}/{p.stem}"
                for p in sorted(package.glob("*.py"))
                if p.stem != "__init__" and p.stem not in words
            ]
    assert missing == []


def test_every_import_points_down_the_package_map():
    rank = {name: i for i, (names, _) in enumerate(_map_entries()) for name in names}
    upward = []
    for path in _sources():
        here = path.relative_to(PACKAGE).parts
        unit = here[0] + "/" if len(here) > 1 else here[0]
        for line, module in _imports(path):
            target = _unit(module)
            if target is None or target == unit:
                continue
            if rank[target] > rank[unit]:
                upward.append(f"{_where(path, line)} imports {module} (below it in the map)")
    assert upward == []


def test_the_provider_table_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for module in PROVIDER_TABLE:
        path = PACKAGE.parent / (module.replace(".", "/") + ".py")
        assert [
            m for _, m in _imports(path) if _root(m) not in stdlib and m not in PROVIDER_TABLE
        ] == [], module


def test_tests_mirror_the_package():
    tests = Path(__file__).parent
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    expected = packages | TEST_FOLDERS_BESIDE
    assert sorted(expected - folders) == [] and sorted(folders - expected) == []


def _module_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other():
    # every import counts, at any depth (a function-level or TYPE_CHECKING import too): a circle
    # means neither module can be understood, tested or replaced without the other
    modules = {_module_of(path): path for path in _sources()}
    graph = {
        name: {m for _, m in _imports(path) if m in modules and m != name}
        for name, path in modules.items()
    }
    assert [sorted(c) for c in _circles(graph)] == []


def test_the_circle_check_sees_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


# The engines behind nanobot.memory.history.search: nothing outside nanobot/memory/ picks one itself.
SEARCH_ENGINES = {"grep_fast", "grep_fast_pieces", "grep_fast_output", "iter_grep", "search_newest"}


def test_archive_searches_go_through_the_one_search():
    chosen = []
    for path in _sources():
        if path.relative_to(PACKAGE).parts[0] == "memory":
            continue
        for node in _nodes(path):
            name = (
                node.attr
                if isinstance(node, ast.Attribute)
                else node.id
                if isinstance(node, ast.Name)
                else None
            )
            if name in SEARCH_ENGINES:
                chosen.append(f"{_where(path, node.lineno)} uses {name}")
            # a recall index is searched only by memory/history.py (read_history reads around a hit)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "search"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("index", "idx")
            ):
                chosen.append(f"{_where(path, node.lineno)} searches an index itself")
    assert chosen == []


# The load index of a session file has one owner (FileIndex, session/index.py): its pieces stay there.
LOAD_INDEX_PIECES = {"Checkpoint", "crc_of_range", "last_meta_line"}


def test_the_session_load_index_is_built_only_in_its_module():
    home = PACKAGE / "session" / "index.py"
    leaks = []
    for path in _sources():
        if path == home:
            continue
        for node in _nodes(path):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.ImportFrom)
                else [node.attr]
                if isinstance(node, ast.Attribute)
                else [node.id]
                if isinstance(node, ast.Name)
                else []
            )
            leaks += [
                f"{_where(path, node.lineno)} uses {name}"
                for name in names
                if name in LOAD_INDEX_PIECES
            ]
    assert leaks == []


# Which store class backs a home has one owner, nanobot/stores.py: the chat, status, doctor and the
# admin commands get their stores there. Only modules above it in the map, which cannot import it,
# still open a store themselves (each for one file of it: a default, a path, a guard).
STORE_CLASSES = {"SessionStore", "MemoryStore", "JobStore"}
OPEN_THEIR_OWN_STORE = {
    "stores.py",
    "memory/store.py",  # the store's own helpers (protected_reason, the exec watch)
    "session/importer.py",  # import_all's default store, and HISTORY.md's import
    "tools/files.py",  # MEMORY.md written through the store's door
    "tools/recall.py",  # where HISTORY.md is
}


def _store_constructions() -> list[str]:
    found = []
    for path in _sources():
        if str(path.relative_to(PACKAGE)) in OPEN_THEIR_OWN_STORE:
            continue
        found += [
            f"{_where(path, node.lineno)} builds {node.func.id}"
            for node in _nodes(path)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in STORE_CLASSES
        ]
    return found


def test_stores_are_built_in_one_place():
    assert _store_constructions() == []
    admin = [PACKAGE / "cli" / f"{name}_cmd.py" for name in ("session", "memory", "cron")]
    # the admin commands name the Protocols, never the concrete classes
    assert [
        f"{_where(path, line)} imports {module}"
        for path in admin
        for line, module in _imports(path)
        if module in ("nanobot.session.store", "nanobot.memory.store", "nanobot.cron.store")
    ] == []


def _uses_working_state_log(paths: list[Path]) -> list[str]:
    return [
        f"{_where(path, node.lineno)} uses WorkingStateLog"
        for path in paths
        for node in _nodes(path)
        if (isinstance(node, ast.Name) and node.id == "WorkingStateLog")
        or (
            isinstance(node, ast.ImportFrom)
            and any(alias.name == "WorkingStateLog" for alias in node.names)
        )
    ]


def test_the_agent_side_writes_the_working_state_through_its_protocol():
    # consolidation and /new ask SessionWriter.working_state_log (session/protocols.py)
    assert _uses_working_state_log(sorted((PACKAGE / "agent").glob("*.py"))) == []


def test_status_doctor_and_session_show_read_the_working_state_through_the_store():
    # SessionAdmin.working_state_for / working_states / working_state_log, and the chat's /status
    # through SessionStoreLike.working_state_for, each typed as WorkingStateReader
    readers = [
        PACKAGE / "doctor.py",
        PACKAGE / "cli" / "setup.py",
        PACKAGE / "cli" / "session_cmd.py",
        PACKAGE / "cli" / "status_view.py",
    ]
    assert _uses_working_state_log(readers) == []
