"""`nanobot agent`: one-shot turns and the interactive chat (prompt_toolkit + rich)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rich.console import Console

from nanobot.agent.events import Event, EventSink, Notice, Retrying, TurnDone, TurnOutcome, ignore
from nanobot.cli.approval_prompt import print_refusals
from nanobot.cli.config_load import load as load_config
from nanobot.cli.consoles import stderr_console, stdout_console
from nanobot.cli.errors import print_error, print_warning, report, say
from nanobot.cli.render import Renderer, escape, print_hanging
from nanobot.cli.slash import EXIT_WORDS, SLASH_COMMANDS, slash_command
from nanobot.cli.termination import Termination
from nanobot.cli.turn_notes import continuation_marker, resume_notice, unsaved_notice
from nanobot.errors import NanobotError, StorageError, UsageError
from nanobot.secrets_mask import mask_secrets

T = TypeVar("T")

if TYPE_CHECKING:  # annotations only: these load when the chat opens its assistant
    from prompt_toolkit import PromptSession

    from nanobot.agent.consolidation import ConsolidationReport
    from nanobot.agent.conversation import Conversation
    from nanobot.agent.subagents import SubagentManager
    from nanobot.app import Assistant
    from nanobot.cli.chat_reminders import ChatReminders
    from nanobot.config import Config
    from nanobot.cron.runner import Firing
    from nanobot.tools.approval import Approver


def run_agent(
    *,
    message: str | None,
    session_key: str,
    workspace: Path | None,
    config_path: Path | None,
    model: str | None,
    markdown: bool,
    json_out: bool,
    approve: list[str] | None = None,
    allow_unconfined_exec: bool = False,
) -> int:
    overrides = {
        "agents.defaults.workspace": str(workspace) if workspace else None,
        "agents.defaults.model": model,
    }
    cfg = load_config(config_path, overrides=overrides)
    if message is None and _asked_for_the_key(cfg):
        cfg = load_config(config_path, overrides=overrides)
    cfg.tools.exec.allow_unconfined = allow_unconfined_exec
    try:
        if message is not None and slash_command(message) is not None:
            return asyncio.run(
                _one_shot_command(
                    cfg, session_key, message, markdown=markdown, approve=approve or []
                )
            )
        created = _first_run(cfg)
        if message is not None:
            return asyncio.run(
                Termination().run(
                    lambda term: _one_shot(
                        cfg,
                        session_key,
                        message,
                        markdown=markdown,
                        json_out=json_out,
                        approve=approve or [],
                        term=term,
                    )
                )
            )
        if created:  # said in the chat only: a script's stderr gets nothing new
            workspace = cfg.workspace_path()
            names = ", ".join(str(p.relative_to(workspace)) for p in created)
            say(
                stdout_console(),
                f"[dim]workspace {escape(str(workspace))}: wrote the missing templates "
                f"{escape(names)}, as `nanobot onboard` does (edit them to shape the assistant)[/dim]",
            )
        return asyncio.run(
            Termination().run(
                lambda term: Chat(
                    cfg, session_key, markdown=markdown, approve=approve or [], term=term
                ).run()
            )
        )
    except KeyboardInterrupt:
        stderr_console().print(
            "[yellow]interrupted[/yellow] [dim](what already ran is saved)[/dim]"
        )
        return 130


def _first_run(cfg: Config) -> list[Path]:
    """A chat started without `nanobot onboard` gets the prompt-file templates onboard writes
    (once it can answer: a missing key is reported first, with nothing written)."""
    from nanobot.cli.setup import first_run_templates
    from nanobot.config import resolve_model

    try:
        resolve_model(cfg)
    except NanobotError:
        return []
    return first_run_templates(cfg.workspace_path())


def _asked_for_the_key(cfg: Config) -> bool:
    """The chat in a terminal, with no key for its model: ask for it, as `nanobot onboard` does
    (nanobot/cli/key_prompt.py); True when one was saved. Skipped, the chat then fails as usual."""
    from nanobot.cli import key_prompt
    from nanobot.config import resolve_model
    from nanobot.errors import MissingKeyError

    try:
        resolve_model(cfg)
    except MissingKeyError as exc:
        if key_prompt.can_ask(exc):
            stdout_console().print(
                f"[yellow]{escape(exc.message)}[/yellow] (model {escape(cfg.defaults.model)})"
            )
            return key_prompt.ask_and_save(exc, stdout_console())
    except NanobotError:
        pass  # reported by the chat itself, as before
    return False


def _open(
    cfg: Config,
    session_key: str,
    *,
    stream: bool,
    renderer_ref: list[Renderer],
    ask: Approver | None = None,
    approve: Sequence[str] = (),
    background: EventSink = ignore,
    origin: str = "chat",
) -> Assistant:
    from nanobot.app import open_assistant

    def on_retry(attempt: int, delay: float, error: Exception) -> None:
        if renderer_ref:
            renderer_ref[0](Retrying(attempt, delay, mask_secrets(str(error).splitlines()[0])))

    def on_fallback(text: str) -> None:
        if renderer_ref:
            renderer_ref[0](Notice(text, "warning"))

    return open_assistant(
        cfg,
        session_key,
        stream=stream,
        on_retry=on_retry,
        ask=ask,
        approve=approve,
        on_fallback=on_fallback,
        background=background,
        origin=origin,
    )


async def _one_shot_command(
    cfg: Config, session_key: str, message: str, *, markdown: bool, approve: list[str]
) -> int:
    """`agent -m /new` (or /compact, /status, ...) acts on the session, as in the chat."""
    command = slash_command(message)
    assert command is not None  # run_agent checked
    name, arg = command
    if name in EXIT_WORDS:  # /quit, as the chat takes it: nothing to leave here
        return 0
    entry = SLASH_COMMANDS.get(name)
    if entry is None:
        raise UsageError(
            f"unknown command {name}",
            hint=f"`nanobot agent -m /help` lists them. To send the text to the model instead, "
            f"start it with a space: -m ' {message.strip()}'",
        )
    chat = Chat(cfg, session_key, markdown=markdown, approve=approve)
    # as after a one-shot turn: stdout holds the command's result, its notices and errors go to stderr
    chat.renderer = Renderer(chat.console, markdown=markdown, progress=chat.err)
    if name in ("/help", "/exit", "/quit"):
        await entry[1](chat, arg)
        return 0
    chat.assistant = assistant = _open(
        cfg,
        session_key,
        stream=False,
        renderer_ref=[chat.renderer],
        approve=approve,
        origin="one-shot",
    )
    try:
        await entry[1](chat, arg)
    finally:
        chat.renderer.finish()
        await assistant.aclose()
    return 1 if chat.failed else 0


def _first_time(text: str) -> bool:
    """True the first time `text` is said in one-shot mode (a script's every call need not repeat a
    warning about the config); remembered by hash in ~/.nanobot/said-once."""
    import hashlib

    from nanobot import paths
    from nanobot.fsio import append_durably

    record = paths.nanobot_home() / "said-once"
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    try:
        if digest in record.read_text(encoding="utf-8").split():
            return False
    except OSError:
        pass
    try:
        append_durably(record, digest + "\n")
    except OSError:
        pass  # a read-only home: said every time, as before
    return True


class _Answers:
    """Passes events on and counts the turns that ended with an answer or an error."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.turns: list[TurnDone] = []

    @property
    def answered(self) -> int:
        return sum(1 for t in self.turns if not t.outcome.error)

    @property
    def failed(self) -> int:
        return sum(1 for t in self.turns if t.outcome.error)

    def __call__(self, event: Event) -> None:
        if isinstance(event, TurnDone):
            self.turns.append(event)
        self.sink(event)


