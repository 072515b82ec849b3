"""Skills: folders of instructions (skills/<name>/SKILL.md) the agent reads on demand.

The system prompt lists every skill with its path and whether its requirements are
met; the agent opens a SKILL.md with read_file when a task calls for it. Skills marked
`always: true` have their whole body in the prompt. Bundled skills ship with nanobot;
a workspace skill of the same name overrides the bundled one, so users can adapt them.

Workspace skills can be written by anyone (a shared folder, a cloned repo, the model), so:
- what they say reaches the prompt only fenced as untrusted data (nanobot.untrusted);
- one that asks for `always` or shadows a bundled skill is held (not in the prompt at all)
  until the user approves it once (`nanobot skills approve NAME`); the approval records a
  hash of the skill's folder, and any change to it holds the skill again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nanobot.errors import SkillError
from nanobot.fsio import atomic_write
from nanobot.paths import PRIVATE_FILE_MODE, bundled_dir, nanobot_home
from nanobot.text_cache import TextCache
from nanobot.untrusted import fence

SKILL_FILE = "SKILL.md"


@dataclass
class Skill:
    name: str
    description: str
    path: Path  # the SKILL.md file
    source: str  # "bundled" or "workspace"
    always: bool = False
    missing: list[str] = field(default_factory=list)  # e.g. ["bin: gh", "env: GITHUB_TOKEN"]
    gate: str = (
        ""  # why it needs the user's approval ("asks to be always on", "shadows a bundled skill")
    )
    digest: str = ""  # hash of its folder, when gated
    approved_digest: str | None = None  # what the user approved, if ever

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def active(self) -> bool:
        """In the prompt: not gated, or approved exactly as it is now."""
        return not self.gate or self.approved_digest == self.digest

    @property
    def state(self) -> str:
        if self.active:
            return "approved" if self.gate else "active"
        return "changed since approval" if self.approved_digest else "needs approval"

    def body(self) -> str:
        """The instructions, without the front matter."""
        return split_front_matter(self.path.read_text(encoding="utf-8"))[1].strip()


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


def front_matter_cache() -> TextCache:
    """Parsed front matter by the YAML text's SHA-256, so a start whose skills did not change
    imports no YAML parser (`~/.nanobot/cache/front-matter.json`)."""
    return TextCache("front-matter", keep=256, valid=lambda v: isinstance(v, dict))


def parse_skill(path: Path, source: str, cache: TextCache | None = None) -> Skill:
    """Read one SKILL.md; raise SkillError when its front matter is unusable. With `cache`, the
    front matter is looked up there first and remembered there (the caller saves it)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"cannot read: {exc}") from exc
    raw, _ = split_front_matter(text)
    if raw is None:
        raise SkillError("no front matter (expected a '---' block with name and description)")
    meta = cache.get(raw) if cache is not None else None
    if meta is None:
        meta = _load_yaml(raw)
        if cache is not None and isinstance(meta, dict) and _same_as_json(meta):
            cache.remember(raw, meta)
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


@functools.lru_cache(maxsize=256)
def _load_yaml(raw: str) -> Any:
    """The parsed front matter, remembered in this process by its text too: a process that opens
    assistants over and over (`nanobot serve`, a test run) parses each text once. Callers only
    read the value. PyYAML's libyaml parser when it has one (9x faster, the same safe loader)."""
    import yaml

    try:
        return yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise SkillError(f"invalid YAML front matter: {exc}".replace("\n", " ")) from exc


def _same_as_json(meta: dict[str, Any]) -> bool:
    """Whether the parsed YAML comes back unchanged from JSON (not so for dates, or keys that are
    not strings): only such front matter is cached."""
    try:
        return bool(json.loads(json.dumps(meta)) == meta)
    except (TypeError, ValueError):
        return False


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


def skill_digest(skill_file: Path) -> str:
    """sha256 over every file in the skill's folder (names and bytes), so a changed script counts too."""
    folder = skill_file.parent
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        digest.update(str(path.relative_to(folder)).encode("utf-8", "surrogateescape") + b"\0")
        try:
            digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        except OSError:
            digest.update(b"(unreadable)")
        digest.update(b"\0")
    return digest.hexdigest()


