"""The keys of a config.json that this tool reads but does not use, each with the reason.

nanobot writes every setting it has; many belong to parts this terminal tool does not
have. `nanobot status` lists them, grouped by reason, so nothing is ignored silently.
A key is "used" when the Config model declares it (nanobot/config.py), so a setting added
there leaves this list by itself. How to explain a new one: add a row to REASONS.
"""

from __future__ import annotations

import typing
from dataclasses import fields, is_dataclass
from typing import Any

from nanobot.config import Config, to_camel
from nanobot.providers import reasoning, registry

_NOT_HERE = "not part of this terminal tool"

# dotted camelCase paths; "*" matches one name (a provider, a server). The first match wins.
REASONS: tuple[tuple[str, str], ...] = (
    ("channels", "chat apps (Telegram, Slack, email, ...) are " + _NOT_HERE),
    ("gateway", "nanobot's gateway server is " + _NOT_HERE),
    ("api", "nanobot's HTTP API is " + _NOT_HERE),
    ("transcription", "voice transcription is " + _NOT_HERE),
    ("agents.defaults.maxToolResultChars", "tool results are saved up to 16,000 characters, always"),
    ("agents.defaults.providerRetryMode", "retries are bounded: 4 tries within 90 seconds"),
    ("agents.defaults.maxConcurrentSubagents", "subagents are not capped in number"),
    ("agents.defaults.dream", "nanobot's background 'dream' memory pass is " + _NOT_HERE),
    ("agents.defaults.idleCompactAfterMinutes", "consolidation runs by token budget, not by idle time"),
    ("agents.defaults.idleCompactCheckIntervalSeconds", "consolidation runs by token budget, not by idle time"),
    ("agents.defaults.sessionTtlMinutes", "consolidation runs by token budget, not by idle time"),
    ("agents.defaults.unifiedSession", "sessions are chosen with --session"),
    ("agents.defaults.timezoneMode", "an empty timezone means the system's"),
    ("agents.defaults.botName", "display settings of nanobot's own screens"),
    ("agents.defaults.botIcon", "display settings of nanobot's own screens"),
    ("agents.defaults.toolHintMaxLength", "display settings of nanobot's own screens"),
    ("agents.defaults.disabledSkills", "skills are turned on and off with `nanobot skills`"),
    ("providers.*.apiType", "OpenAI is spoken through chat completions only"),
    ("providers.*.proxy", "set HTTPS_PROXY in the environment instead"),
    ("providers.*.extraQuery", "extra query parameters are not sent"),
    ("providers.*.thinkingStyle", "the thinking switch is chosen per provider (see reasoningEffort)"),
    ("providers.*.displayName", "display settings of nanobot's own screens"),
    ("providers.bedrock.region", "AWS Bedrock is not supported"),
    ("providers.bedrock.profile", "AWS Bedrock is not supported"),
    ("tools.mcpServers.*.auth", "OAuth sign-in for MCP servers is not supported; use headers with a token"),
    ("tools.exec.sandbox", "exec is always confined; choose how with tools.exec.confinement"),
    ("tools.exec.sandboxRoBinds", "the sandbox's folders are fixed: the workspace writable, system folders read-only"),
    ("tools.exec.sandboxRwBinds", "the sandbox's folders are fixed: the workspace writable, system folders read-only"),
    ("tools.exec.pathPrepend", "exec runs with the PATH nanobot was started with"),
    ("tools.exec.allowedEnvKeys", "exec gets the host's environment with secrets removed, not a list of keys"),
    ("tools.web.proxy", "set HTTPS_PROXY in the environment instead"),
    ("tools.web.userAgent", "web_fetch sends its own user agent"),
    ("tools.web.fetch", "web_fetch reads pages itself, without a reader service"),
    ("tools.web.search.baseUrl", "web_search talks to Brave or DuckDuckGo directly"),
    ("tools.web.search.timeout", "web_search uses its own time limit"),
    ("tools.ssrfWhitelist", "web_fetch never reaches private addresses"),
    ("tools.file", "the file tools are always offered"),
    ("tools.web.enable", "the web tools are always offered"),
    ("tools.cliApps", _NOT_HERE),
    ("tools.my", _NOT_HERE),
    ("tools.imageGeneration", "image generation is " + _NOT_HERE),
    ("tools.maxSessionMessagesPerMinute", "chat-app rate limits are " + _NOT_HERE),
    ("tools.webuiAllowLocalServiceAccess", "nanobot's web UI is " + _NOT_HERE),
    ("tools.webuiAllowRemotePackageInstall", "nanobot's web UI is " + _NOT_HERE),
)

_UNKNOWN = "not a setting of this tool (check the spelling)"

# nanobot's own defaults that ask for what this tool does anyway: not worth a line.
_SAME_AS_OURS: tuple[tuple[str, Any], ...] = (
    ("providers.*.apiType", "auto"),
    ("agents.defaults.providerRetryMode", "standard"),
    ("agents.defaults.timezoneMode", "auto"),
    ("agents.defaults.unifiedSession", False),
    ("tools.web.enable", True),
    ("tools.file.enable", True),
)


def _matches(pattern: str, path: list[str]) -> bool:
    parts = pattern.split(".")
    return len(parts) <= len(path) and all(p in ("*", q) for p, q in zip(parts, path))


def _reason(path: list[str]) -> str:
    for pattern, reason in REASONS:
        if _matches(pattern, path):
            return reason
    return _UNKNOWN


def explains(path: list[str]) -> bool:
    """True when `path` is a nanobot key this tool knows it does not use (not a typo)."""
    return _reason(path) != _UNKNOWN


def _is_unset(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _walk(cls: Any, data: dict, path: list[str], out: list[tuple[str, str]]) -> None:
    hints = typing.get_type_hints(cls)
    declared = {}
    for f in fields(cls):
        if not f.metadata.get("internal"):
            declared[to_camel(f.name)] = hints[f.name]
            declared[f.name] = hints[f.name]
    for key, value in data.items():
        where = path + [key]
        tp = declared.get(key)
        if tp is None:
            same = any(len(pattern.split(".")) == len(where) and _matches(pattern, where) and value == default
                       for pattern, default in _SAME_AS_OURS)
            if not _is_unset(value) and not same:
                out.append((".".join(where), _reason(where)))
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
        spec = registry.find(name)
        if spec is not None and spec.kind == "unsupported" and (prov.api_key or prov.api_base):
            out.append((f"providers.{to_camel(name)}", f"nanobot cannot talk to {name} yet: {spec.unsupported}"))
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
