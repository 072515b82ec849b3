"""`nanobot onboard` and the chat in a terminal: ask for the model's missing API key, keep it in the config.

The key is read with echo off (getpass, from the terminal itself) and written into
providers.<name>.apiKey of the config file, mode 0600, with the rest of the file as it was. Only
in a terminal: a script or CI gets the printed hint instead, and a key the file already holds or
refers to ("${MY_KEY}") is never replaced.
"""

from __future__ import annotations

import getpass
import sys

import typer
from rich.console import Console
from rich.markup import escape

from nanobot.config import save_api_key, to_camel, written_api_key
from nanobot.errors import MissingKeyError
from nanobot.secrets_mask import remember_secrets


def can_ask(error: MissingKeyError) -> bool:
    """Whether this run may ask for the key `error` is about: a terminal on both ends, and no key
    written in the file for that provider (a reference to a variable, even an empty one, is the user's choice)."""
    if (
        not (sys.stdin.isatty() and sys.stdout.isatty())
        or error.config is None
        or not error.provider
    ):
        return False
    return not written_api_key(error.config, error.provider)


def ask_and_save(error: MissingKeyError, console: Console) -> bool:
    """Ask for the key (hidden) and save it; True when saved, False when the user skipped it."""
    assert error.config is not None
    where = f"providers.{to_camel(error.provider)}.apiKey in {error.config}"
    if (
        error.other_key
    ):  # the user may hold a key for another provider and not know the model is not theirs
        console.print(escape(error.other_key), soft_wrap=False)
    console.print(
        f"Paste your {escape(error.provider)} API key to keep it in {escape(where)} (mode 0600), "
        f"or press Enter to skip and set {escape(error.env_key)} instead.",
        soft_wrap=False,
    )
    try:
        key = getpass.getpass("API key (not shown): ").strip()
    except EOFError:
        key = ""
    except KeyboardInterrupt:
        console.print("\n[yellow]interrupted[/yellow]: no key saved")
        raise typer.Exit(130) from None
    if not key:
        return False
    if not key.isprintable() or any(c.isspace() for c in key):
        console.print(
            "[yellow]not saved: that has spaces or control characters, which no API key has[/yellow]"
        )
        return False
    remember_secrets([key])  # masked from here on, wherever it might be printed
    save_api_key(error.config, error.provider, key)
    console.print(f"saved: {escape(where)}", soft_wrap=False)
    return True
