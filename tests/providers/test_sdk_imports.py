"""The SDKs' re-export packages load on demand, and give exactly what the eager packages give."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nanobot.providers import sdk_imports
from nanobot.providers.sdk_imports import re_exports

# For every subpackage of the SDKs named on the command line whose __init__.py is pure re-exports,
# imported eagerly: does what re_exports() read from the file give the very objects the package
# bound? Prints the packages checked and every difference.
_COMPARE = textwrap.dedent("""
    import importlib, importlib.util, json, os, sys, types
    from nanobot.providers.sdk_imports import re_exports
    checked, differences = [], []
    for root in sys.argv[1:]:
        base = os.path.dirname(importlib.util.find_spec(root).origin)
        for folder, _, files in sorted(os.walk(base)):
            if folder == base or "__init__.py" not in files:
                continue
            with open(os.path.join(folder, "__init__.py"), encoding="utf-8") as f:
                bound = re_exports(f.read())
            if bound is None:
                continue
            package = root + "." + os.path.relpath(folder, base).replace(os.sep, ".")
            try:
                module = importlib.import_module(package)
            except ImportError:  # the SDK's own import cycles, met when a package comes first
                differences.append([package, "ImportError"])
                continue
            checked.append(package)
            names = set(vars(module)) - {"__builtins__"}
            for name, (where, attr) in bound.items():
                target = importlib.import_module(where, package)
                if name not in names or vars(module)[name] is not (target if attr is None else getattr(target, attr)):
                    differences.append([package, name])
            for name in names - set(bound):
                value = vars(module)[name]
                sibling = isinstance(value, types.ModuleType) and value.__name__ == package + "." + name
                if not name.startswith("__") and not sibling:  # a sibling's import binds its submodule
                    differences.append([package, name])
    print(json.dumps({"checked": checked, "differences": differences}))
""")


def test_what_each_re_export_file_is_read_to_bind_is_what_the_eager_package_binds() -> None:
    p = subprocess.run([sys.executable, "-c", _COMPARE, "openai", "anthropic"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert {"openai.types", "openai.types.chat", "openai.lib", "anthropic.types"} <= set(got["checked"])
    assert len(got["checked"]) > 100
    cycles = [d for d in got["differences"] if d[1] == "ImportError"]
    assert len(cycles) <= 3, cycles
    assert [d for d in got["differences"] if d not in cycles] == []


def _run(code: str, *, on_demand: bool) -> dict:
    prefix = "from nanobot.providers import sdk_imports\nsdk_imports.install()\n" if on_demand else ""
    p = subprocess.run([sys.executable, "-c", prefix + textwrap.dedent(code)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[-1])


def test_the_client_loads_a_fraction_of_the_sdk_and_still_reads_any_type_by_name() -> None:
    code = """
        import json, sys
        import openai
        client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
        before = sorted(m for m in sys.modules if m.startswith("openai.types"))
        from openai.types.chat import ChatCompletion
        from openai.types import Batch
        print(json.dumps({"types": before, "completion": ChatCompletion.__module__,
                          "batch": Batch.__module__, "client": type(client).__name__}))
    """
    eager, lazy = _run(code, on_demand=False), _run(code, on_demand=True)
    assert lazy["completion"] == eager["completion"] == "openai.types.chat.chat_completion"
    assert lazy["batch"] == eager["batch"] == "openai.types.batch"
    assert lazy["client"] == "AsyncOpenAI"
    assert "openai.types.batch" in eager["types"]  # eager: everything, needed or not
    assert "openai.types.batch" not in lazy["types"]
    assert len(lazy["types"]) < len(eager["types"]) / 3


def _package(tmp_path: Path, init: str) -> Path:
    root = tmp_path / "sdkdemo"
    (root / "types").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "types" / "__init__.py").write_text(textwrap.dedent(init))
    for name in ("alpha", "beta"):
        (root / "types" / f"{name}.py").write_text(
            f"import builtins\nbuiltins.LOADED = [*getattr(builtins, 'LOADED', []), {name!r}]\n"
            f"class {name.title()}:\n    pass\n")
    return tmp_path


def test_a_pure_re_export_package_runs_a_submodule_only_when_its_name_is_read(tmp_path: Path) -> None:
    path = _package(tmp_path, """
        # generated
        from __future__ import annotations

        from .alpha import Alpha as Alpha
        from .beta import (
            Beta as Beta,  # the second
            Beta as Renamed,
        )
    """)
    finder = sdk_imports._Finder(("sdkdemo.",))
    code = f"""
        import builtins, json, sys
        sys.path.insert(0, {str(path)!r})
        from nanobot.providers import sdk_imports
        sys.meta_path.insert(0, sdk_imports._Finder(("sdkdemo.",)))
        import sdkdemo.types as t
        seen = [list(getattr(builtins, "LOADED", []))]
        alpha = t.Alpha
        seen.append(list(builtins.LOADED))
        from sdkdemo.types import Renamed
        seen.append(list(builtins.LOADED))
        try:
            t.Missing
        except AttributeError as e:
            missing = str(e)
        print(json.dumps({{"seen": seen, "alpha": alpha.__module__, "renamed": Renamed is t.Beta,
                          "dir": [n for n in dir(t) if not n.startswith("_")], "missing": missing}}))
    """
    assert finder.find_spec("other.types") is None
    got = _run(code, on_demand=False)
    assert got["seen"] == [[], ["alpha"], ["alpha", "beta"]]
    assert got["alpha"] == "sdkdemo.types.alpha"
    assert got["renamed"] is True
    assert got["dir"] == ["Alpha", "Beta", "Renamed", "alpha", "annotations", "beta"]
    assert "has no attribute 'Missing'" in got["missing"]


def test_a_package_that_does_more_than_re_export_runs_as_usual(tmp_path: Path) -> None:
    path = _package(tmp_path, """
        from .alpha import Alpha as Alpha
        if True:
            from .beta import Beta as Beta
    """)
    code = f"""
        import builtins, json, sys
        sys.path.insert(0, {str(path)!r})
        from nanobot.providers import sdk_imports
        sys.meta_path.insert(0, sdk_imports._Finder(("sdkdemo.",)))
        import sdkdemo.types
        print(json.dumps({{"loaded": builtins.LOADED}}))
    """
    assert _run(code, on_demand=False)["loaded"] == ["alpha", "beta"]


@pytest.mark.parametrize("source, expected", [
    ("from .a import X as X\n", {"a": (".a", None), "X": (".a", "X")}),
    ("from __future__ import annotations\nfrom .a.b import X\n",
     {"annotations": ("__future__", "annotations"), "a": (".a", None), "X": (".a.b", "X")}),
    ("from . import chat as chat, beta\n", {"chat": (".chat", None), "beta": (".beta", None)}),
    ("from .a import (\n    X as Y,  # note\n    Z,\n)\n", {"a": (".a", None), "Y": (".a", "X"), "Z": (".a", "Z")}),
    ("# only a comment", {}),
    ("from .a import X\nprint('side effect')\n", None),
    ("import typing as _t\n", None),
    ("from .a import *\n", None),
    ("from openai.types import X\n", None),
    ("from .a import X as\n", None),
])
def test_what_counts_as_a_pure_re_export_file(source: str, expected: dict | None) -> None:
    assert re_exports(source) == expected
