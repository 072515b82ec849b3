"""The compiled code of dataclasses' and typing's generated text is kept between starts
(nanobot/code_cache.py): a second start compiles none of it and builds the same classes."""

from __future__ import annotations
import __future__

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path
from re import _compiler as sre_compile  # type: ignore[attr-defined]

from nanobot.code_cache import CodeCache

# Classes of every kind dataclasses writes methods for, and a string annotation typing compiles.
PROGRAM = """
import dataclasses, json, sys, typing
from pathlib import Path
if sys.argv[1] != "-":
    from nanobot import code_cache
    cache = code_cache.install(Path(sys.argv[1]))
from dataclasses import dataclass, field

@dataclass(frozen=True, order=True)
class Point:
    x: int
    y: int = 2

@dataclass(slots=True, kw_only=True)
class Bag:
    items: list = field(default_factory=list)
    name: str = "bag"

@dataclass(eq=False)
class Node:
    value: "Point"
    children: "list[Node]" = field(default_factory=list)

# more classes, so a first start compiles enough new text to be saved (code_cache._WORTH_SAVING)
Shapes = [dataclasses.make_dataclass(f"Shape{i}", [(f"side{i}", int), (f"name{i}", str, "x")], order=True)
          for i in range(6)]

p, q = Point(1), Point(1, 3)
try:
    p.x = 5
    frozen = "assigned"
except dataclasses.FrozenInstanceError:
    frozen = "refused"
out = {
    "repr": [repr(p), repr(Bag(name="b")), repr(Node(p))],
    "compare": [p == Point(1, 2), p < q, hash(p) == hash(Point(1)), Node(p) == Node(p)],
    "frozen": frozen,
    "hints": str(typing.get_type_hints(Node)),
    "shapes": [repr(S(i)) for i, S in enumerate(Shapes)],
    "init_code": Point.__init__.__code__.co_code.hex(),
    "misses": cache.misses if sys.argv[1] != "-" else None,
}
print(json.dumps(out))
"""


def _run(cache: Path | str, **env: str) -> dict:
    full = {**os.environ, **env}
    out = subprocess.run([sys.executable, "-c", PROGRAM, str(cache)], capture_output=True, text=True,
                         timeout=60, env=full)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def _same_classes(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k != "misses"} == {k: v for k, v in b.items() if k != "misses"}


def test_a_second_start_compiles_nothing_and_builds_the_same_classes(tmp_path):
    path = tmp_path / "cache.bin"
    plain = _run("-")
    first = _run(path)
    saved = path.read_bytes()
    second = _run(path)

    assert first["misses"] >= 20  # __init__, __repr__, __eq__, the order methods, the ForwardRefs...
    assert second["misses"] == 0
    assert path.read_bytes() == saved  # nothing new, nothing written
    assert _same_classes(first, plain) and _same_classes(second, plain)
    assert plain["frozen"] == "refused" and plain["compare"] == [True, True, True, False]


def test_a_damaged_or_foreign_file_is_ignored_and_replaced(tmp_path):
    path = tmp_path / "cache.bin"
    _run(path)
    good = path.read_bytes()
    plain = _run("-")
    header = good[: 4 + good[4:].index(b"\n") + 1]  # the bytecode magic number, then one line
    every_entry_garbage = header + marshal.dumps({k: b"garbage" for k in marshal.loads(good[len(header):])})
    for damaged in (b"", b"not a cache at all", good[: len(good) // 2], b"\0\0\0\0" + good[4:],
                    header + marshal.dumps(["a", "list"]), every_entry_garbage):
        path.write_bytes(damaged)
        result = _run(path)
        assert result["misses"] >= 20 and _same_classes(result, plain)
        assert _run(path)["misses"] == 0  # the file written at exit is whole again


def test_the_key_holds_the_future_flags_and_the_optimization_level(tmp_path):
    cache = CodeCache(tmp_path / "cache.bin")
    source = "def f(x: undefined_name):\n    assert x, 'x is false'\n    return x\n"
    future = __future__.annotations.compiler_flag
    lazy = cache.compiled(source, "exec", future)
    eager = cache.compiled(source, "exec", 0)
    optimized = cache.compiled(source, "exec", future, optimize=2)

    ns: dict = {}
    exec(lazy, ns)  # annotations stay strings: no NameError
    assert ns["f"].__annotations__ == {"x": "undefined_name"}
    try:
        ns["f"](0)
    except AssertionError:
        pass
    else:
        raise AssertionError("the assert was compiled out")
    try:
        exec(eager, {})
    except NameError:
        pass
    else:
        raise AssertionError("annotations were not evaluated without the flag")
    ns = {}
    exec(optimized, ns)
    assert ns["f"](0) == 0  # -OO: no assert
    assert cache.misses == 3 and len(cache) == 3
    assert lazy == compile(source, "<string>", "exec", future, True)  # code, constants, names, line table
    assert cache.compiled(source, "exec", future) == lazy and cache.misses == 3


def test_nothing_is_written_when_bytecode_writing_is_off_or_the_folder_cannot_be_made(tmp_path):
    path = tmp_path / "cache.bin"
    result = _run(path, PYTHONDONTWRITEBYTECODE="1")
    assert result["misses"] >= 10 and not path.exists()

    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    inside = blocker / "sub" / "cache.bin"
    assert _run(inside)["misses"] >= 10  # no error at exit either
    assert blocker.read_text() == "in the way"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "home"]  # no temporary file left behind


