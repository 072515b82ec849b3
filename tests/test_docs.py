"""The docs keep their promises about themselves: every relative link leads somewhere, every
`nanobot ...` command they show exists (its `--help` runs), and the configuration reference is
what scripts/gen_config_docs.py makes from the config model today."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(nanobot [^`]+)`")
# `nanobot` as a command word: at the start, or after a space, a pipe, `;`, `&&` or `(`
IN_BLOCK = re.compile(r"(?:^|[\s|;&(])(nanobot(?: [^\n#]*)?)", re.M)
WORD = re.compile(r"[a-z][a-z-]*")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def relative_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_docs_exist_and_the_readme_stays_short():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert len(PAGES) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page):
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\nSee [this](missing.md) and [that](#title) and [far](#nowhere).\n")
    assert relative_links(page) == ["missing.md", "#title", "#nowhere"]
    assert anchors(page) == {"title"}


def shown_commands() -> set[tuple[str, ...]]:
    """The subcommand words of every `nanobot ...` shown in the docs (up to the first argument)."""
    found: set[tuple[str, ...]] = set()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        lines = [m for block in FENCE.findall(text) for m in IN_BLOCK.findall(block)]
        lines += INLINE.findall(FENCE.sub("", text))
        for line in lines:
            words = []
            for token in line.split()[1:]:
                if not WORD.fullmatch(token):
                    break
                words.append(token)
            found.add(tuple(words))
    return found


def test_the_docs_show_the_commands_a_user_needs():
    shown = shown_commands()
    for command in [
        ("agent",),
        ("onboard",),
        ("status",),
        ("doctor",),
        ("session", "list"),
        ("memory", "show"),
        ("history", "grep"),
        ("cron", "add"),
        ("serve",),
    ]:
        assert command in shown


@pytest.mark.parametrize("words", sorted(shown_commands()), ids=" ".join)
def test_every_command_shown_in_the_docs_exists(nanobot_run, words):
    result = nanobot_run(*words, "--help")
    assert result.returncode == 0, f"nanobot {' '.join(words)} --help: {result.stderr}"
    assert "Usage:" in result.stdout


def test_a_command_that_does_not_exist_fails_its_help(nanobot_run):
    assert nanobot_run("session", "frobnicate", "--help").returncode != 0
    assert nanobot_run("frobnicate", "--help").returncode != 0


def test_the_configuration_reference_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert "| `agents.defaults.contextWindowTokens` | integer | `65536` |" in page


def test_the_configuration_check_notices_a_stale_page(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gen_config_docs
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    stale = tmp_path / "configuration.md"
    stale.write_text(
        f"# Configuration\n\n{gen_config_docs.BEGIN}\n| old |\n{gen_config_docs.END}\n"
    )
    monkeypatch.setattr(gen_config_docs, "PAGE", stale)
    assert gen_config_docs.main(["--check"]) == 1
    assert gen_config_docs.main([]) == 0
    assert "`agents.defaults.model`" in stale.read_text()
    assert gen_config_docs.main(["--check"]) == 0
