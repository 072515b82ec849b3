"""`nanobot memory ...` and `nanobot history ...`: look at, restore and search what is remembered.

Only presentation lives here; the rules are in nanobot.memory.store and nanobot.memory.history.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from nanobot.cli.errors import reported
from nanobot.cli.memory_groups import (
    WorkspaceOpt,
    drop_stdout,
    err,
    fail,
    history_app,
    load_config_once,
    memory_app,
    workspace_dir,
)
from nanobot.cli.usage import Command, ConfigOpt
from nanobot.errors import NanobotError

if TYPE_CHECKING:
    from nanobot.memory.protocols import MemoryAdmin


def _memory_share(tokens: int, window: int | None, config: Path | None):
    """MEMORY.md's share of `window`, else of the configured window, else of the default (no usable config)."""
    from nanobot.agent.budget import memory_share

    if window is None:
        cfg = load_config_once(config)
        window = cfg.agents.defaults.context_window_tokens if cfg is not None else None
    return memory_share(tokens, window)


def _stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def _store(workspace: Path | None, config: Path | None) -> "MemoryAdmin":
    from nanobot.stores import memory_store

    return memory_store(workspace_dir(workspace, config))


def _ago(when: datetime) -> str:
    seconds = (datetime.now(when.tzinfo) - when).total_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''} ago"
    return "just now"


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KB"


# ---- memory ------------------------------------------------------------------------------


@memory_app.command("show")
def memory_show(
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
    raw: bool = typer.Option(False, "--raw", help="Print the file as is (the default when piped)."),
    window: int | None = typer.Option(
        None, "--window", min=1, help="Context window in tokens (default: from config, else 65536)."
    ),
) -> None:
    """Print MEMORY.md, then its size in tokens and its share of the context window (on stderr)."""
    with reported():
        store = _store(workspace, config)
        info = store.memory_info()
        if not info.exists:
            err(f"nothing remembered yet: {info.path} does not exist")
            return
        text = store.read_memory()
        for warning in store.warnings:
            err(f"warning: {warning}")
        if _stdout_is_tty() and not raw:
            from rich.console import Console
            from rich.markdown import Markdown

            from nanobot.cli.approval_prompt import visible

            Console().print(
                Markdown(visible(text))
            )  # a damaged file's ESC, BEL, NUL shown, never run
        else:
            sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
            sys.stdout.flush()
        judged = _memory_share(info.tokens, window, config)
        approx = "" if info.exact else "~"
        changed = (
            f"{info.modified:%Y-%m-%d %H:%M} ({_ago(info.modified)})"
            if info.modified
            else "unknown"
        )
        err(
            f"{info.path}: {approx}{info.tokens:,} tokens, {_size(info.bytes)}, "
            f"{judged.share:.1%} of a {judged.window:,}-token context window (in every prompt)"
        )
        err(f"last changed {changed}; {info.versions} saved version(s) (`nanobot memory versions`)")


@memory_app.command("versions")
def memory_versions(workspace: Path | None = WorkspaceOpt, config: Path | None = ConfigOpt) -> None:
    """List saved versions of MEMORY.md, newest first (1 = the most recently replaced)."""
    with reported():
        store = _store(workspace, config)
        versions = store.versions()
        if not versions:
            err(f"no saved versions in {store.versions_dir}")
            return
        for v in versions:
            local = v.saved_at.astimezone()
            reason = f"  replaced by: {v.reason}" if v.reason else ""
            print(f"{v.number:>3}  {local:%Y-%m-%d %H:%M:%S}  {_size(v.bytes):>10}{reason}")
        err("restore one with `nanobot memory restore N` (the current file is kept as a version)")