async def _one_shot(
    cfg: Config,
    session_key: str,
    message: str,
    *,
    markdown: bool,
    json_out: bool,
    approve: Sequence[str] = (),
    term: Termination | None = None,
) -> int:
    term = term or Termination()
    out = stdout_console(io.StringIO()) if json_out else stdout_console()
    err = stderr_console()
    stream = out.is_terminal and not json_out
    ref: list[Renderer] = []
    background = _Answers(
        Renderer(out, markdown=markdown, progress=err, stream_text=False, spinner=False)
    )
    # nobody can answer a question here: risky actions are refused, naming the flag that allows them
    assistant = _open(
        cfg,
        session_key,
        stream=stream,
        renderer_ref=ref,
        approve=approve,
        background=background,
        origin="one-shot",
    )
    renderer = Renderer(out, markdown=markdown, progress=err, stream_text=stream)
    ref.append(renderer)
    conversation = assistant.conversation
    answers = _Answers(renderer)
    for note in assistant.startup_notes():
        err.print(f"[dim]{escape(note)}[/dim]", highlight=False)
    for warning in [*assistant.warnings, *[w for w in assistant.once_warnings if _first_time(w)]]:
        print_warning(warning, console=err)
    banner = _exec_banner(cfg)
    if "NOT confined" in banner:
        err.print(banner, highlight=False)
    decided = len(conversation.session.decisions)
    try:
        await assistant.mcp_ready()  # one turn only: let it see every MCP tool that can be had
        saved_before = len(conversation.session.messages)
        try:
            outcome = await conversation.send(message, emit=answers)
        except StorageError as exc:
            renderer.finish()
            report(exc, console=err)
            err.print(unsaved_notice(conversation, saved_before, one_shot=True), highlight=False)
            return 1
        renderer.finish()
        await _wait_for_background(assistant.subagents, cfg.defaults.subagent_wait_seconds, err)
    finally:
        renderer.finish()
        me = asyncio.current_task()
        interrupted = me is not None and me.cancelling() and term.signum is None  # Ctrl-C
        await assistant.subagents.stop(
            term.reason or ("by the user (Ctrl-C)" if interrupted else "when nanobot closed")
        )
        await assistant.aclose()
        print_refusals(err, conversation.session.decisions[decided:])
    # exit 1 when no turn answered and one failed (the only answer failed)
    failed = not (answers.answered or background.answered) and bool(
        answers.failed or background.failed
    )
    if json_out:
        print(
            json.dumps(
                {
                    "answer": outcome.content,
                    "stop_reason": outcome.stop_reason,
                    "error": outcome.error,
                    "tool_calls": outcome.tool_calls,
                    "usage": {
                        "prompt_tokens": outcome.usage.prompt_tokens,
                        "completion_tokens": outcome.usage.completion_tokens,
                    },
                    # the turns that handled subagent reports, in order
                    "background": [
                        {
                            "answer": t.content,
                            "stop_reason": t.stop_reason,
                            "error": t.error,
                            "tool_calls": t.tool_calls,
                        }
                        for t in (d.outcome for d in background.turns)
                    ],
                    # the reports whose turns a limit kept from running: saved in the session
                    "held_reports": _held_reports(conversation.session.messages[saved_before:]),
                },
                ensure_ascii=False,
            )
        )
    return 1 if failed else 0


