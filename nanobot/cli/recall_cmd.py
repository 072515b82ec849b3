"""`nanobot history search` (ranked, over everything archived) and `nanobot memory tidy`.

Registered on the history and memory command groups (nanobot.cli.memory_groups). Only presentation
lives here: the index is nanobot.memory.recall_index, the tidy proposal nanobot.memory.tidy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from nanobot.cli.errors import reported
from nanobot.cli.memory_groups import (
    WorkspaceOpt,
    drop_stdout,
    err,
    fail,
    history_app,
    memory_app,
    workspace_dir,
)
from nanobot.cli.usage import Command, ConfigOpt

if TYPE_CHECKING:
    from rich.console import Console

    from nanobot.memory.recall_index import RecallIndex, Unit

_PROGRESS_BYTES = 16 << 20  # a refresh with more than this to read shows a progress bar (or a line)


def refresh_with_progress(index: RecallIndex) -> bool:
    """Bring the index up to date; a long rebuild shows a progress bar on stderr (a line when piped)."""
    pending = index.pending_bytes()
    if pending < _PROGRESS_BYTES:
        return index.refresh().complete
    if not sys.stderr.isatty():
        err(
            f"indexing {pending / 1e6:,.0f} MB of archived conversations (once; later searches read only what is new)…"
        )
        return index.refresh().complete
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("indexing archived conversations"),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=_stderr_console(),
        transient=True,
    ) as bar:
        task = bar.add_task("index", total=pending)
        return index.refresh(
            progress=lambda done, total: bar.update(task, completed=done, total=total)
        ).complete


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


@history_app.command("search", cls=Command)
def history_search(
    query: str = typer.Argument(
        ...,
        metavar="QUERY",
        help='Words to look for (any may match, best first); "quoted words" are a phrase.',
    ),
    session: str | None = typer.Option(
        None,
        "--session",
        help="Only this session (its key, with the conversations its /new archived), one "
        "archived conversation (KEY@STAMP), or memory/HISTORY.md.",
    ),
    since: str | None = typer.Option(
        None, "--since", help="Only from this date on (YYYY-MM-DD [HH:MM])."
    ),
    until: str | None = typer.Option(None, "--until", help="Only up to this date, inclusive."),
    role: str | None = typer.Option(
        None, "--role", help="Only user, assistant, tool, summary or archive."
    ),
    limit: int = typer.Option(10, "--limit", "-n", min=1, max=100, help="How many hits at most."),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="A JSON array of hits {ref, session, message, date, role, text, before, after}.",
    ),
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Ranked search over every session's messages and HISTORY.md. Exit 0 if anything matched, 1 if not."""
    from nanobot.memory import history as history_log
    from nanobot.memory.recall_index import fts_query
    from nanobot.tools.recall import ROLES, render_hits

    if fts_query(query) is None:
        raise fail(
            "the query has no word to look for",
            "Give one or more words, e.g. nanobot history search lisbon flight",
        )
    if role is not None and role not in ROLES:
        raise fail(f"--role must be one of {', '.join(ROLES)}")
    try:
        since_dt = history_log.parse_when(since) if since else None
        until_dt = history_log.parse_when(until, end_of_day=True) if until else None
    except ValueError as exc:
        raise fail(str(exc), "Dates look like 2026-03-01 or 2026-03-01 14:30.") from None
    with reported():
        from nanobot.paths import memory_dir

        hits = history_log.search(
            history_log.Ranked(
                query,
                limit=limit,
                since=since_dt,
                until=until_dt,
                session=session,
                role=role,
                refresh=refresh_with_progress,
            ),
            history=memory_dir(workspace_dir(workspace, config)) / "HISTORY.md",
        ).hits
        if not hits:
            err(f"nothing archived matches {query!r}")
            raise typer.Exit(1)

        def unit(u: Unit | None) -> dict[str, Any] | None:
            return u.to_json() if u is not None else None

        if json_out:
            text = json.dumps(
                [
                    {
                        **h.unit.to_json(),
                        "score": round(-h.score, 4),
                        "before": unit(h.before),
                        "after": unit(h.after),
                    }
                    for h in hits
                ],
                ensure_ascii=False,
                indent=1,
            )
        else:
            text = render_hits(hits, query, budget=1 << 30)
    try:  # a reader that stops early (`| head`) ends the writing, not the status: hits were found
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        drop_stdout()
    raise typer.Exit(0)


@memory_app.command("tidy", cls=Command)
def memory_tidy(
    yes: bool = typer.Option(False, "--yes", "-y", help="Apply the proposal without asking."),
    model: str | None = typer.Option(
        None, "--model", "-m", help="Model to ask (default: from config)."
    ),
    workspace: Path | None = WorkspaceOpt,
    config: Path | None = ConfigOpt,
) -> None:
    """Ask the model for a cleaned MEMORY.md (duplicates merged, relative dates made absolute, contradicted
    facts corrected), show the diff, and save it (as a new version) only when you say yes."""
    import asyncio

    from nanobot.memory.tidy import propose_tidy, unified_diff

    with reported():
        from nanobot.app import metered_provider
        from nanobot.cli.config_load import load as load_config
        from nanobot.stores import memory_store

        cfg = load_config(config)
        store = memory_store(
            workspace_dir(workspace) if workspace is not None else cfg.workspace_path()
        )
        before = store.read_memory()
        if not before.strip():
            err(f"nothing to tidy: {store.memory_file} is empty or missing")
            raise typer.Exit(0)
        # metered like a chat turn: recorded as source memory-tidy, refused past usage.limits.dailyTokens
        provider = metered_provider(cfg, "memory:tidy", "memory-tidy", model)

        async def ask() -> str:
            try:
                return await propose_tidy(
                    provider, store, max_tokens=cfg.agents.defaults.max_tokens
                )
            finally:
                await provider.aclose()
                provider.meter.close()

        after = asyncio.run(ask())
        diff = unified_diff(before, after)
        if not diff:
            print("MEMORY.md is already tidy: the model proposed no change")
            raise typer.Exit(0)
        sys.stdout.write(diff if diff.endswith("\n") else diff + "\n")
        sys.stdout.flush()
        if not yes:
            if not sys.stdin.isatty():
                err("not applied: run `nanobot memory tidy --yes` to apply it without asking")
                raise typer.Exit(1)
            if not typer.confirm("Apply this change to MEMORY.md?", default=False):
                err("not applied; MEMORY.md unchanged")
                raise typer.Exit(1)
        receipt = store.write_memory(
            after, reason="tidied by the model at the user's request", base=before
        )
        print(
            "MEMORY.md tidied"
            + (
                "; the previous text is kept as a version (`nanobot memory versions`)"
                if receipt.version
                else ""
            )
        )
