"""Skills: folders of instructions (skills/<name>/SKILL.md) the agent reads on demand.

The system prompt lists every skill with its path and whether its requirements are
met; the agent opens a SKILL.md with read_file when a task calls for it. Skills marked
`always: true` have their whole body in the prompt. Bundled skills ship with nanobot;
a workspace skill of the same name overrides the bundled one, so users can adapt them.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nanobot.paths import bundled_dir

SKILL_FILE = "SKILL.md"


@dataclass
class Skill:
    name: str
    description: str
    path: Path  # the SKILL.md file
    source: str  # "bundled" or "workspace"
    always: bool = False
    missing: list[str] = field(default_factory=list)  # e.g. ["bin: gh", "env: GITHUB_TOKEN"]

    @property
    def available(self) -> bool:
        return not self.missing

    def body(self) -> str:
        """The instructions, without the front matter."""
        return split_front_matter(self.path.read_text(encoding="utf-8"))[1].strip()


class SkillError(ValueError):
    """A SKILL.md whose front matter cannot be used."""


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(front matter YAML or None, body). Front matter is the block between two '---' lines."""
    text = text.lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    return None, text


def parse_skill(path: Path, source: str) -> Skill:
    """Read one SKILL.md; raise SkillError when its front matter is unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"cannot read: {exc}") from exc
    raw, _ = split_front_matter(text)
    if raw is None:
        raise SkillError("no front matter (expected a '---' block with name and description)")
    try:
        meta = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise SkillError(f"invalid YAML front matter: {exc}".replace("\n", " ")) from exc
    if not isinstance(meta, dict):
        raise SkillError("front matter is not a mapping of keys to values")

    name = meta.get("name", path.parent.name)
    description = meta.get("description")
    if not isinstance(name, str) or not name.strip():
        raise SkillError("'name' must be a non-empty string")
    if not isinstance(description, str) or not description.strip():
        raise SkillError("'description' must be a non-empty string")

    extra = _nanobot_metadata(meta.get("metadata"))
    requires = meta.get("requires", extra.get("requires")) or {}
    always = meta.get("always", extra.get("always", False))
    if not isinstance(requires, dict):
        raise SkillError("'requires' must be a mapping like {bins: [gh], env: [GITHUB_TOKEN]}")
    if not isinstance(always, bool):
        raise SkillError("'always' must be true or false")
    return Skill(
        name=name.strip(),
        description=" ".join(description.split()),
        path=path,
        source=source,
        always=always,
        missing=_missing(requires),
    )


def _nanobot_metadata(metadata: Any) -> dict[str, Any]:
    """The `metadata: {"nanobot": {...}}` form used by nanobot's own skills (often a JSON string)."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return {}
    if not isinstance(metadata, dict):
        return {}
    for key in ("nanobot", "openclaw"):
        if isinstance(metadata.get(key), dict):
            return metadata[key]
    return {}


def _missing(requires: dict[str, Any]) -> list[str]:
    def names(key: str) -> list[str]:
        value = requires.get(key) or []
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SkillError(f"'requires.{key}' must be a list of names")
        return value

    missing = [f"bin: {b}" for b in names("bins") if shutil.which(b) is None]
    missing += [f"env: {e}" for e in names("env") if not os.environ.get(e)]
    return missing


@dataclass
class SkillSet:
    skills: list[Skill] = field(default_factory=list)  # sorted by name
    warnings: list[str] = field(default_factory=list)

    @classmethod
    def discover(cls, workspace: Path, bundled: Path | None = None) -> SkillSet:
        """Bundled skills, then workspace skills (overriding by name). Never raises."""
        found: dict[str, Skill] = {}
        warnings: list[str] = []
        roots = [(bundled if bundled is not None else bundled_dir("skills"), "bundled")]
        roots.append((Path(workspace) / "skills", "workspace"))
        for root, source in roots:
            for skill_file in _skill_files(root):
                try:
                    skill = parse_skill(skill_file, source)
                except SkillError as exc:
                    warnings.append(f"skipped skill {skill_file}: {exc}")
                    continue
                found[skill.name] = skill
        return cls(skills=sorted(found.values(), key=lambda s: s.name), warnings=warnings)

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def prompt_section(self) -> str:
        """The skills part of the system prompt; byte-identical while the files are unchanged."""
        if not self.skills:
            return ""
        lines = [
            "# Skills",
            "",
            "A skill is a SKILL.md file with instructions for one kind of task. When a task "
            "matches a skill, read its file with read_file and follow it. An unavailable skill "
            "needs the listed programs or environment variables first; tell the user.",
            "",
        ]
        for s in self.skills:
            status = "available" if s.available else "unavailable: missing " + ", ".join(s.missing)
            lines.append(f"- {s.name}: {s.description} ({s.path}; {status})")
        always = [s for s in self.skills if s.always and s.available]
        for s in always:
            lines += ["", f"## Skill: {s.name} (always active)", "", _safe_body(s)]
        return "\n".join(lines).rstrip() + "\n"


def _safe_body(skill: Skill) -> str:
    try:
        return skill.body()
    except (OSError, UnicodeDecodeError) as exc:
        return f"(could not read {skill.path}: {exc})"


def _skill_files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p / SKILL_FILE for p in root.iterdir() if (p / SKILL_FILE).is_file())