def _background_work(helpers: int, reports: int) -> str:
    """'2 subagent(s) and 1 report turn(s)', leaving out a part that is 0 ('' when both are)."""
    parts = [
        f"{helpers} subagent(s)" if helpers else "",
        f"{reports} report turn(s)" if reports else "",
    ]
    return " and ".join(part for part in parts if part)


def _held_reports(messages: list) -> list[dict]:
    """The helpers' reports these messages keep because their report turns could not run."""
    from nanobot.messages import NOTE_KEY

    return [
        {
            "subagent": note.get("id"),
            "label": note.get("label"),
            "why": note["held"],
            "report": note.get("report", ""),
        }
        for note in (m.get(NOTE_KEY) for m in messages)
        if isinstance(note, dict) and note.get("held")
    ]


async def _wait_for_background(subagents: SubagentManager, wait: float, err: Console) -> None:
    """`agent -m` waits for its helpers and their queued report turns, and says when it gives up."""
    helpers, reports = subagents.pending()
    if not helpers and not reports:
        return
    what = _background_work(helpers, reports)
    err.print(f"[dim]waiting up to {wait:.0f}s for {what}…[/dim]")
    if await subagents.wait(wait):
        return
    stopped = await subagents.stop(f"when one-shot mode stopped waiting ({wait:.0f}s)")
    err.print(
        f"[yellow]stopped waiting after {wait:.0f}s (agents.defaults.subagentWaitSeconds); "
        f"{len(stopped)} subagent(s) stopped[/yellow]"
    )


