"""The `nanobot` command. Errors are translated here, once, into a message and an exit code.

Imports stay light at module level: `nanobot --version` and `--help` must not load the
provider SDKs; commands import what they need when they run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from nanobot import __version__

app = typer.Typer(
    name="nanobot",
    help="nanobot — a personal AI assistant in your terminal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)

ConfigOpt = typer.Option(None, "--config", "-c", help="Config file (default: ~/.nanobot/config.json).")


def _version(value: bool) -> None:
    if value:
        print(f"nanobot {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    """nanobot — a personal AI assistant in your terminal."""


# The command groups, by name: (module, attribute, help). Only the group named on the command line is
# imported, so `nanobot history grep` does not pay for the session store, the config model or MCP.
_GROUPS: dict[str, tuple[str, str, str]] = {
    "session": ("nanobot.cli.session_cmd", "session_app", "List, show, repair and import sessions."),
    "memory": ("nanobot.cli.memory_cmd", "memory_app", "What the assistant remembers (MEMORY.md)."),
    "history": ("nanobot.cli.memory_cmd", "history_app", "Search the archive of past conversations (HISTORY.md)."),
    "skills": ("nanobot.cli.skills_cmd", "skills_app", "Skills the assistant can use."),
    "mcp": ("nanobot.cli.mcp_cmd", "mcp_app", "MCP servers and the tools they give."),
    "cron": ("nanobot.cli.cron_cmd", "cron_app",
             "Scheduled jobs and reminders (they fire while `nanobot serve` or a chat runs)."),
}


def _mount_subcommands(only: str | None = None) -> None:
    """Add the command groups (all of them, or only the one named `only`)."""
    from importlib import import_module

    for name, (module, attr, help_text) in _GROUPS.items():
        if only is None or only == name:
            app.add_typer(getattr(import_module(module), attr), name=name, help=help_text)


@app.command()
def onboard(config: Path | None = ConfigOpt,
            workspace: Path | None = typer.Option(None, "--workspace", "-w", help="Workspace folder.")) -> None:
    """Create (or complete) the config file and the workspace. Never overwrites your files."""
    from nanobot.cli.setup import run_onboard

    run_onboard(config, workspace)


@app.command()
def status(config: Path | None = ConfigOpt) -> None:
    """Config path, workspace, model, providers with a key (masked), context window, token estimator."""
    from nanobot.cli.setup import show_status

    show_status(config)


@app.command()
def agent(
    message: str | None = typer.Option(None, "--message", "-m", help="Send one message, print the answer, exit."),
    session: str = typer.Option("cli:direct", "--session", "-s", help="Session key to use or resume."),
    workspace: Path | None = typer.Option(None, "--workspace", "-w", help="Workspace folder."),
    config: Path | None = ConfigOpt,
    model: str | None = typer.Option(None, "--model", help="provider/model, e.g. openai/gpt-4.1."),
    no_markdown: bool = typer.Option(False, "--no-markdown", help="Plain text instead of rendered markdown."),
    json_out: bool = typer.Option(False, "--json", help="One-shot: print answer, tool calls and usage as JSON."),
    approve: list[str] | None = typer.Option(
        None, "--approve", metavar="KIND",
        help="Allow this kind of risky action without asking (repeatable; e.g. file-outside, persistence, "
             "memory-edit, skill-edit, or all). One-shot mode refuses risky actions otherwise."),
) -> None:
    """Chat with the assistant (REPL), or send one message with -m. Piped stdin works as the message."""
    from nanobot.cli.chat import run_agent

    if message is None and not sys.stdin.isatty():
        message = sys.stdin.read()
        if not message.strip():
            from nanobot.errors import UsageError

            raise UsageError("stdin was empty", hint='Pass the message with -m "..." or pipe some text.')
    code = run_agent(message=message, session_key=session, workspace=workspace, config_path=config,
                     model=model, markdown=not no_markdown, json_out=json_out, approve=approve)
    raise typer.Exit(code)


@app.command()
def serve(
    once: bool = typer.Option(False, "--once", help="Run what is due now (jobs, heartbeat), then exit."),
    workspace: Path | None = typer.Option(None, "--workspace", "-w", help="Workspace folder."),
    config: Path | None = ConfigOpt,
) -> None:
    """Fire scheduled jobs and the heartbeat until stopped (foreground; for systemd --user or nohup)."""
    from nanobot.cli.serve import run_serve

    raise typer.Exit(run_serve(config_path=config, workspace=workspace, once=once))


def main() -> None:
    """Console-script entry point: run the app and translate our errors into exit codes."""
    from nanobot.errors import NanobotError

    if sys.argv[1:2] not in (["--version"], ["-V"]):
        group = sys.argv[1] if len(sys.argv) > 1 else None
        _mount_subcommands(group if group in _GROUPS else None)
    try:
        app(standalone_mode=True)
    except NanobotError as exc:
        print(f"nanobot: error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(exc.hint, file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
