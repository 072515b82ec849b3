"""The keys of a config.json that this tool reads but does not use, each with the reason.

nanobot writes every setting it has; many belong to parts this terminal tool does not
have. `nanobot status` lists them, grouped by reason, so nothing is ignored silently.
A key is "used" when the Config model declares it (nanobot/config.py), so a setting added
there leaves this list by itself. How to explain a new one: add a row to REASONS (in
config_check.py, which also asks it when it looks for misspelt keys).
"""

from __future__ import annotations

import typing
from dataclasses import is_dataclass
from typing import Any

from nanobot import provider_table, reasoning
from nanobot.config import Config
from nanobot.config_check import config_fields, match_key, reason_for, to_camel

# nanobot's own defaults that ask for what this tool does anyway: not worth a line.
_SAME_AS_OURS: tuple[tuple[str, Any], ...] = (
    ("providers.*.apiType", "auto"),
    ("agents.defaults.providerRetryMode", "standard"),
    ("agents.defaults.timezoneMode", "auto"),
    ("agents.defaults.unifiedSession", False),
    ("tools.web.enable", True),
    ("tools.file.enable", True),
)


def _is_unset(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _walk(cls: Any, data: dict, path: list[str], out: list[tuple[str, str]]) -> None:
    declared = {}
    for name, camel, tp in config_fields(cls):
        declared[camel] = tp
        declared[name] = tp
    for key, value in data.items():
        where = path + [key]
        tp = declared.get(key)
        if tp is None:
            same = any(
                len(pattern.split(".")) == len(where)
                and match_key(pattern, where)
                and value == default
                for pattern, default in _SAME_AS_OURS
            )
            if not _is_unset(value) and not same:
                out.append((".".join(where), reason_for(where)))
            continue
        if is_dataclass(tp) and isinstance(value, dict):
            _walk(tp, value, where, out)
        elif typing.get_origin(tp) is dict and isinstance(value, dict):
            item = typing.get_args(tp)[1]
            if is_dataclass(item):
                for name, sub in value.items():
                    if isinstance(sub, dict):
                        _walk(item, sub, where + [name], out)


def ignored(raw: dict, cfg: Config) -> list[tuple[str, str]]:
    """(dotted key, reason) for every key in the file that has a value and that we do not use."""
    out: list[tuple[str, str]] = []
    if isinstance(raw, dict):
        _walk(Config, raw, [], out)
    for name, prov in sorted(cfg.providers.items()):
        spec = provider_table.find(name)
        if spec is not None and spec.kind == "unsupported" and (prov.api_key or prov.api_base):
            out.append(
                (
                    f"providers.{to_camel(name)}",
                    f"nanobot cannot talk to {name} yet: {spec.unsupported}",
                )
            )
    if cfg.defaults.reasoning_effort:
        why = _reasoning_not_sent(cfg)
        if why:
            out.append(("agents.defaults.reasoningEffort", why))
    return out


def _reasoning_not_sent(cfg: Config) -> str:
    from nanobot.config import resolve_model
    from nanobot.errors import NanobotError

    try:
        resolved = resolve_model(cfg)
    except NanobotError:
        return ""
    return reasoning.not_sent_reason(resolved.spec, resolved.model)


def grouped(items: list[tuple[str, str]]) -> list[str]:
    """One line per reason: "key, key: reason"."""
    by_reason: dict[str, list[str]] = {}
    for key, reason in items:
        by_reason.setdefault(reason, []).append(key)
    return [f"{', '.join(keys)}: {reason}" for reason, keys in by_reason.items()]
