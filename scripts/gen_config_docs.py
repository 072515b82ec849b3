"""Write the key table of docs/configuration.md from the config model's one-line comments.

Every field of the dataclasses in nanobot/config.py carries a comment where it is declared; this
script reads those comments (with the source's own tokens, so nothing is guessed from the text),
the defaults and the types, and puts one row per key between the markers of the page:

    python scripts/gen_config_docs.py           # rewrite the table
    python scripts/gen_config_docs.py --check   # exit 1 when the page is not current (a test runs it)

The rest of the page is written by hand. A field without a comment is an error: add one.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import io
import json
import sys
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nanobot import config  # noqa: E402

PAGE = ROOT / "docs" / "configuration.md"
SOURCE = ROOT / "nanobot" / "config.py"
BEGIN = "<!-- BEGIN GENERATED: python scripts/gen_config_docs.py -->"
END = "<!-- END GENERATED -->"


def field_comments(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) -> the comment that ends the field's declaration."""
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    found: dict[tuple[str, str], str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    text = comments.get(stmt.end_lineno or stmt.lineno)
                    if text:
                        found[(node.name, stmt.target.id)] = text
    return found


def _kind(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_kind(arg) for arg in typing.get_args(tp) if arg is not type(None))
    if origin is list:
        return "list"
    if origin is dict or dataclasses.is_dataclass(tp):
        return "object"
    return {str: "string", int: "integer", float: "number", bool: "true/false"}.get(tp, "any")


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return ""
    return f"`{json.dumps(value)}`"


def rows(
    cls: type, prefix: str, comments: dict[tuple[str, str], str], missing: list[str]
) -> list[tuple[str, str, str, str]]:
    """(key, type, default, meaning) for every field under `cls`, depth first, in declared order."""
    out: list[tuple[str, str, str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = f"{prefix}{config.to_camel(f.name)}"
        tp = hints[f.name]
        comment = comments.get((cls.__name__, f.name), "")
        if f.metadata.get("legacy"):
            comment = f"{comment} (read for nanobot's sake)" if comment else comment
        if dataclasses.is_dataclass(tp):
            if comment:
                out.append((f"`{key}`", "object", "", comment))
            out += rows(typing.cast(type, tp), key + ".", comments, missing)
            continue
        value_tp = typing.get_args(tp)[1] if typing.get_origin(tp) is dict else None
        if not comment:
            missing.append(f"{cls.__name__}.{f.name}")
        out.append((f"`{key}`", _kind(tp), _default(f), comment))
        if value_tp is not None and dataclasses.is_dataclass(value_tp):
            out += rows(typing.cast(type, value_tp), key + ".<name>.", comments, missing)
    return out


def table() -> tuple[str, list[str]]:
    comments = field_comments(SOURCE.read_text(encoding="utf-8"))
    missing: list[str] = []
    found = rows(config.Config, "", comments, missing)
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += [
        f"| {key} | {kind} | {default} | {meaning.replace('|', '&#124;')} |"
        for key, kind, default, meaning in found
    ]
    return "\n".join(lines), missing


def render(page: str, body: str) -> str:
    head, sep, rest = page.partition(BEGIN)
    if not sep or END not in rest:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} and {END!r} are missing")
    return f"{head}{BEGIN}\n{body}\n{END}{rest.split(END, 1)[1]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page is not current")
    args = parser.parse_args(argv)
    body, missing = table()
    if missing:
        print(
            "fields without a one-line comment in nanobot/config.py: " + ", ".join(missing),
            file=sys.stderr,
        )
        return 1
    page = PAGE.read_text(encoding="utf-8")
    new = render(page, body)
    if args.check:
        if new != page:
            print(f"{PAGE} is not current: run python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    if new != page:
        PAGE.write_text(new, encoding="utf-8")
        print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