@memory_app.command("restore", cls=Command)
def memory_restore(
    n: int = typer.Argument(
        ..., metavar="N", help="Version number from `nanobot memory versions`."
    ),
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Make version N the current MEMORY.md; the current file is saved as a version first."""
    with reported():
        receipt = _store(workspace, config).restore(n)
        if not receipt.changed:
            print(f"version {n} is identical to the current MEMORY.md; nothing changed")
        else:
            print(
                f"restored version {n}; the previous MEMORY.md is now version 1 "
                f"(undo with `nanobot memory restore 1`)"
            )


@memory_app.command("check")
def memory_check(
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
    window: int | None = typer.Option(
        None, "--window", min=1, help="Context window in tokens (default: from config, else 65536)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="A JSON array of {severity, code, message, fix}."
    ),
) -> None:
    """Look for damaged, shrunken or duplicated memory and say how to fix each. Exit 0 clean, 1 problems."""
    from nanobot.memory.check import check_memory

    with reported():
        findings = check_memory(
            _store(workspace, config), share_of=lambda tokens: _memory_share(tokens, window, config)
        )
    problems = [f for f in findings if f.severity == "problem"]
    if json_out:
        print(json.dumps([f.to_json() for f in findings], ensure_ascii=False, indent=1))
    else:
        from nanobot.cli.approval_prompt import visible

        for f in findings:
            print(f"{'problem' if f.severity == 'problem' else 'ok'}: {visible(f.message)}")
            if f.fix:
                print(f"  fix: {visible(f.fix)}")
        print(f"{len(problems)} problem(s) found" if problems else "memory looks healthy")
    raise typer.Exit(1 if problems else 0)


def _editor_command() -> list[str]:
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    return shlex.split(editor)


@memory_app.command("edit")
def memory_edit(workspace: Path | None = WorkspaceOpt, config: Path | None = ConfigOpt) -> None:
    """Edit MEMORY.md in $VISUAL / $EDITOR (else vi); saved atomically, the old text kept as a version."""
    with reported():
        store = _store(workspace, config)
        before = store.read_memory()
        # A private folder: MEMORY.md may hold personal facts.
        tmpdir = Path(tempfile.mkdtemp(prefix="nanobot-memory-"))
        copy = tmpdir / "MEMORY.md"
        copy.write_text(before, encoding="utf-8")
        try:
            result = subprocess.run([*_editor_command(), str(copy)])
        except (FileNotFoundError, ValueError) as exc:
            raise fail(
                f"cannot start the editor: {exc}", "Set $EDITOR (e.g. `export EDITOR=nano`)."
            ) from None
        if result.returncode != 0:
            err(
                f"editor exited with status {result.returncode}; MEMORY.md unchanged "
                f"(your edit is kept at {copy})"
            )
            raise typer.Exit(1)
        after = copy.read_text(encoding="utf-8")
        if after == before:
            print("no changes")
            _cleanup(tmpdir)
            return
        try:
            receipt = store.write_memory(after, reason="edited by the user", base=before)
        except NanobotError:
            err(f"your edit is kept at {copy}")
            raise
        _cleanup(tmpdir)
        print("MEMORY.md saved" + ("; the previous text is version 1" if receipt.version else ""))
        if receipt.masked:
            err(
                "note: text that looked like a secret (API key, token, password) was replaced by [REDACTED]"
            )
        if receipt.concurrent_change:
            err(
                "note: MEMORY.md changed while you were editing (consolidation?); your changes were merged "
                "on top of the newer text — the text before the merge is version 1 (`nanobot memory versions`)"
            )
        if receipt.conflicts:
            err(
                f"note: {len(receipt.conflicts)} of your line(s) conflicted with that change and are under "
                '"Held back update" at the end of MEMORY.md; `nanobot memory edit` to sort them out'
            )


def _cleanup(tmpdir: Path) -> None:
    for p in tmpdir.iterdir():
        p.unlink(missing_ok=True)
    tmpdir.rmdir()


# ---- history -----------------------------------------------------------------------------


def _print_entry(entry, rx: re.Pattern[str] | None, console) -> None:
    if console is None:
        sys.stdout.write(entry.text + "\n\n")
        return
    from rich.text import Text

    text = Text(entry.text)
    m = re.match(r"\[[^\]]*\]", entry.text)
    if m:
        text.stylize("cyan", 0, m.end())
    if rx is not None:
        for hit in rx.finditer(entry.text):
            if hit.end() > hit.start():
                text.stylize("bold red", hit.start(), hit.end())
    console.print(text)
    console.print()


def _history_path(
    workspace: Path | None, config: Path | None, *, quiet: bool = False
) -> Path | None:
    """HISTORY.md, or None (said on stderr) when nothing was archived yet: an empty history, not an error."""
    from nanobot.paths import memory_dir

    path = memory_dir(workspace_dir(workspace, config)) / "HISTORY.md"
    if not path.is_file():
        if quiet:
            return None
        err(
            f"no history yet: {path} does not exist (it is written when older messages are consolidated)"
        )
        return None
    return path


@history_app.command("grep", cls=Command)
def history_grep(
    pattern: str = typer.Argument(
        ...,
        metavar="PATTERN",
        help="Regular expression (Python syntax; ^ and $ match at each line).",
    ),
    ignore_case: bool = typer.Option(False, "--ignore-case", "-i", help="Ignore case."),
    since: str | None = typer.Option(
        None, "--since", help="Only entries from this date on (YYYY-MM-DD [HH:MM])."
    ),
    until: str | None = typer.Option(
        None, "--until", help="Only entries up to this date, inclusive."
    ),
    last: int | None = typer.Option(
        None,
        "--last",
        "-n",
        min=1,
        help="Only the last N matching entries (and N archived messages).",
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="A JSON array of {stamp, line, text}; an archived conversation's message has its "
        "ref instead of a line.",
    ),
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Print whole dated HISTORY.md entries that match, then the matching messages of the
    conversations /new archived. Exit 0 if any matched, 1 if none, 2 on error."""
    from nanobot.memory import history as history_log

    try:
        rx = history_log.compile_pattern(pattern, ignore_case=ignore_case)
    except re.error as exc:
        raise fail(
            f"bad regular expression {pattern!r}: {exc}",
            "Patterns are Python regular expressions; escape special characters with \\.",
        ) from None
    try:
        since_dt = history_log.parse_when(since) if since else None
        until_dt = history_log.parse_when(until, end_of_day=True) if until else None
    except ValueError as exc:
        raise fail(str(exc), "Dates look like 2026-03-01 or 2026-03-01 14:30.") from None
    archived = _archived_matches(workspace, config, rx, since_dt, until_dt, last)
    path = _history_path(workspace, config, quiet=bool(archived))
    found = history_log.search(
        history_log.Exact(
            pattern, ignore_case=ignore_case, since=since_dt, until=until_dt, last=last
        ),
        history=path,
    )
    if not json_out and not _stdout_is_tty():
        pieces = found.printed()
        if (
            pieces is not None
        ):  # ripgrep answered: the same bytes the entry-by-entry path would print
            count = _write_pieces(pieces) + _emit(iter(archived), rx, False)
            raise typer.Exit(0 if count else 1)
    count = _emit(itertools.chain(found.entries(), archived), rx, json_out)
    raise typer.Exit(0 if count else 1)


def _archived_matches(workspace, config, rx, since, until, last) -> list:
    """The matching messages of the conversations /new archived, oldest conversation first (the
    last N when asked); a store that cannot be read is said on stderr and skipped."""
    from nanobot.memory import history as history_log
    from nanobot.stores import session_store

    found = []
    try:
        store = session_store(workspace_dir(workspace, config))
        for info in reversed(store.archives()):
            messages = store.load(info.key).messages
            found.extend(
                history_log.grep_conversation(info.key, messages, rx, since=since, until=until)
            )
    except NanobotError as exc:
        err(f"the archived conversations were not searched: {exc.message}")
    return found[-last:] if last else found


@history_app.command("tail")
def history_tail(
    n: int = typer.Option(
        5, "--last", "-n", "--lines", min=1, help="How many entries (the last N)."
    ),
    json_out: bool = typer.Option(False, "--json", help="A JSON array of {stamp, line, text}."),
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Print the last N entries of HISTORY.md."""
    from nanobot.memory import history as history_log

    path = _history_path(workspace, config)
    _emit(iter(history_log.tail(path, n)) if path is not None else iter(()), None, json_out)


def _write_pieces(pieces) -> int:
    """Write grep_fast_pieces to stdout as they come; returns how many entries. A reader that stops
    early (`| head`) ends the writing, not the count: the exit status still says that some matched."""
    out = sys.stdout.buffer
    count = 0
    try:
        for chunk, n in pieces:
            count += n
            out.write(chunk)
        out.flush()
    except BrokenPipeError:
        drop_stdout()
    return count


def _emit(entries, rx: re.Pattern[str] | None, json_out: bool) -> int:
    """Stream entries to stdout (a JSON array when asked); returns how many."""
    count = 0
    if json_out:
        try:
            sys.stdout.write("[")
            for entry in entries:
                sys.stdout.write(
                    ("," if count else "") + "\n" + json.dumps(entry.to_json(), ensure_ascii=False)
                )
                count += 1
            sys.stdout.write("\n]\n" if count else "]\n")
            sys.stdout.flush()
        except BrokenPipeError:  # as in _write_pieces
            drop_stdout()
        return count
    console = None
    if _stdout_is_tty():
        from rich.console import Console

        console = Console(highlight=False)
    try:
        for entry in entries:
            count += 1
            _print_entry(entry, rx, console)
        sys.stdout.flush()
    except BrokenPipeError:  # as in _write_pieces
        drop_stdout()
    return count


# `history search` and `memory tidy` live in their own module; importing it registers them on the groups.
from nanobot.cli import recall_cmd as _recall_cmd  # noqa: E402,F401

if __name__ == "__main__":
    # `python -m nanobot.cli.memory_cmd history grep ...` runs these commands without the main CLI.
    _root = typer.Typer(add_completion=False)
    _root.add_typer(memory_app, name="memory")
    _root.add_typer(history_app, name="history")
    _root()