DOUBLE_CTRL_C_SECONDS = 1.0  # a second Ctrl-C on an empty prompt within this leaves the chat


def _exec_banner(cfg: Config) -> str:
    from nanobot.cli.status_view import exec_line

    line = escape(exec_line(cfg))
    return (
        f"[yellow]exec: {line}[/yellow]" if line.startswith("NOT") else f"[dim]exec: {line}[/dim]"
    )


class Chat:
    """The REPL: read a line, run a turn as a cancellable task, render its events."""

    def __init__(
        self,
        cfg: Config,
        session_key: str,
        *,
        markdown: bool,
        approve: Sequence[str] = (),
        term: Termination | None = None,
    ) -> None:
        self.cfg = cfg
        self.approve = list(approve)
        self.term = term or Termination()
        self.session_key = session_key
        self.console = stdout_console()
        self.err = stderr_console()
        self.markdown = markdown
        self.renderer = Renderer(self.console, markdown=markdown)
        # subagent reports can arrive while the prompt is shown: render them whole, no spinner
        self.background = Renderer(
            self.console, markdown=markdown, stream_text=False, spinner=False
        )
        self._assistant: Assistant | None = None  # opened by run() (or by a one-shot command)
        self.turn_task: asyncio.Task | None = None
        self.unsent = ""  # a message that could not be saved, put back at the prompt
        self.failed = False  # a slash command failed (the exit code of `agent -m /new`)
        self._ctrl_c_on_text = False
        self._last_ctrl_c: float | None = None  # when Ctrl-C last hit an empty prompt
        self._idle_ctrl_c: float | None = (
            None  # a Ctrl-C while neither the prompt nor a turn had it
        )
        self.reminders: ChatReminders | None = None
        self._held_firings: list[
            Firing
        ] = []  # reminders that arrived during a turn, shown after it

    def _on_idle_sigint(self, signum: int, frame: object) -> None:
        """Ctrl-C while neither the prompt (which reads it as a key) nor a turn or /compact (which it
        cancels) has it: the few milliseconds between two prompts, or start-up. It counts as a Ctrl-C
        on an empty prompt at the next prompt; a second one within a second leaves, as before."""
        now = time.monotonic()
        if self._idle_ctrl_c is not None and now - self._idle_ctrl_c <= DOUBLE_CTRL_C_SECONDS:
            raise KeyboardInterrupt
        self._idle_ctrl_c = now

    def _catch_idle_sigint(self) -> None:
        signal.signal(signal.SIGINT, self._on_idle_sigint)

    async def _ctrl_c_cancels(self, work: Awaitable[T]) -> T:
        """Await `work` with Ctrl-C cancelling it (CancelledError), the chat staying."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(work)
        loop.add_signal_handler(signal.SIGINT, task.cancel)
        try:
            return await task
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            self._catch_idle_sigint()

    def _second_ctrl_c(self) -> bool:
        """Ctrl-C at the prompt clears the line; twice within a second on an empty prompt leaves."""
        now = time.monotonic()
        if self._ctrl_c_on_text:
            self._last_ctrl_c = None
            return False
        if self._last_ctrl_c is not None and now - self._last_ctrl_c <= DOUBLE_CTRL_C_SECONDS:
            return True
        self._last_ctrl_c = now
        self.console.print("[dim](press Ctrl-C again to leave, or Ctrl-D)[/dim]")
        return False

    @property
    def assistant(self) -> Assistant:
        if self._assistant is None:
            raise RuntimeError("the chat's assistant is not open yet")
        return self._assistant

    @assistant.setter
    def assistant(self, assistant: Assistant) -> None:
        self._assistant = assistant

    @property
    def conversation(self) -> Conversation:
        return self.assistant.conversation

    def _prompt_session(self) -> PromptSession[str]:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

        from nanobot.cli.input_history import MaskedFileHistory
        from nanobot.paths import input_history_path

        bindings = KeyBindings()

        @bindings.add("escape", "enter")
        def _newline(event: KeyPressEvent) -> None:  # Esc-Enter inserts a line break; Enter sends
            event.current_buffer.insert_text("\n")

        @bindings.add("c-c")
        def _interrupt(
            event: KeyPressEvent,
        ) -> None:  # as prompt_toolkit does, but remembering whether a line was typed
            self._ctrl_c_on_text = bool(event.current_buffer.text)
            event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

        return PromptSession(
            history=MaskedFileHistory(input_history_path()),
            key_bindings=bindings,
            multiline=False,
            enable_history_search=True,
            prompt_continuation=continuation_marker,
        )

    async def run(self) -> int:
        from prompt_toolkit.patch_stdout import patch_stdout

        from nanobot.cli.approval_prompt import TerminalApprover

        ref = [self.renderer]
        ask = TerminalApprover(
            self.console,
            pause=self._pause_display,
            resume=self._resume_display,
            can_ask=lambda: self.turn_task is not None,
        )
        self.assistant = _open(
            self.cfg,
            self.session_key,
            stream=True,
            renderer_ref=ref,
            ask=ask,
            approve=self.approve,
            background=self._background_event,
        )
        self.assistant.prewarm()  # import the SDK while the user types the first message
        try:
            self.console.print(
                f"[bold]nanobot[/bold] [dim]· {self.cfg.defaults.model} · session "
                f"{self.session_key} · /help for commands, Ctrl-D to leave[/dim]",
                soft_wrap=False,
            )
            self.console.print(_exec_banner(self.cfg), highlight=False, soft_wrap=False)
            for note in self.assistant.startup_notes():
                self.console.print(f"[dim]{escape(note)}[/dim]", highlight=False, soft_wrap=False)
            for warning in [*self.assistant.warnings, *self.assistant.once_warnings]:
                print_warning(warning, console=self.console)
            for skill in getattr(self.conversation.context.skills, "held", []):
                self.console.print(
                    f"[yellow]skill {escape(skill.name)} is off: it {escape(skill.gate)} "
                    f"({escape(skill.state)}); read it, then run `nanobot skills approve "
                    f"{escape(skill.name)}`[/yellow]",
                    highlight=False,
                    soft_wrap=False,
                )
            resumed = resume_notice(self.conversation.session)
            if resumed:
                self.console.print(resumed, highlight=False, soft_wrap=False)
            prompt = (
                self._prompt_session()
            )  # piped stdin never gets here: it becomes a one-shot message
            self._start_reminders()
            self._catch_idle_sigint()  # from here on a stray Ctrl-C never ends the chat at once
            while True:
                self._show_held_firings()
                if self._idle_ctrl_c is not None:  # pressed just before this prompt: as if at it
                    self._idle_ctrl_c, self._ctrl_c_on_text = None, False
                    if self._second_ctrl_c():
                        break
                try:
                    with patch_stdout(raw=True):
                        text = await prompt.prompt_async("you › ", default=self.unsent)
                    self.unsent = ""
                except KeyboardInterrupt:
                    if self._second_ctrl_c():
                        break
                    continue
                except EOFError:
                    break
                self._last_ctrl_c = None
                text = text.strip()
                if not text:
                    continue
                if text.lower() in EXIT_WORDS:
                    break
                command = slash_command(
                    text
                )  # "/etc/hosts ..." is text for the model, not a command
                if command is not None:
                    name, arg = command
                    entry = SLASH_COMMANDS.get(name)
                    if entry is None:
                        self.console.print(
                            f"[yellow]unknown command {name}; /help lists them[/yellow]"
                        )
                        continue
                    if not await entry[1](self, arg):
                        break
                    continue
                await self.run_turn(text)
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            # after SIGHUP the terminal is gone and printing fails: the session is saved regardless
            with contextlib.suppress(OSError):
                self.renderer.finish()
            if self.reminders is not None:
                await self.reminders.stop()
            with contextlib.suppress(OSError):
                running = len(self.assistant.subagents.running())
                if running and self.term.signum is None:
                    self.console.print(
                        f"[yellow]stopping {running} subagent(s) still running[/yellow]"
                    )
            await self.assistant.subagents.stop(self.term.reason or "by the user leaving nanobot")
            await self.assistant.aclose()
        self.console.print("[dim]bye[/dim]")
        return 0

    async def run_turn(self, text: str) -> None:
        """Run one turn; Ctrl-C cancels it and returns to the prompt."""
        loop = asyncio.get_running_loop()
        self.turn_task = asyncio.ensure_future(self._send(text))
        loop.add_signal_handler(signal.SIGINT, self.turn_task.cancel)
        self.renderer.thinking()
        saved_before = len(self.conversation.session.messages)
        try:
            await self.turn_task
        except asyncio.CancelledError:
            if self.term.signum is not None:
                raise  # SIGTERM / SIGHUP: not a Ctrl-C, leave
            self.renderer.finish()
            from nanobot.agent.loop import is_interrupted_answer

            saved = self.conversation.session.messages[saved_before:]
            kept = (
                "the part shown is saved, marked as interrupted"
                if saved and is_interrupted_answer(saved[-1])
                else "what already ran is saved"
            )
            self.console.print(f"[yellow]cancelled[/yellow] [dim]({kept})[/dim]")
            return
        except NanobotError as exc:
            self.renderer.finish()
            report(exc, console=self.console)
            if isinstance(exc, StorageError):
                self.console.print(
                    unsaved_notice(self.conversation, saved_before, one_shot=False), highlight=False
                )
                if len(self.conversation.session.messages) == saved_before:
                    self.unsent = text  # offered again at the next prompt
            return
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            self._catch_idle_sigint()
            self.turn_task = None
        self.renderer.finish()  # a failed turn's error was shown by the renderer (TurnDone)

    async def _send(self, text: str) -> TurnOutcome:
        await self.assistant.mcp_ready()  # servers started while the user typed; rarely waits
        return await self.conversation.send(text, emit=self.renderer)

    # reminders (nanobot/cli/chat_reminders.py) -----------------------------------------------
    def _start_reminders(self) -> None:
        from nanobot.app import AssistantTurns, build_scheduler
        from nanobot.cli.chat_reminders import ChatReminders, ChatTurns
        from nanobot.cli.serve import log_delivery

        turns = ChatTurns(self.session_key, self.conversation, AssistantTurns(self.cfg))
        try:
            scheduler = build_scheduler(
                self.cfg, kind="chat", turns=turns, deliveries=[log_delivery(self.cfg)]
            )
        except OSError as exc:  # e.g. a read-only workspace: the chat still works, reminders do not
            why = (
                "the workspace cannot be written (see above)"
                if self.assistant.once_warnings
                and getattr(exc, "errno", None) in (errno.EROFS, errno.EACCES)
                else str(exc)
            )
            self.console.print(
                f"[yellow]warning: reminders are off in this chat: {escape(why)}[/yellow]"
            )
            return
        self.reminders = ChatReminders(scheduler, self._show_firing)
        self.reminders.start()

    def _show_firing(self, firing: Firing) -> None:
        """Printed above the prompt; held while a turn is on screen."""
        if self.turn_task is not None:
            self._held_firings.append(firing)
            return
        colour = (
            "red" if firing.status == "error" else "yellow" if firing.kind == "notice" else "cyan"
        )
        self.console.print(
            f"[bold {colour}]{escape(firing.title)}[/bold {colour}]"
            + (f" [dim]({escape(firing.session)})[/dim]" if firing.session else ""),
            highlight=False,
        )
        body = (firing.error or firing.text or "").strip()
        if firing.error:  # wrapped at words (the console's soft wrap would cut them at the edge)
            self.console.print(escape(body), highlight=False, soft_wrap=False)
        elif body:
            self.renderer.show_answer(body)  # a job's answer is an answer: rendered as one

    def _show_held_firings(self) -> None:
        held, self._held_firings = self._held_firings, []
        for firing in held:
            self._show_firing(firing)

    # slash command actions -------------------------------------------------------------------
    def show_help(self) -> None:
        # wrapped between words, continuations under the text (an 80-column terminal cut "Ctr|l-C")
        for name, (help_text, _) in SLASH_COMMANDS.items():
            print_hanging(self.console, f"  {name:<10} {help_text}", indent=13)
        print_hanging(
            self.console,
            "  Esc-Enter: new line · Ctrl-C: cancel the running turn (twice on an empty "
            "prompt: leave) · Ctrl-D: leave",
            indent=2,
        )

    async def _memory_action(
        self,
        action: Callable[..., Awaitable[ConsolidationReport | None]],
        *,
        on_error: str = "",
        quiet_when_idle: bool = False,
    ) -> bool:
        """Run /new or /compact, print its receipt; False when it failed (nothing was changed)."""
        # a summarising call can take a while: the spinner shows it is alive, and after a few
        # seconds how long it has been and that Ctrl-C stops it
        self.renderer.thinking("compacting…")
        try:
            report = await self._ctrl_c_cancels(action(emit=self.renderer))
        except asyncio.CancelledError:
            if self.term.signum is not None:
                raise  # SIGTERM / SIGHUP: leave
            self.renderer.finish()  # the spinner's line goes first, with the ^C the terminal echoed
            self.err.print("[yellow]cancelled[/yellow]")
            return False
        except NanobotError as exc:
            self.renderer.finish()
            print_error(exc.message + on_error, exc.hint, console=self.err)
            self.failed = True
            return False
        finally:
            self.renderer.finish()
        if report is not None and (report.ran or not quiet_when_idle):
            say(self.console, f"[dim]{escape(report.receipt())}[/dim]")
        return True

    async def new_session(self) -> None:
        reports: list[ConsolidationReport] = []

        async def new(*, emit: EventSink) -> ConsolidationReport:
            reports.append(await self.conversation.new_session(emit=emit))
            return reports[-1]

        if await self._memory_action(
            new, on_error="; the conversation was kept", quiet_when_idle=True
        ):
            kept = reports[0].kept_as if reports else ""
            say(
                self.console,
                "[dim]started a new conversation"
                + (
                    f"; the previous one is kept as {escape(kept)} (`nanobot session show "
                    f"{escape(kept)}`)"
                    if kept
                    else ""
                )
                + "[/dim]",
            )
            running = len(self.assistant.subagents.running())
            if running:  # their reports are not the old conversation's any more: say where they go
                say(
                    self.console,
                    f"[yellow]{running} subagent(s) still running: their reports will come into "
                    "this new conversation (/stop stops them)[/yellow]",
                )

    async def compact(self) -> None:
        reports: list[ConsolidationReport] = []

        async def compact(*, emit: EventSink) -> ConsolidationReport:
            reports.append(await self.conversation.compact(emit=emit))
            return reports[-1]

        if await self._memory_action(compact) and reports and reports[0].checkpoint:
            report = reports[0]
            version = (
                f"version {report.checkpoint_version}" if report.checkpoint_version else "unchanged"
            )
            self.console.print(
                f"[bold]working state[/bold] [dim]({version}; sent with every request)[/dim]",
                highlight=False,
            )
            self.console.print(escape(report.checkpoint), highlight=False)

    def _pause_display(self) -> None:  # an approval question must not be drawn over
        self.renderer.finish()
        self.background.finish()

    def _resume_display(self) -> None:
        if self.turn_task is not None:
            self.renderer.thinking()

    def _background_event(self, event: Event) -> None:
        # while a user turn runs, its renderer owns the screen: a notice goes through it. A report
        # turn's own events stay with the background renderer, which shows its answer whole: a user
        # turn typed meanwhile waits behind it (one turn at a time), and took the rest of the report's
        # answer as its own, without its beginning
        own_turn = not isinstance(event, Notice)
        (self.renderer if self.turn_task is not None and not own_turn else self.background)(event)

    async def stop_background(self) -> None:
        _, reports = self.assistant.subagents.pending()  # report turns queued or answering now
        stopped = await self.assistant.subagents.stop("by the user (/stop)")
        what = _background_work(len(stopped), reports)
        self.console.print(
            f"[yellow]stopped {what}[/yellow]"
            if what
            else "[dim]no subagents are running, and no report turn[/dim]"
        )

    def show_status(self) -> None:
        from nanobot.cli.status_view import status_lines

        for line in status_lines(self.assistant):
            print_hanging(self.console, line, indent=11)
