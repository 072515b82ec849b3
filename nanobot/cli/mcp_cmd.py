"""`nanobot mcp list`: every server in tools.mcpServers, whether it starts, and the tools it gives."""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
import asyncio
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from nanobot.cli.usage import ConfigOpt

mcp_app = typer.Typer(
    help="MCP servers from tools.mcpServers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)


@mcp_app.command("list")
def list_servers(config: Path | None = ConfigOpt) -> None:
    """Start each configured server once, show its state and tools, and stop it again.
    Exit 0 when every server started (or none is configured), 1 when any failed."""
    from nanobot.cli.config_load import load as load_config
    from nanobot.cli.consoles import stdout_console
    from nanobot.cli.errors import print_error
    from nanobot.doctor import probe_mcp
    from nanobot.mcp.manager import log_path

    cfg = load_config(config)
    console = stdout_console()
    if not cfg.tools.mcp_servers:
        console.print("No MCP servers configured (tools.mcpServers in the config).")
        return
    reports = asyncio.run(probe_mcp(cfg))
    table = Table("server", "transport", "state", "tools")
    for r in reports:
        state = (
            "[green]ready[/green]"
            if r.state == "ready"
            else f"[red]{escape(r.state)}[/red]: {escape(r.error)}"
        )
        if r.trusted:
            state += " [dim](trusted: runs without asking)[/dim]"
        lines = [escape(name) for name in r.tools] or (["none"] if r.state == "ready" else ["-"])
        if r.not_enabled:
            lines.append(f"[dim]not enabled: {escape(', '.join(r.not_enabled))}[/dim]")
        if r.unknown_enabled:
            lines.append(
                f"[yellow]enabledTools names unknown here: {escape(', '.join(r.unknown_enabled))}[/yellow]"
            )
        table.add_row(escape(r.name), r.transport, state, "\n".join(lines))
    console.print(table)
    failed = [r for r in reports if r.state != "ready"]
    if failed:
        what = "; ".join(f"{r.name} ({r.state}: {r.error or 'no reason given'})" for r in failed)
        print_error(
            f"{len(failed)} of {len(reports)} MCP server(s) did not start, so the assistant "
            f"runs without their tools: {what}",
            f"each server's output is logged in {log_path('<name>')}; fix its command or url "
            "in tools.mcpServers of the config, or remove it",
        )
        raise typer.Exit(1)
