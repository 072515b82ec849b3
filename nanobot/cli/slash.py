"""Slash commands of the chat. How to add one: write `async def _name(chat, arg)` and add
a row to SLASH_COMMANDS. The handler returns False to leave the chat."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Protocol


class Chat(Protocol):
    """What the slash commands ask of the chat (cli/chat.py's Chat; named here, not imported,
    since the chat imports this table)."""

    def show_help(self) -> None: ...
    async def new_session(self) -> None: ...
    def show_status(self) -> None: ...
    async def compact(self) -> None: ...
    async def stop_background(self) -> None: ...


Handler = Callable[[Chat, str], Awaitable[bool]]


async def _help(chat: Chat, arg: str) -> bool:
    chat.show_help()
    return True


async def _new(chat: Chat, arg: str) -> bool:
    await chat.new_session()
    return True


async def _status(chat: Chat, arg: str) -> bool:
    chat.show_status()
    return True


async def _compact(chat: Chat, arg: str) -> bool:
    await chat.compact()
    return True


async def _stop(chat: Chat, arg: str) -> bool:
    await chat.stop_background()
    return True


async def _exit(chat: Chat, arg: str) -> bool:
    return False


SLASH_COMMANDS: dict[str, tuple[str, Handler]] = {
    "/help": ("show this help", _help),
    "/new": (
        "record this conversation in memory, keep it as an archived one, start a fresh one",
        _new,
    ),
    "/compact": ("summarise older messages into memory now, keeping the last exchange", _compact),
    "/status": ("model, context used vs window, last usage, session size", _status),
    "/stop": (
        "stop this session's subagents and any report turn they started (Ctrl-C stops yours)",
        _stop,
    ),
    "/exit": ("leave (also: exit, quit, :q, Ctrl-D)", _exit),
}

EXIT_WORDS = {"exit", "quit", ":q", "/exit", "/quit"}

_COMMAND = re.compile(r"/[A-Za-z][\w-]*")


def slash_command(text: str) -> tuple[str, str] | None:
    """(name, argument) when `text` is a slash command: it starts with `/word` (not a path like
    /etc/hosts; a leading space sends it to the model as text)."""
    first, _, arg = text.rstrip().partition(" ")
    if not _COMMAND.fullmatch(first):
        return None
    return first.lower(), arg.strip()
