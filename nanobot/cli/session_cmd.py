"""`nanobot session ...`: list, read and repair the saved conversations.

Only presentation lives here; the rules are in nanobot.session.store and nanobot.session.validity.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.rule import Rule
from rich.table import Table

from nanobot import paths
from nanobot.cli.consoles import rule_width, stderr_console, stdout_console
from nanobot.cli.errors import print_warning, report
from nanobot.cli.usage import Command, ConfigOpt
from nanobot.errors import NanobotError
from nanobot.messages import NOTE_KEY, text_of
from nanobot.paths import archived_at, split_archived_name
from nanobot.secrets_mask import mask_message, mask_value
from nanobot.session.protocols import SessionAdmin
from nanobot.session.working_state import WorkingState, items_phrase

session_app = typer.Typer(
    help="Saved conversations: list, show and repair them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

# Long tool output is shortened on screen only; `--json` prints it whole.
SHOWN_TOOL_RESULT_CHARS = 400

KeyArg = typer.Argument(
    ...,
    metavar="KEY",
    help="The session key, e.g. cli:direct, or an archived conversation's name, "
    "e.g. cli:direct@20261204T021507Z (see `nanobot session list`).",
)


def _out() -> Console:
    return stdout_console()


def _err() -> Console:
    return stderr_console()


def _fail(exc: NanobotError) -> typer.Exit:
    return typer.Exit(report(exc))


def _warn(warnings: list[str]) -> None:
    for warning in warnings:
        print_warning(warning)


def _store(workspace: Path | None) -> SessionAdmin:
    """The session store, with the workspace's HISTORY.md as proof of a damaged pointer (as the chat has)."""
    from nanobot.stores import session_store

    return session_store(workspace)


def _workspace(config: Path | None) -> Path | None:
    """The configured workspace, or None (with a warning) when the config cannot be read."""
    from nanobot.cli.config_load import load as load_config

    try:
        return load_config(config).workspace_path()
    except NanobotError as exc:
        _warn(
            [
                f"the config was not read, so HISTORY.md cannot vouch for a damaged pointer: {exc.message}"
            ]
        )
        return None


def _import_from_nanobot(config: Path | None, *, quiet_when_none: bool) -> Path | None:
    """Bring in nanobot's sessions and history for the configured workspace (session/importer.py);
    returns the workspace (None when the config cannot be read)."""
    from nanobot.cli.config_load import load as load_config
    from nanobot.session.importer import import_all

    try:
        workspace = load_config(config).workspace_path()
    except NanobotError as exc:
        if not quiet_when_none:
            raise _fail(exc) from None
        _warn(
            [f"nanobot's sessions were not looked for: {exc.message}"]
        )  # listing ours still works
        return None
    result = import_all(workspace)
    for receipt in result.imported:
        _out().print(f"imported from nanobot: {escape(receipt.describe())}")
    for note in result.kept:
        _out().print(f"[dim]not imported, ours kept: {escape(note)}[/dim]")
    if not result.imported and not quiet_when_none:
        _out().print(f"Nothing new to import from nanobot for workspace {escape(str(workspace))}.")
    if result.imported:
        _out().print(
            f"[dim]originals left untouched; receipt: {escape(str(paths.nanobot_home() / 'imports.jsonl'))}[/dim]"
        )
    return workspace


@session_app.command("import")
def import_sessions(config: Path | None = ConfigOpt) -> None:
    """Import nanobot 0.1.x / 0.3.x sessions and 0.3.x history.jsonl for the workspace (originals untouched)."""
    _import_from_nanobot(config, quiet_when_none=False)


# `session list` shows this many archived conversations (the newest); --archived shows them all
SHOWN_ARCHIVES = 5


@session_app.command("list")
def list_sessions(
    config: Path | None = ConfigOpt,
    archived: bool = typer.Option(
        False, "--archived", help="List every conversation /new archived (default: the newest 5)."
    ),
) -> None:
    """Every saved session: key, message count, consolidation pointer, last update; then the
    conversations /new archived."""
    store = _store(_import_from_nanobot(config, quiet_when_none=True))
    infos = store.infos()
    archives = store.archives()
    if not infos and not archives:
        _out().print("No saved sessions yet.")
        return
    if infos:
        _print_live(infos)
    if archives:
        _print_archives(archives, everything=archived)


