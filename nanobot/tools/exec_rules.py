"""The user's exec rules: allow / ask / deny patterns and the network setting.

These decide when to *ask*; they are not the boundary (the OS sandbox is, see
nanobot/sandbox). A pattern is a Python regular expression searched case-insensitively in
each command the line runs (nanobot/policy/commands.py parses it: each side of `&&`, `;`,
pipes, substitutions, what `env`, `find -exec`, `xargs`, `sh -c` run ...). Order: deny wins,
then allow, then ask.
- deny: refused and not run when the whole line or any one of its commands matches;
- allow: runs without asking (and gets network when network is "ask") only when EVERY
  command of the line matches an allow pattern; a line the parser cannot read, or a command
  decided at run time (`$cmd`, `sh -c "$x"`), is never allowed by a pattern;
- ask: asked when the whole line or any one of its commands matches.
nanobot 0.3.5's `denyPatterns` are read as deny, its `allowPatterns` as allow; and since
0.3.5 refused every command matching none of its allowPatterns, that stays true when the
old key is used (`allow_only`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from nanobot.errors import ConfigError
from nanobot.errors import UnparsableCommand as Unparsable
from nanobot.policy.commands import Command, parse

NETWORK_MODES = (False, True, "ask")

# When network is "ask", a command that looks like it wants the network is asked about;
# one that does not look like it runs without network (the sandbox has none), so getting
# this guess wrong never gives network to anything: it only fails to ask.
_NETWORKY = re.compile(
    r"https?://|ftp://|/dev/(?:tcp|udp)/"
    r"|(?:^|[\s;&|(`$])(?:curl|wget|ssh|scp|sftp|rsync|nc|ncat|netcat|socat|telnet|ftp|ping|dig|nslookup"
    r"|host|whois|aria2c|httpie|http|xh)\b"
    r"|\bgit\s+(?:clone|fetch|pull|push|ls-remote|submodule)\b"
    r"|\b(?:pip3?|uv|poetry|pipx)\s+(?:install|download|add|sync|lock)\b(?!.*--no-index)"
    r"|\b(?:npm|pnpm|yarn|bun)\s+(?:install|i|add|ci|update|publish)\b|\bnpx\b"
    r"|\b(?:apt|apt-get|brew|dnf|yum|apk|gem|cargo|go)\s+(?:install|update|upgrade|get|fetch|add)\b"
    r"|\bdocker\s+(?:pull|push|login)\b",
    re.IGNORECASE,
)


def wants_network(command: str) -> bool:
    return bool(_NETWORKY.search(command))


def _commands(command: str) -> list[Command] | None:
    try:
        return parse(command)
    except Unparsable:
        return None


def _texts(command: str) -> list[str]:
    """The whole line, then each command it runs (the whole line alone when it cannot be parsed)."""
    return [command, *(c.text for c in _commands(command) or ())]


def _compile(patterns: list[str], where: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for p in patterns:
        try:
            out.append(re.compile(p, re.IGNORECASE))
        except re.error as exc:
            raise ConfigError(
                f"{where}: invalid pattern {p!r}: {exc}",
                hint="Patterns are Python regular expressions, searched in the command.",
            ) from None
    return tuple(out)


@dataclass(frozen=True)
class ExecRules:
    allow: tuple[re.Pattern[str], ...] = ()
    ask: tuple[re.Pattern[str], ...] = ()
    deny: tuple[re.Pattern[str], ...] = ()
    allow_only: bool = False  # nanobot 0.3.5's allowPatterns: anything else is refused
    network: bool | str = "ask"  # False, True or "ask"
    unconfined_ok: bool = (
        False  # the user chose to run commands without a sandbox (config "none" or the flag)
    )

    @classmethod
    def from_lists(
        cls,
        *,
        allow: Sequence[str] = (),
        ask: Sequence[str] = (),
        deny: Sequence[str] = (),
        legacy_allow: Sequence[str] = (),
        legacy_deny: Sequence[str] = (),
        network: bool | str = "ask",
        unconfined_ok: bool = False,
    ) -> ExecRules:
        if network not in NETWORK_MODES:
            raise ConfigError(f'tools.exec.network: expected false, true or "ask", got {network!r}')
        return cls(
            allow=_compile([*allow, *legacy_allow], "tools.exec.allow"),
            ask=_compile(list(ask), "tools.exec.ask"),
            deny=_compile([*deny, *legacy_deny], "tools.exec.deny"),
            allow_only=bool(legacy_allow),
            network=network,
            unconfined_ok=unconfined_ok,
        )

    def denied_by(self, command: str) -> str | None:
        """The deny pattern that refuses `command` (or why allow_only refuses it), else None."""
        texts = _texts(command) if self.deny else []
        for p in self.deny:
            if any(p.search(t) for t in texts):
                return f"it matches the deny pattern {p.pattern!r} (tools.exec.deny)"
        if self.allow_only and not self.allowed(command):
            return "it matches none of tools.exec.allowPatterns (only those commands may run)"
        return None

    def allowed(self, command: str) -> bool:
        """Every command the line runs matches an allow pattern (and the line could be parsed)."""
        if not self.allow:
            return False
        commands = _commands(command)
        return bool(commands) and all(
            not c.opaque and any(p.search(c.text) for p in self.allow) for c in commands or ()
        )

    def asked_by(self, command: str) -> str | None:
        texts = _texts(command) if self.ask else []
        for p in self.ask:
            if any(p.search(t) for t in texts):
                return p.pattern
        return None
