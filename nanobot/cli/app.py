"""The `nanobot` command. Errors are translated once, by nanobot.cli.errors, into a message and an exit code.

Imports stay light at module level: `nanobot --version` and `--help` must not load the
provider SDKs; commands import what they need when they run.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations on every run,
# and real types cost it half what strings do (each string is compiled and evaluated again).
import sys
from pathlib import Path

import typer
from typer.core import TyperGroup

from nanobot import __version__
from nanobot.cli.usage import ConfigOpt


class _Commands(TyperGroup):
    """The top-level group. A Ctrl-C while a command runs says "interrupted", as everywhere else:
    typer itself turns it into exit code 130 without a word."""

    def invoke(self, ctx):  # click's signature
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            raise


app = typer.Typer(
    cls=_Commands,
    name="nanobot",
    help="nanobot — a personal AI assistant in your terminal.",
    epilog="New here? `nanobot demo` tries the chat with no API key; `nanobot onboard` sets you up.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        # not HKUDS/nanobot's numbering: a 0.3.5 user must not read 0.1.0 as a downgrade
        print(f"nanobot {__version__} (terminal assistant; reads nanobot 0.1.4-0.3.5 homes)")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Show the version and exit.",
    ),
) -> None:
    """nanobot — a personal AI assistant in your terminal."""


# The command groups, by name: (module, attribute, help). Only the group named on the command line is
# imported, so `nanobot history grep` does not pay for the session store, the config model or MCP.
_GROUPS: dict[str, tuple[str, str, str]] = {
    "session": (
        "nanobot.cli.session_cmd",
        "session_app",
        "List, show, repair and import sessions.",
    ),
    "memory": ("nanobot.cli.memory_cmd", "memory_app", "What the assistant remembers (MEMORY.md)."),
    "prompt": (
        "nanobot.cli.prompt_cmd",
        "prompt_app",
        "The prompt files: who wrote them, their versions, restore one.",
    ),
    "history": (
        "nanobot.cli.memory_cmd",
        "history_app",
        "Search the archive of past conversations (sessions and HISTORY.md).",
    ),
    "skills": ("nanobot.cli.skills_cmd", "skills_app", "Skills the assistant can use."),
    "mcp": ("nanobot.cli.mcp_cmd", "mcp_app", "MCP servers and the tools they give."),
    "cron": (
        "nanobot.cli.cron_cmd",
        "cron_app",
        "Scheduled jobs and reminders (they fire while `nanobot serve` or a chat runs).",
    ),
}


def _commands() -> set[str]:
    """The top-level commands (`agent`, `serve`, ...): they need none of the groups mounted."""
    return {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}


def _mount_subcommands(only: str | None = None) -> None:
    """Add the command groups (all of them, or only the one named `only`)."""
    from importlib import import_module

    for name, (module, attr, help_text) in _GROUPS.items():
        if only is None or only == name:
            app.add_typer(getattr(import_module(module), attr), name=name, help=help_text)


@app.command()
def onboard(
    config: Path | None = ConfigOpt,
    workspace: Path | None = typer.Option(None, "--workspace", "-w", help="Workspace folder."),
) -> None:
    """Create (or complete) the config file and the workspace. Never overwrites your files."""
    from nanobot.cli.setup import run_onboard

    run_onboard(config, workspace)


@app.command()
def status(
    config: Path | None = ConfigOpt,
    session: str = typer.Option(
        "cli:direct",
        "--session",
        "-s",
        help="The session whose context and working state to show (as `agent -s`).",
    ),
) -> None:
    """Config path, workspace, model, providers with a key (masked), context window, token estimator."""
    from nanobot.cli.setup import show_status

    show_status(config, session)


@app.command()
def usage(
    config: Path | None = ConfigOpt,
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """What the assistant spent: today, 7 and 30 days, by source and model (costs from usage.prices)."""
    from nanobot.cli.usage_cmd import run_usage

    raise typer.Exit(run_usage(config, json_out=json_out))


@app.command()
def doctor(
    config: Path | None = ConfigOpt,
    offline: bool = typer.Option(False, "--offline", help="Do not contact the provider."),
    forget_correction: bool = typer.Option(
        False,
        "--forget-correction",
        help="First forget how the provider was seen to count tokens (calibration.json); "
        "nanobot learns it again from the next answer.",
    ),
) -> None:
    """Check the setup: config, key, provider and model, token counter, exec confinement, disk, memory, skills,
    failed compactions."""
    from nanobot.cli.doctor import run_doctor

    raise typer.Exit(run_doctor(config, offline=offline, forget_correction=forget_correction))


@app.command()
def agent(
    message: str | None = typer.Option(
        None, "--message", "-m", help="Send one message, print the answer, exit."
    ),
    session: str = typer.Option(
        "cli:direct", "--session", "-s", help="Session key to use or resume."
    ),
    workspace: Path | None = typer.Option(None, "--workspace", "-w", help="Workspace folder."),
    config: Path | None = ConfigOpt,
    model: str | None = typer.Option(None, "--model", help="provider/model, e.g. openai/gpt-4.1."),
    no_markdown: bool = typer.Option(
        False, "--no-markdown", help="Plain text instead of rendered markdown."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="One-shot: print answer, tool calls and usage as JSON."
    ),
    allow_unconfined_exec: bool = typer.Option(
        False,
        "--allow-unconfined-exec",
        help="Where no sandbox is available, let exec run commands anyway, without asking.",
    ),
    approve: list[str] | None = typer.Option(
        None,
        "--approve",
        metavar="KIND",
        help="Allow this kind of risky action without asking (repeatable; e.g. file-outside, persistence, "
        "memory-edit, skill-edit, or all). One-shot mode refuses risky actions otherwise.",
    ),
) -> None:
    """Chat with the assistant (REPL), or send one message with -m. Piped stdin works as the message."""
    from nanobot.cli.chat import run_agent
    from nanobot.cli.input_text import message_or_stdin

    code = run_agent(
        message=message_or_stdin(
            message,
            empty="stdin was empty",
            hint='Pass the message with -m "..." or pipe some text.',
        ),
        session_key=session,
        workspace=workspace,
        config_path=config,
        model=model,
        markdown=not no_markdown,
        json_out=json_out,
        approve=approve,
        allow_unconfined_exec=allow_unconfined_exec,
    )
    raise typer.Exit(code)


@app.command()
def demo(
    message: str | None = typer.Option(
        None, "--message", "-m", help="Send one message, print the answer, exit."
    ),
    no_markdown: bool = typer.Option(
        False, "--no-markdown", help="Plain text instead of rendered markdown."
    ),
) -> None:
    """Try nanobot with no API key: the real chat on a bundled, scripted fake LLM (answers are canned).
    Piped stdin works as the message."""
    from nanobot.cli.demo import run_demo
    from nanobot.cli.input_text import message_or_stdin

    message = message_or_stdin(
        message,
        empty="stdin is not a terminal and had no message, so the demo shows one scripted turn "
        '("list my files") instead of the chat',
        hint='Run `nanobot demo` in a terminal for the chat, or pipe a message in: echo "hello" '
        "| nanobot demo",
        instead="list my files",
    )
    raise typer.Exit(run_demo(message=message, markdown=not no_markdown))


@app.command()
def serve(
    once: bool = typer.Option(
        False, "--once", help="Run what is due now (jobs, heartbeat), then exit."
    ),
    workspace: Path | None = typer.Option(None, "--workspace", "-w", help="Workspace folder."),
    config: Path | None = ConfigOpt,
) -> None:
    """Fire scheduled jobs and the heartbeat until stopped (foreground; for systemd --user or nohup)."""
    from nanobot.cli.serve import run_serve

    raise typer.Exit(run_serve(config_path=config, workspace=workspace, once=once))


def main() -> None:
    """Console-script entry point: run the app and translate our errors into exit codes."""
    try:  # recent typer vendors click as typer._click and raises its exceptions
        from typer._click import exceptions as click_errors
    except ImportError:
        from click import exceptions as click_errors  # type: ignore[no-redef]  # the same module, older typer

    from nanobot.cli.errors import print_error, report
    from nanobot.errors import NanobotError

    first = sys.argv[1] if len(sys.argv) > 1 else None
    if first in _GROUPS:
        _mount_subcommands(first)
    elif first not in _commands() and first not in ("--version", "-V"):
        _mount_subcommands()  # help, or a name click must list or suggest from: every group
    try:
        code = app(standalone_mode=False, prog_name="nanobot")
    except click_errors.NoArgsIsHelpError as exc:
        print(exc.format_message())
        sys.exit(2)
    except click_errors.UsageError as exc:  # a bad flag or argument: click's words, our format
        if exc.ctx is not None:
            print(exc.ctx.get_usage(), file=sys.stderr)
        where = exc.ctx.command_path if exc.ctx is not None else "nanobot"
        print_error(exc.format_message(), f"Run `{where} --help` to see what it accepts.")
        sys.exit(2)
    except typer.Abort:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    except (NanobotError, OSError) as exc:
        sys.exit(report(exc))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The `nanobot` command (the console script and `python -m nanobot`); tests call main() in process."""
    main()