def _print_archives(archives: Sequence[Any], *, everything: bool) -> None:
    """The conversations /new kept, newest first, apart from the live sessions."""
    shown = archives if everything else archives[:SHOWN_ARCHIVES]
    table = Table("archived conversation", "messages", "archived at")
    table.columns[0].overflow = "fold"  # a name is typed back whole: never cut with an ellipsis
    for info in shown:
        split = split_archived_name(info.key)
        when = f"{archived_at(split[1]):%Y-%m-%d %H:%M}" if split is not None else "?"
        note = " [yellow](damaged)[/yellow]" if info.warnings else ""
        table.add_row(escape(info.key) + note, str(info.message_count), when)
    console = _out()
    console.print(
        f"\n[bold]archived by /new[/bold] ({len(archives)}; read-only: "
        "`nanobot session show NAME`, searched by `nanobot history search` and `history grep`)"
    )
    console.print(table)
    if len(shown) < len(archives):
        console.print(
            f"[dim]{len(archives) - len(shown)} older archived conversation(s) not shown: "
            "`nanobot session list --archived`[/dim]"
        )


def _print_live(infos: Sequence[Any]) -> None:
    table = Table("key", "messages", "consolidated", "last update")
    for info in infos:
        note = " [yellow](damaged)[/yellow]" if info.warnings else ""
        table.add_row(
            escape(info.key) + note,
            str(info.message_count),
            str(info.last_consolidated),
            escape(info.updated_at),
        )
    _out().print(table)


@session_app.command("show", cls=Command)
def show(
    key: str = KeyArg,
    as_json: bool = typer.Option(False, "--json", help="Print the stored messages as JSON."),
    limit: int | None = typer.Option(None, "--last", "-n", help="Only the last N messages."),
    config: Path | None = ConfigOpt,
) -> None:
    """A readable transcript of one session (tool results shortened)."""
    store = _store(_import_from_nanobot(config, quiet_when_none=True))
    try:
        session = store.load(key)
    except NanobotError as exc:
        raise _fail(exc) from None
    _warn(session.warnings)
    archived = split_archived_name(key) is not None and not store.exists(key)
    messages = session.messages if limit is None else session.messages[-limit:] if limit > 0 else []
    try:
        state = store.working_state_log(session).read()
    except NanobotError as exc:
        raise _fail(exc) from None
    if as_json:
        shown = {
            "key": key,
            "archived": archived,
            "last_consolidated": session.last_consolidated,
            "messages": list(messages),
            "working_state": state.as_json(),
        }
        typer.echo(
            json.dumps(mask_value(shown), ensure_ascii=False, indent=2)
        )  # files from before masking
        return
    console = _out()
    console.print(
        f"[bold]{escape(key)}[/bold]  {len(session.messages)} messages, "
        f"{session.last_consolidated} consolidated, created {escape(session.created_at)}"
    )
    if archived:
        split = split_archived_name(key)
        assert split is not None
        console.print(
            f"[dim]archived by /new at {archived_at(split[1]):%Y-%m-%d %H:%M}, kept as it was "
            f"(read-only); the session {escape(split[0])} went on afresh[/dim]"
        )
    first_index = len(session.messages) - len(messages)
    answered = {m.get("tool_call_id") for m in session.messages if m.get("role") == "tool"}
    for index, msg in enumerate(messages, start=first_index):
        if index == session.last_consolidated and index > 0:
            console.print(
                Rule("[dim]consolidated into memory above this line[/dim]"),
                width=rule_width(console),
            )
        _print_message(console, msg, answered)
    helpers = [m[NOTE_KEY] for m in session.messages if isinstance(m.get(NOTE_KEY), dict)]
    if helpers:
        console.print(f"\n[bold]helpers[/bold] ({len(helpers)}): what each did and how it ended")
        for record in helpers:
            console.print(
                f"  {escape(str(record.get('summary', '?')))} [dim]— task: "
                f"{escape(str(record.get('task', ''))[:80])}[/dim]"
            )
    _print_decisions(console, session.decisions)
    _print_working_state(console, state)


def _print_working_state(console: Console, state: WorkingState) -> None:
    """The checkpoint in force (sent with every request of the session), then the earlier versions."""
    if not state.versions and state.last_compaction is None:
        return
    current = state.current
    console.print(
        "\n[bold]working state[/bold]"
        + (
            f" (version {current.number}, {items_phrase(current.items)}, written {escape(current.at)}; sent with every request)"
            if current is not None
            else " (none in force: /new archived the last one)"
            if state.versions
            else ""
        )
    )
    if current is not None:
        console.print(escape(current.text))
    earlier = [v for v in state.versions if v is not current]
    if earlier:
        console.print(f"[dim]earlier versions ({len(earlier)}):[/dim]")
        for v in earlier:
            first = v.text.strip().splitlines()[0] if v.text.strip() else ""
            closed = ", archived by /new" if v.closed else ""
            console.print(
                f"  [dim]version {v.number} · {escape(v.at)} · {items_phrase(v.items)}{closed} ·[/dim] "
                f"{escape(first[:80])}"
            )
    failed = state.failed
    if failed is not None:
        console.print(
            f"[yellow]the last compaction failed[/yellow] ({escape(str(failed.get('at', '')))}): "
            f"{escape(str(failed.get('reason', '?')))}"
        )


