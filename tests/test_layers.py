"""The import layers the README's Development map states, read from the source with `ast`."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import nanobot

PACKAGE = Path(nanobot.__file__).parent
UI_LIBRARIES = {"typer", "rich", "prompt_toolkit"}
# errors/messages/paths import the standard library only; fsio adds filelock and nothing else.
LOWEST_LAYER = {"errors.py": set(), "messages.py": set(), "paths.py": set(), "fsio.py": {"filelock"}}
# The agent loop never prints or touches files: no file, path, store or UI module reaches it.
NO_IO_MODULES = ["agent/loop.py", "agent/events.py"]
IO_IMPORTS = {"os", "io", "shutil", "pathlib", "tempfile", "fileinput", "filelock", "builtins",
              "nanobot.fsio", "nanobot.paths", "nanobot.session", "nanobot.memory",
              "nanobot.history_log", "nanobot.cli"} | UI_LIBRARIES
IO_CALLS = {"print", "open", "input"}


def _sources() -> list[Path]:
    """Every module but `python -m nanobot`'s entry point, which only calls the CLI."""
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE) != Path("__main__.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports, at any depth (function-level imports included)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-node.level])
                found.append((node.lineno, f"{package}.{node.module}" if node.module else package))
            else:
                found.append((node.lineno, node.module or ""))
    return found


def _root(module: str) -> str:
    return module.split(".")[0]


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(PACKAGE.parent)}:{line}"


def test_the_walker_sees_imports_at_every_depth(tmp_path):
    sample = PACKAGE / "cli" / "app.py"
    roots = {_root(module) for _, module in _imports(sample)}
    assert "typer" in roots and "nanobot" in roots


def test_ui_libraries_are_imported_only_under_cli():
    leaks = [f"{_where(path, line)} imports {module}"
             for path in _sources() if path.relative_to(PACKAGE).parts[0] != "cli"
             for line, module in _imports(path) if _root(module) in UI_LIBRARIES]
    assert leaks == []


def test_nothing_outside_cli_imports_the_cli():
    upward = [f"{_where(path, line)} imports {module}"
              for path in _sources() if path.relative_to(PACKAGE).parts[0] != "cli"
              for line, module in _imports(path)
              if module == "nanobot.cli" or module.startswith("nanobot.cli.")]
    assert upward == []


def test_lowest_layer_imports_only_the_standard_library():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    for name, allowed in LOWEST_LAYER.items():
        path = PACKAGE / name
        assert path.exists(), name
        wrong = [f"{_where(path, line)} imports {module}" for line, module in _imports(path)
                 if _root(module) not in stdlib | allowed]
        assert wrong == [], name


def test_the_agent_loop_imports_no_printing_or_file_modules():
    for name in NO_IO_MODULES:
        path = PACKAGE / name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        wrong = [f"{_where(path, line)} imports {module}" for line, module in _imports(path)
                 if module in IO_IMPORTS or _root(module) in IO_IMPORTS
                 or any(module.startswith(m + ".") for m in IO_IMPORTS)]
        calls = [f"{_where(path, node.lineno)} calls {node.func.id}()"
                 for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id in IO_CALLS]
        assert wrong + calls == [], name


def _exception_classes(tree: ast.Module, known: set[str]) -> set[str]:
    """Classes whose bases are exceptions (builtin or defined in `known`), followed to a fixed point."""
    found: set[str] = set()
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    while True:
        more = {node.name for node in classes
                if any((isinstance(base, ast.Name) and (base.id in known | found
                        or base.id.endswith(("Error", "Exception"))))
                       for base in node.bases)} - found
        if not more:
            return found
        found |= more


def test_every_error_class_lives_in_errors_py_and_is_drawn_in_its_tree():
    errors_py = PACKAGE / "errors.py"
    tree = ast.parse(errors_py.read_text(encoding="utf-8"))
    defined = _exception_classes(tree, set())
    assert {"NanobotError", "StorageError", "MemoryBusy", "SkillError", "CallFailed"} <= defined
    drawing = ast.get_docstring(tree) or ""
    assert [name for name in sorted(defined) if f" {name}" not in drawing] == []
    elsewhere = []
    for path in _sources():
        if path == errors_py:
            continue
        local = {name for name in _exception_classes(ast.parse(path.read_text(encoding="utf-8")), defined)
                 if not name.startswith("_")}
        elsewhere += [f"{path.relative_to(PACKAGE.parent)}: {name}" for name in sorted(local)]
    assert elsewhere == []


def test_the_readme_development_map_names_every_top_level_module_and_package():
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    block = readme.split("## Development", 1)[1].split("```", 2)[1]
    names = {p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    names |= {p.name + "/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert sorted(name for name in names if name not in block.split()) == []
