"""The chat's approval prompt: a risky action shows its summary and detail (a diff, a command)
and waits for y (once), a (always for this session) or n (no; words after it go to the model).

It runs inside a turn: the spinner or the live answer is paused first, so the question is
never drawn over, and resumed after the answer.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from nanobot.cli.errors import say
from nanobot.tools.approval import ApprovalRequest, Decision

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession

HELP = "y = yes, once · a = always (this session) · n = no; after n, say why or what to do instead"
_YES, _ALWAYS, _NO = {"y", "yes"}, {"a", "always"}, {"n", "no"}


def parse_answer(text: str) -> Decision | None:
    """The Decision for a typed answer; None when it is not one (ask again)."""
    word, _, rest = text.strip().partition(" ")
    word = word.lower().rstrip(",.:;")
    if word in _YES and not rest.strip():
        return Decision(True)
    if word in _ALWAYS and not rest.strip():
        return Decision(True, always=True)
    if word in _NO:
        said = rest.strip()
        return Decision(False, f"the user said no: {said}" if said else "the user said no")
    return None


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """Control characters (escape sequences, carriage returns, bidi overrides) shown as escapes: the
    text asked about comes from the model, and must not redraw or hide what the user reads."""
    return _CONTROL.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


def _diff_line(line: str) -> str:
    line = visible(line)
    if line.startswith(("+++", "---")):
        return f"[bold]{escape(line)}[/bold]"
    if line.startswith("+"):
        return f"[green]{escape(line)}[/green]"
    if line.startswith("-"):
        return f"[red]{escape(line)}[/red]"
    if line.startswith("@@"):
        return f"[cyan]{escape(line)}[/cyan]"
    return escape(line)


class TerminalApprover:
    """Asks the person at the terminal. `pause` stops the turn's spinner/live text; `resume`
    restarts the spinner; `can_ask` is False when the chat's own prompt owns the terminal."""

    def __init__(
        self,
        console: Console,
        *,
        pause: Callable[[], None],
        resume: Callable[[], None],
        can_ask: Callable[[], bool] = lambda: True,
    ) -> None:
        self.console = console
        self.pause = pause
        self.resume = resume
        self.can_ask = can_ask
        self._session: PromptSession[str] | None = None  # built on first ask

    def _prompt(self):
        if self._session is None:
            from prompt_toolkit import PromptSession

            self._session = PromptSession()
        return self._session

    async def approve(self, request: ApprovalRequest) -> Decision:
        if not self.can_ask():
            return Decision(
                False,
                "the user was not asked: this came from a background task while the chat "
                "was waiting for input; tell the user what you need and why",
            )
        self.pause()
        try:
            self._show(request)
            while True:
                try:
                    from prompt_toolkit.patch_stdout import patch_stdout

                    with patch_stdout(raw=True):
                        answer = await self._prompt().prompt_async("allow? [y/a/n] › ")
                except (EOFError, KeyboardInterrupt) as exc:
                    self.console.print("[yellow]not allowed[/yellow]")
                    if (
                        isinstance(exc, KeyboardInterrupt)
                        and (task := asyncio.current_task()) is not None
                    ):
                        # Ctrl-C stops the turn, as it does everywhere else: the refusal is recorded
                        # first (no await before the caller does), then the turn's next await ends it
                        task.cancel()
                    return Decision(False, "the user refused (interrupted the question)")
                decision = parse_answer(answer)
                if decision is not None:
                    self.console.print(
                        "[green]allowed[/green]"
                        + (" [dim](always, this session)[/dim]" if decision.always else "")
                        if decision.allowed
                        else "[yellow]not allowed[/yellow]"
                    )
                    return decision
                self.console.print(f"[dim]{HELP}[/dim]")
        finally:
            self.resume()

    def _show(self, request: ApprovalRequest) -> None:
        say(
            self.console,
            f"[bold yellow]⚠ approval needed[/bold yellow] [dim]({escape(request.kind)})[/dim] "
            f"{escape(visible(request.summary))}",
        )
        for line in request.detail.rstrip("\n").splitlines() if request.detail else []:
            self.console.print("  " + _diff_line(line), highlight=False)
        self.console.print(f"[dim]{HELP}[/dim]", highlight=False)


def print_refusals(err: Console, decisions: Sequence[dict]) -> None:
    """One-shot mode cannot ask: name the risky actions it refused and the flag that allows each kind."""
    refused = [d for d in decisions if not d.get("allowed")]
    if not refused:
        return
    kinds = sorted({str(d.get("kind")) for d in refused})
    err.print(
        f"[yellow]{len(refused)} risky action(s) refused (one-shot mode cannot ask):[/yellow]",
        highlight=False,
    )
    for d in refused:
        err.print(f"  [dim]- {escape(visible(str(d.get('summary', ''))))}[/dim]", highlight=False)
    # a command given the network then meets the egress proxy, which asks about each new domain:
    # said now, so the user does not find out one refusal later
    then = (
        "; a command given the network is then asked about each domain it contacts (add "
        "--approve web-domain, or list them in tools.web.allowDomains)"
        if "exec-network" in kinds and "web-domain" not in kinds
        else ""
    )
    err.print(
        "[dim]allow them for one run with "
        + " ".join(f"--approve {escape(k)}" for k in kinds)
        + ", or for good with tools.autoApprove in the config"
        + then
        + "; `nanobot session show` lists every decision[/dim]",
        highlight=False,
    )