class SkillApprovals:
    """The user's approvals of gated workspace skills, kept in the nanobot home (out of the
    workspace, where the model could write its own approval)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else nanobot_home() / "skill_approvals.json"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        self.records: dict[str, dict[str, str]] = data if isinstance(data, dict) else {}

    def digest_for(self, skill: Skill) -> str | None:
        record = self.records.get(str(skill.path.resolve()))
        return record.get("sha256") if isinstance(record, dict) else None

    def approve(self, skill: Skill) -> None:
        self.records[str(skill.path.resolve())] = {
            "name": skill.name,
            "sha256": skill.digest or skill_digest(skill.path),
            "approved_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        atomic_write(self.path, json.dumps(self.records, indent=2) + "\n", mode=PRIVATE_FILE_MODE)
        skill.approved_digest = self.records[str(skill.path.resolve())]["sha256"]


@dataclass
class SkillSet:
    skills: list[Skill] = field(default_factory=list)  # the active ones, sorted by name
    warnings: list[str] = field(default_factory=list)
    held: list[Skill] = field(
        default_factory=list
    )  # workspace skills waiting for the user's approval

    @classmethod
    def discover(
        cls, workspace: Path, bundled: Path | None = None, approvals: SkillApprovals | None = None
    ) -> SkillSet:
        """Bundled skills, then workspace skills (overriding by name once approved). Never raises."""
        approvals = approvals if approvals is not None else SkillApprovals()
        found: dict[str, Skill] = {}
        held: list[Skill] = []
        warnings: list[str] = []
        roots = [(bundled if bundled is not None else bundled_dir("skills"), "bundled")]
        roots.append((Path(workspace) / "skills", "workspace"))
        cache = front_matter_cache()
        for root, source in roots:
            for skill_file in _skill_files(root):
                try:
                    skill = parse_skill(skill_file, source, cache)
                except SkillError as exc:
                    warnings.append(f"skipped skill {skill_file}: {exc}")
                    continue
                if source == "workspace":
                    _gate(skill, found.get(skill.name), approvals)
                    if not skill.active:
                        held.append(skill)
                        continue
                found[skill.name] = skill
        cache.save()
        return cls(
            skills=sorted(found.values(), key=lambda s: s.name),
            warnings=warnings,
            held=sorted(held, key=lambda s: s.name),
        )

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)

    def listed(self) -> list[Skill]:
        """Every skill for `nanobot skills list`: the active ones and the held ones."""
        return sorted(self.skills + self.held, key=lambda s: (s.name, s.source))

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
        bundled = [s for s in self.skills if s.source != "workspace"]
        workspace = [s for s in self.skills if s.source == "workspace"]
        lines += [_entry(s) for s in bundled]
        if workspace:
            lines += [
                "",
                fence(
                    "\n".join(_entry(s) for s in workspace),
                    "workspace skills (skills/ in the workspace)",
                ),
            ]
        always = [s for s in self.skills if s.always and s.available]
        for s in always:
            body = _safe_body(s)
            if s.source == "workspace":
                body = fence(body, f"workspace skill {s.name} ({s.path}), approved by the user")
            lines += ["", f"## Skill: {s.name} (always active)", "", body]
        return "\n".join(lines).rstrip() + "\n"


def _entry(s: Skill) -> str:
    status = "available" if s.available else "unavailable: missing " + ", ".join(s.missing)
    return f"- {s.name}: {s.description} ({s.path}; {status})"


def _gate(skill: Skill, bundled: Skill | None, approvals: SkillApprovals) -> None:
    """Mark a workspace skill that needs the user's approval, and what (if anything) they approved."""
    reasons = []
    if skill.always:
        reasons.append("asks to be always on")
    if bundled is not None and bundled.source == "bundled":
        reasons.append(f"shadows the bundled skill {bundled.name}")
    if not reasons:
        return
    skill.gate = " and ".join(reasons)
    skill.digest = skill_digest(skill.path)
    skill.approved_digest = approvals.digest_for(skill)


def _safe_body(skill: Skill) -> str:
    try:
        return skill.body()
    except (OSError, UnicodeDecodeError) as exc:
        return f"(could not read {skill.path}: {exc})"


def _skill_files(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p / SKILL_FILE for p in root.iterdir() if (p / SKILL_FILE).is_file())
