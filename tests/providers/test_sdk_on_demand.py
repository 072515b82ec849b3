"""The SDKs' re-export packages load on demand, and give exactly what the eager packages give."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from nanobot.providers import _sdk_on_demand
from nanobot.providers._sdk_on_demand import re_exports


def _bindings(source: str) -> tuple[dict, list[str] | None] | None:
    """What Python's own grammar says a re-export file binds (and its __all__), read with ast; None
    if it does more."""
    bound: dict[str, tuple[str, str | None]] = {}
    exported = None
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    for node in body:
        if (
            isinstance(node, ast.Assign)
            and [ast.unparse(t) for t in node.targets] == ["__all__"]
            and isinstance(node.value, ast.List)
            and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.value.elts
            )
        ):
            exported = [e.value for e in node.value.elts]  # type: ignore[attr-defined]
            continue
        if not isinstance(node, ast.ImportFrom) or any(a.name == "*" for a in node.names):
            return None
        if node.module == "__future__" and node.level == 0:
            bound.update({a.asname or a.name: ("__future__", a.name) for a in node.names})
            continue
        if node.level != 1:
            return None
        if node.module:
            head = node.module.split(".")[0]
            bound.setdefault(head, ("." + head, None))
            bound.update({a.asname or a.name: ("." + node.module, a.name) for a in node.names})
        else:
            bound.update({a.asname or a.name: ("." + a.name, None) for a in node.names})
    return bound, exported


@pytest.mark.parametrize(
    "root, big",
    [
        ("openai", ["types", "types.chat", "types.responses", "lib"]),
        ("anthropic", ["types", "types.beta", "resources", "resources.beta"]),
    ],
)
def test_every_sdk_re_export_file_is_read_as_python_reads_it(root: str, big: list[str]) -> None:
    base = Path(importlib.util.find_spec(root).origin).parent
    read = {}
    for init in sorted(base.rglob("__init__.py")):
        if init.parent != base:
            source = init.read_text(encoding="utf-8")
            expected = _bindings(source)
            assert re_exports(source) == expected, init
            read[".".join(init.parent.relative_to(base).parts)] = expected is not None
    assert all(read[package] for package in big)  # the big ones load on demand
    assert sum(read.values()) > 40


def _run(code: str, *, on_demand: bool) -> dict:
    # the collector off: these children import thousands of modules and make next to no garbage
    prefix = "import gc\ngc.disable()\n"
    if on_demand:
        prefix += "from nanobot.providers import _sdk_on_demand\n_sdk_on_demand.install()\n"
    p = subprocess.run(
        [sys.executable, "-c", prefix + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
    )
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
            f"class {name.title()}:\n    pass\n"
        )
    return tmp_path


def _demo(
    path: Path,
    body: str,
    *,
    finder: str = '("sdkdemo.",)',
    module: str = "import sdkdemo.types as t",
) -> dict:
    """Runs `body` in a fresh interpreter that has `path` on sys.path and our finder for the demo
    package installed (`finder`: its arguments), after `module` and the first `seen` of LOADED."""
    code = f"""
        import builtins, json, sys
        sys.path.insert(0, {str(path)!r})
        from nanobot.providers import _sdk_on_demand
        sys.meta_path.insert(0, _sdk_on_demand._Finder{finder})
        {module}
        seen = [list(getattr(builtins, "LOADED", []))]
    """
    return _run(textwrap.dedent(code) + textwrap.dedent(body), on_demand=False)


_ROOT = {
    "finder": '(("sdkdemo.",), ("sdkdemo",))',
    "module": "import sdkdemo",
}  # the root package's finder


def test_a_pure_re_export_package_runs_a_submodule_only_when_its_name_is_read(
    tmp_path: Path,
) -> None:
    path = _package(
        tmp_path,
        """
        # generated
        from __future__ import annotations

        from .alpha import Alpha as Alpha
        from .beta import (
            Beta as Beta,  # the second
            Beta as Renamed,
        )
    """,
    )
    finder = _sdk_on_demand._Finder(("sdkdemo.",))
    assert finder.find_spec("other.types") is None
    got = _demo(
        path,
        """
        alpha = t.Alpha
        seen.append(list(builtins.LOADED))
        from sdkdemo.types import Renamed
        seen.append(list(builtins.LOADED))
        try:
            t.Missing
        except AttributeError as e:
            missing = str(e)
        print(json.dumps({"seen": seen, "alpha": alpha.__module__, "renamed": Renamed is t.Beta,
                          "dir": [n for n in dir(t) if not n.startswith("_")], "missing": missing}))
    """,
    )
    assert got["seen"] == [[], ["alpha"], ["alpha", "beta"]]
    assert got["alpha"] == "sdkdemo.types.alpha"
    assert got["renamed"] is True
    assert got["dir"] == ["Alpha", "Beta", "Renamed", "alpha", "annotations", "beta"]
    assert "has no attribute 'Missing'" in got["missing"]


def test_a_package_that_does_more_than_re_export_runs_as_usual(tmp_path: Path) -> None:
    path = _package(
        tmp_path,
        """
        from .alpha import Alpha as Alpha
        if True:
            from .beta import Beta as Beta
    """,
    )
    assert _demo(path, 'print(json.dumps({"loaded": builtins.LOADED}))\n')["loaded"] == [
        "alpha",
        "beta",
    ]


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from .a import X as X\n", ({"a": (".a", None), "X": (".a", "X")}, None)),
        (
            "from __future__ import annotations\nfrom .a.b import X\n",
            (
                {
                    "annotations": ("__future__", "annotations"),
                    "a": (".a", None),
                    "X": (".a.b", "X"),
                },
                None,
            ),
        ),
        (
            "from . import chat as chat, beta\n",
            ({"chat": (".chat", None), "beta": (".beta", None)}, None),
        ),
        (
            "from .a import (\n    X as Y,  # note\n    Z,\n)\n",
            ({"a": (".a", None), "Y": (".a", "X"), "Z": (".a", "Z")}, None),
        ),
        (
            "from .a import X\n__all__ = [\n    \"X\",  # the one\n    'a',\n]\n",
            ({"a": (".a", None), "X": (".a", "X")}, ["X", "a"]),
        ),
        ("# only a comment", ({}, None)),
        ("from .a import X\nprint('side effect')\n", None),
        ("import typing as _t\n", None),
        ("from .a import *\n", None),
        ("from openai.types import X\n", None),
        ("from .a import X as\n", None),
        ("__all__ = [name for name in dir()]\n", None),
        ("__all__ = ['X', other]\n", None),
    ],
)
def test_what_counts_as_a_pure_re_export_file(source: str, expected: tuple | None) -> None:
    assert re_exports(source) == expected
    assert _bindings(source) == expected  # the test's reading, by Python's grammar, agrees


ANTHROPIC_NAMES = [
    "AnthropicFoundry",
    "AsyncAnthropicFoundry",
    "AnthropicVertex",
    "AsyncAnthropicVertex",
    "AnthropicBedrock",
    "AnthropicAWS",
    "AnthropicGoogleCloud",
    "AsyncAnthropicGoogleCloud",
]


def test_anthropic_loads_other_clouds_clients_only_when_asked_and_gives_the_same_objects() -> None:
    code = f"""
        import json, sys, importlib
        import anthropic
        client = anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9")
        loaded = len([m for m in sys.modules if m.startswith("anthropic")])
        foundry_before = "anthropic.lib.foundry" in sys.modules
        where = {{n: getattr(anthropic, n).__module__ + "." + getattr(anthropic, n).__qualname__
                 for n in {ANTHROPIC_NAMES!r}}}
        same = all(getattr(anthropic, n) is vars(anthropic)[n] for n in {ANTHROPIC_NAMES!r})
        star = {{}}
        exec("from anthropic import *", star)
        print(json.dumps({{"loaded": loaded, "foundry_before": foundry_before, "where": where, "same": same,
                          "dir": sorted(dir(anthropic)), "all": anthropic.__all__,
                          "star": sorted(k for k in star if k != "__builtins__"),
                          "module": anthropic.NotFoundError.__module__, "client": type(client).__name__}}))
    """
    eager, lazy = _run(code, on_demand=False), _run(code, on_demand=True)
    assert eager["foundry_before"] and not lazy["foundry_before"]
    assert lazy["loaded"] < eager["loaded"] * 0.6
    assert lazy["where"] == eager["where"]  # the same classes, from the same modules
    assert lazy["same"]  # bound on the package once read
    assert lazy["all"] == eager["all"] and lazy["star"] == eager["star"]
    assert set(eager["dir"]) <= set(lazy["dir"])
    assert lazy["module"] == eager["module"] == "anthropic"  # the file's own closing loop still ran
    assert lazy["client"] == "AsyncAnthropic"


def _root_package(tmp_path: Path, init: str) -> Path:
    root = tmp_path / "sdkdemo"
    (root / "lib" / "cloud").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "__init__.py").write_text(textwrap.dedent(init))
    for name in ("extra", "cloud/_client"):
        title = name.split("/")[-1].strip("_").title()
        (root / "lib" / f"{name}.py").write_text(
            f"import builtins\nbuiltins.LOADED = [*getattr(builtins, 'LOADED', []), {name!r}]\n"
            f"class {title}:\n    pass\nclass Async{title}:\n    pass\n"
        )
    (root / "lib" / "cloud" / "__init__.py").write_text(
        "from ._client import Client as Client, AsyncClient as AsyncClient\n"
    )
    return tmp_path


def test_a_root_package_runs_its_lib_conveniences_only_when_their_names_are_read(
    tmp_path: Path,
) -> None:
    path = _root_package(
        tmp_path,
        """
        __all__ = ["VERSION"]
        VERSION = "1"
        from .lib.extra import Extra as Extra, AsyncExtra
        from .lib.cloud import *
        for _name in __all__:
            pass
    """,
    )
    got = _demo(
        path,
        """
        extra = sdkdemo.Extra
        seen.append(list(builtins.LOADED))
        from sdkdemo import Client
        seen.append(list(builtins.LOADED))
        try:
            sdkdemo.Missing
        except AttributeError as e:
            missing = str(e)
        print(json.dumps({"seen": seen, "extra": extra.__module__, "client": Client.__module__,
                          "dir": [n for n in dir(sdkdemo) if not n.startswith("_")], "missing": missing}))
    """,
        **_ROOT,
    )
    assert got["seen"] == [[], ["extra"], ["extra", "cloud/_client"]]
    assert got["extra"] == "sdkdemo.lib.extra" and got["client"] == "sdkdemo.lib.cloud._client"
    assert got["dir"] == ["AsyncClient", "AsyncExtra", "Client", "Extra", "VERSION", "lib"]
    assert "has no attribute 'Missing'" in got["missing"]


@pytest.mark.parametrize(
    "init, eager",
    [
        (
            '__all__ = ["Extra"]\nfrom .lib.extra import Extra\n',
            ["extra"],
        ),  # exported: the loop over __all__ reads it
        ("from .lib.extra import Extra\nDEFAULT = Extra\n", ["extra"]),  # used by the file itself
        (
            "from .lib.extra import Extra\ndef __getattr__(name):\n    raise AttributeError(name)\n",
            ["extra"],
        ),
        (
            "from .lib.extra import *\n",
            ["extra"],
        ),  # not a pure re-export package: its names are unknown unrun
        (
            "from .lib.cloud import *\nfrom .lib.extra import Extra\nExtra\n",
            ["extra"],
        ),  # only the unused one waits
        (
            '__all__ = []\n__all__ += ["Extra"]\nfrom .lib.extra import Extra\n',
            ["extra"],
        ),  # __all__ grown: eager
        ('__all__ = []\n__all__.append("Extra")\nfrom .lib.extra import Extra\n', ["extra"]),
    ],
)
def test_a_lib_import_the_file_needs_runs_as_written(
    tmp_path: Path, init: str, eager: list[str]
) -> None:
    path = _root_package(tmp_path, init)
    got = _demo(path, 'print(json.dumps({"seen": seen}))\n', **_ROOT)
    assert got["seen"] == [eager]
