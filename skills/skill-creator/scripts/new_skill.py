#!/usr/bin/env python3
"""Scaffold a nanobot skill: <workspace>/skills/<name>/SKILL.md with valid front matter.

Standalone on purpose (stdlib, plus PyYAML when present) so the agent can run it with
any python3 through exec.

    new_skill.py NAME --description "..." [--bins a,b] [--env X] [--always] [--workspace DIR]
    new_skill.py --check path/to/SKILL.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024


def default_workspace() -> Path:
    home = os.environ.get("NANOBOT_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".nanobot") / "workspace"


def split_list(value: str | None) -> list[str]:
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def render(name: str, description: str, bins: list[str], env: list[str], always: bool) -> str:
    # JSON strings and lists are valid YAML flow scalars, so quoting is always safe.
    lines = ["---", f"name: {name}", f"description: {json.dumps(description, ensure_ascii=False)}"]
    if bins or env:
        lines.append("requires:")
        if bins:
            lines.append(f"  bins: {json.dumps(bins)}")
        if env:
            lines.append(f"  env: {json.dumps(env)}")
    lines.append(f"always: {'true' if always else 'false'}")
    lines += [
        "---",
        "",
        f"# {name}",
        "",
        "## When to use",
        "",
        f"{description}",
        "",
        "## Steps",
        "",
        "1. TODO: the exact commands or tool calls that do the task.",
        "2. TODO: how to check the result and recover from common failures.",
        "",
    ]
    return "\n".join(lines)


def parse_front_matter(text: str) -> dict:
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("missing front matter: the file must start with a '---' line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ValueError("front matter is not closed by a '---' line") from None
    raw = "\n".join(lines[1:end])
    try:
        import yaml
    except ImportError:
        return _parse_simple(raw)
    try:
        meta = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise ValueError("front matter must be a mapping of keys to values")
    return meta


def _parse_simple(raw: str) -> dict:
    """A fallback for machines without PyYAML: enough for files this script writes."""
    meta: dict = {}
    parent: dict | None = None
    for line in raw.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.strip().partition(":")
        if not sep:
            raise ValueError(f"cannot parse front matter line: {line!r}")
        value = value.strip()
        target = parent if line.startswith((" ", "\t")) and parent is not None else meta
        if not value:
            parent = target[key] = {}
            continue
        if target is meta:
            parent = None
        if value in ("true", "false"):
            target[key] = value == "true"
        elif value.startswith(("[", '"')):
            target[key] = json.loads(value)
        else:
            target[key] = value
    return meta


def validate(meta: dict, folder_name: str | None = None) -> list[str]:
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > MAX_NAME:
        problems.append(f"name must be lowercase letters, digits and hyphens (max {MAX_NAME}): {name!r}")
    elif folder_name and name != folder_name:
        problems.append(f"name {name!r} differs from its folder {folder_name!r}")
    desc = meta.get("description")
    if not isinstance(desc, str) or not desc.strip():
        problems.append("description must be a non-empty string")
    elif len(desc) > MAX_DESCRIPTION:
        problems.append(f"description is longer than {MAX_DESCRIPTION} characters")
    requires = meta.get("requires", {}) or {}
    if not isinstance(requires, dict):
        problems.append("requires must be a mapping with 'bins' and/or 'env' lists")
    else:
        for key in ("bins", "env"):
            value = requires.get(key, []) or []
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                problems.append(f"requires.{key} must be a list of names")
        unknown = set(requires) - {"bins", "env"}
        if unknown:
            problems.append(f"unknown keys in requires: {', '.join(sorted(unknown))}")
    if not isinstance(meta.get("always", False), bool):
        problems.append("always must be true or false")
    return problems


def check(path: Path) -> int:
    try:
        meta = parse_front_matter(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1
    problems = validate(meta, path.parent.name)
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    if not problems:
        print(f"{path}: ok")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create a nanobot skill skeleton.")
    parser.add_argument("name", nargs="?", help="skill name: lowercase letters, digits, hyphens")
    parser.add_argument("--description", "-d", help="what the skill does and when to use it")
    parser.add_argument("--bins", help="comma-separated programs the skill needs")
    parser.add_argument("--env", help="comma-separated environment variables the skill needs")
    parser.add_argument("--always", action="store_true", help="put the whole body in every prompt")
    parser.add_argument("--workspace", "-w", type=Path, help="workspace folder (default: $NANOBOT_HOME/workspace)")
    parser.add_argument("--check", type=Path, metavar="SKILL_MD", help="only validate an existing SKILL.md")
    args = parser.parse_args(argv)

    if args.check:
        return check(args.check)
    if not args.name or not args.description:
        parser.error("NAME and --description are required (or use --check)")

    meta = {
        "name": args.name,
        "description": args.description,
        "requires": {"bins": split_list(args.bins), "env": split_list(args.env)},
        "always": args.always,
    }
    problems = validate(meta)
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2

    folder = (args.workspace or default_workspace()).expanduser() / "skills" / args.name
    target = folder / "SKILL.md"
    if target.exists():
        print(f"error: {target} already exists; edit it instead", file=sys.stderr)
        return 1
    folder.mkdir(parents=True, exist_ok=True)
    text = render(args.name, " ".join(args.description.split()), meta["requires"]["bins"],
                  meta["requires"]["env"], args.always)
    # Validate what was actually written, so a quoting bug can never ship a broken skill.
    written_problems = validate(parse_front_matter(text), args.name)
    if written_problems:
        for problem in written_problems:
            print(f"error: generated front matter is invalid: {problem}", file=sys.stderr)
        return 3
    target.write_text(text, encoding="utf-8")
    print(f"created {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