def _print_decisions(console: Console, decisions: Sequence[dict]) -> None:
    """Every approval decision of the session: when, allowed or not, by whom, what, and why."""
    if not decisions:
        return
    console.print(f"\n[bold]approval decisions[/bold] ({len(decisions)})")
    for d in decisions:
        verdict = "[green]allowed[/green]" if d.get("allowed") else "[yellow]refused[/yellow]"
        reason = f" — {escape(str(d['reason']))}" if d.get("reason") else ""
        console.print(
            f"  [dim]{escape(str(d.get('timestamp', '')))}[/dim] {verdict} "
            f"[dim]({escape(str(d.get('kind', '?')))}, by {escape(str(d.get('by', '?')))})[/dim] "
            f"{escape(str(d.get('summary', '')))}{reason}"
        )


def _print_message(console: Console, msg: Mapping[str, Any], answered: set[Any]) -> None:
    """One message; `answered`: the ids of the tool calls that have a result in the session."""
    msg = mask_message(msg)  # a session saved by an older version may still hold a key
    role = str(msg.get("role", "?"))
    stamp = f" [dim]{escape(str(msg.get('timestamp', '')))}[/dim]" if msg.get("timestamp") else ""
    text = text_of(msg.get("content"))
    if role == "tool":
        if len(text) > SHOWN_TOOL_RESULT_CHARS:
            text = (
                text[:SHOWN_TOOL_RESULT_CHARS]
                + f" … [{len(text) - SHOWN_TOOL_RESULT_CHARS} more characters]"
            )
        console.print(
            f"[magenta]tool result[/magenta] {escape(str(msg.get('name', '')))} "
            f"[dim]({escape(str(msg.get('tool_call_id', '')))})[/dim]{stamp}"
        )
        console.print(escape(text), style="dim")
        return
    if isinstance(msg.get(NOTE_KEY), dict):  # a helper's end, written by nanobot in a user message
        console.print(f"\n[bold yellow]helper[/bold yellow]{stamp}")
        console.print(escape(str(msg[NOTE_KEY].get("summary") or text)))
        held = msg[NOTE_KEY].get("held")
        if held:  # its report turn did not run: the report is shown here, as the model will read it
            console.print(f"[dim]its report, not handled ({escape(str(held))}):[/dim]")
            console.print(escape(str(msg[NOTE_KEY].get("report") or "(no report)")))
        return
    colour = {"user": "green", "assistant": "cyan", "system": "yellow"}.get(role, "red")
    console.print(f"\n[bold {colour}]{escape(role)}[/bold {colour}]{stamp}")
    if text.strip():
        console.print(escape(text))
    for call in msg.get("tool_calls") or []:
        if not isinstance(call, dict):
            continue
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        console.print(
            f"[magenta]→ {escape(str(fn.get('name', '?')))}[/magenta]"
            f"({escape(str(fn.get('arguments', '')))}) [dim]{escape(str(call.get('id', '')))}[/dim]"
        )
        if (
            call.get("id") not in answered
        ):  # Ctrl-C or a crash mid-tool (session/validity.py, rule 3)
            console.print(
                "[yellow]  no result recorded: stopped before it finished (or still running); "
                "the model is told it was interrupted[/yellow]"
            )


@session_app.command("repair", cls=Command)
def repair(key: str = KeyArg, config: Path | None = ConfigOpt) -> None:
    """Rewrite a damaged session cleanly; the original is kept as a backup next to it."""
    try:
        report = _store(_workspace(config)).repair(key)
    except NanobotError as exc:
        raise _fail(exc) from None
    console = _out()
    if not report.changed:
        console.print(f"Session {escape(key)} needs no repair ({escape(str(report.path))}).")
        return
    console.print(f"Repaired session {escape(key)}:")
    for line in report.describe() or ["file rewritten cleanly"]:
        console.print(f"  - {escape(line)}")
    console.print(f"Original kept as {escape(str(report.backup))}")