def test_importing_nanobot_leaves_dataclasses_and_typing_alone():
    code = ("import dataclasses, typing, nanobot.cli.app, nanobot.app, nanobot.code_cache\n"
            "print('exec' in vars(dataclasses), 'compile' in vars(typing))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]


# The real command, run as the console script does (run()), with the cache at a path of the test's.
COMMAND = ("import atexit, sys\nfrom pathlib import Path\nfrom nanobot import code_cache\n"
           "cache = code_cache.install(Path(sys.argv[1]))\n"
           "atexit.register(lambda: print('MISSES', cache.misses, file=sys.stderr))\n"
           "sys.argv = ['nanobot', *sys.argv[2:]]\nfrom nanobot.cli.app import run\nrun()\n")


def test_a_one_shot_turn_compiles_its_generated_code_only_once(configure, fake_llm, isolated_home, tmp_path):
    from nanobot.fakellm import Reply

    configure()
    path = tmp_path / "code.bin"
    misses = []
    for answer in ("first answer", "second answer"):
        fake_llm.script(Reply.text(answer))
        out = subprocess.run([sys.executable, "-c", COMMAND, str(path), "agent", "-m", "hi"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and answer in out.stdout, out.stderr[-2000:]
        misses.append(int(next(ln for ln in out.stderr.splitlines() if ln.startswith("MISSES")).split()[1]))
    assert misses[0] > 300  # nanobot's own dataclasses and the SDK's, and the regular expressions
    assert misses[1] == 0
    kept = CodeCache(path)
    patterns = kept.patterns()
    assert len(patterns) > 100  # nanobot's (the secret masker's among them), the SDKs', the standard library's
    for pattern, flags in patterns:
        ours, theirs = kept.regex(pattern, flags), sre_compile.compile(pattern, flags)
        assert ours == theirs, pattern  # the same engine program and flags
        assert (ours.groups, ours.groupindex) == (theirs.groups, theirs.groupindex), pattern
    assert kept.misses == 0
    saved = [json.loads(line) for p in (isolated_home / "sessions").glob("*.jsonl")
             for line in p.read_text().splitlines()]
    assert [m.get("content") for m in saved if m.get("role") == "assistant"] == ["first answer", "second answer"]


def test_past_its_size_a_save_keeps_only_what_this_process_used(tmp_path, monkeypatch):
    from nanobot import code_cache

    path = tmp_path / "cache.bin"
    first = CodeCache(path)
    for n in range(30):
        first.compiled(f"x = {n}\n", "exec", 0)
    assert first.save() and len(CodeCache(path)) == 30
    monkeypatch.setattr(code_cache, "_MAX_ENTRIES", 30)
    later = CodeCache(path)
    later.compiled("x = 0\n", "exec", 0)  # from the file
    for n in range(25):
        later.compiled(f"y = {n}\n", "exec", 0)  # new: 55 texts now, over the limit
    assert later.misses == 25 and later.save()
    kept = CodeCache(path)
    assert len(kept) == 26
    kept.compiled("x = 0\n", "exec", 0)
    kept.compiled("y = 24\n", "exec", 0)
    assert kept.misses == 0


def test_a_few_new_texts_do_not_rewrite_the_file(tmp_path):
    path = tmp_path / "cache.bin"
    first = CodeCache(path)
    for n in range(30):
        first.compiled(f"x = {n}\n", "exec", 0)
    assert first.save()
    saved = path.read_bytes()
    later = CodeCache(path)
    for n in range(3):  # as tokenize's pattern, whose text changes with every process's hash seed
        later.compiled(f"z = {n}\n", "exec", 0)
    assert not later.save() and path.read_bytes() == saved


def test_only_the_patterns_modules_compile_as_they_load_are_kept(tmp_path):
    """A module's own pattern is kept; one compiled later from what the program was given (here a
    secret, as the masker would) never reaches the file."""
    (tmp_path / "patterned.py").write_text(
        "import re\nOWN = re.compile(r'module-pattern-(?P<n>\\d+)')\n"
        "MORE = [re.compile(f'more-{i}-[a-z]+') for i in range(25)]  # enough new text to be saved\n")
    code = ("import re, sys\nfrom pathlib import Path\nfrom nanobot import code_cache\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "cache = code_cache.install(Path(sys.argv[1]))\n"
            "import patterned\n"
            "secret = re.compile(re.escape('sk-live-' + 'abcdef1234567890'))\n"
            "assert patterned.OWN.match('module-pattern-42')['n'] == '42' and secret.search('x sk-live-abcdef1234567890')\n")
    path = tmp_path / "cache.bin"
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    data = path.read_bytes()
    assert b"module-pattern-" in data
    assert b"abcdef1234567890" not in data
    assert (r"module-pattern-(?P<n>\d+)", 0) in CodeCache(path).patterns()
