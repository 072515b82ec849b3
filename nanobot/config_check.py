"""Checks on the config file beyond its types: unknown keys, number ranges, `${VAR}` references.

Rules (config.load_config applies them to the file, before the environment layer):

1. unknown keys inside a section this tool knows (agents.defaults, providers.<name>, tools, ...)
   give a warning with the closest known key ("did you mean ..."); unknown *sections* (nanobot's
   `channels`, `gateway`, ...) and nanobot's own keys in known sections are accepted quietly;
   at the top level only sections nanobot explains (REASONS) are quiet: a misspelt one (`tool`,
   `agent`) is warned about like a misspelt key;
2. an unknown key that looks like a misspelt security setting (restrictToWorkspace), or an
   unknown section that holds one (`"tool": {"restrictToWorkspace": true}`), is an error:
   a safety switch the user believes is on must not be silently off;
3. numbers are range-checked (RANGES), a provider's apiBase must be an http(s) URL;
4. `${NAME}` in a string value is replaced by the environment variable NAME, as HKUDS/nanobot
   does; an unset NAME stops with an error naming the key (never sent literally);
5. a setting that takes one of a few words (tools.exec.confinement, ...) refuses any other word,
   naming them all and the closest one (`"bubblewrap"`: did you mean "bwrap"?).

`closest` is the one "did you mean" rule for keys and for values.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields, is_dataclass
from typing import Any
from urllib.parse import urlparse

from nanobot.errors import ConfigError

# keys HKUDS/nanobot writes into sections we know, which this tool does not use (no warning);
# nanobot.ignored_keys names many more, with the reason `nanobot status` shows for each
NANOBOT_KEYS = {
    "agents.defaults": {"memoryWindow", "maxMessages", "name", "contextBlockLimit"},
    "tools.exec": {"pathAppend"},
    "gateway": {"host", "port"},
}

# security setting -> where it goes (for the error's hint)
SECURITY_KEYS = {"restrictToWorkspace": "tools.restrictToWorkspace"}

# dotted snake_case path -> (lowest, highest, unit) for the user's message
RANGES: dict[str, tuple[float, float, str]] = {
    "agents.defaults.temperature": (0.0, 2.0, ""),
    "agents.defaults.context_window_tokens": (1024, 10_000_000, " tokens"),
    "agents.defaults.max_tokens": (1, 1_000_000, " tokens"),
    "agents.defaults.max_tool_iterations": (1, 1000, ""),
    "agents.defaults.subagent_wait_seconds": (0, 86_400, " seconds"),
    "tools.exec.timeout": (1, 86_400, " seconds"),
    "tools.web.search.max_results": (1, 50, ""),
}
PROVIDER_TIMEOUT = (1.0, 3600.0)

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def closest(word: str, known: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The known word spelt most like `word` (case ignored), or None when none is close."""
    known = list(known)
    close = difflib.get_close_matches(word.lower(), [k.lower() for k in known], n=1, cutoff=cutoff)
    return next((k for k in known if k.lower() in close), None)


def check_choice(
    value: Any, choices: Sequence[str], where: str, source: str, hint: str | None = None
) -> None:
    """Rule 5: raise ConfigError unless `value` is one of `choices`, naming them and the closest."""
    if value in choices:
        return
    quoted = [json.dumps(c) for c in choices]
    expected = " or ".join([", ".join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)
    near = closest(value, choices) if isinstance(value, str) else None
    raise ConfigError(
        f"{source}: {where}: expected {expected}, got {json.dumps(value)}"
        + (f"; did you mean {json.dumps(near)}?" if near else ""),
        hint=hint,
    )


def to_camel(name: str) -> str:
    """A config field's JSON key: snake_case to camelCase."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


# -- nanobot's keys this tool reads but does not use (ignored_keys.py lists them for `nanobot status`)

_NOT_HERE = "not part of this terminal tool"

# dotted camelCase paths; "*" matches one name (a provider, a server). The first match wins.
REASONS: tuple[tuple[str, str], ...] = (
    ("channels", "chat apps (Telegram, Slack, email, ...) are " + _NOT_HERE),
    ("gateway", "nanobot's gateway server is " + _NOT_HERE),
    ("api", "nanobot's HTTP API is " + _NOT_HERE),
    ("transcription", "voice transcription is " + _NOT_HERE),
    (
        "agents.defaults.maxToolResultChars",
        "tool results are saved up to 16,000 characters, always",
    ),
    ("agents.defaults.providerRetryMode", "retries are bounded: 4 tries within 90 seconds"),
    ("agents.defaults.maxConcurrentSubagents", "subagents are not capped in number"),
    ("agents.defaults.dream", "nanobot's background 'dream' memory pass is " + _NOT_HERE),
    (
        "agents.defaults.idleCompactAfterMinutes",
        "consolidation runs by token budget, not by idle time",
    ),
    (
        "agents.defaults.idleCompactCheckIntervalSeconds",
        "consolidation runs by token budget, not by idle time",
    ),
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
    (
        "providers.*.thinkingStyle",
        "the thinking switch is chosen per provider (see reasoningEffort)",
    ),
    ("providers.*.displayName", "display settings of nanobot's own screens"),
    ("providers.bedrock.region", "AWS Bedrock is not supported"),
    ("providers.bedrock.profile", "AWS Bedrock is not supported"),
    (
        "tools.mcpServers.*.auth",
        "OAuth sign-in for MCP servers is not supported; use headers with a token",
    ),
    ("tools.exec.sandbox", "exec is always confined; choose how with tools.exec.confinement"),
    (
        "tools.exec.sandboxRoBinds",
        "the sandbox's folders are fixed: the workspace writable, system folders read-only",
    ),
    (
        "tools.exec.sandboxRwBinds",
        "the sandbox's folders are fixed: the workspace writable, system folders read-only",
    ),
    ("tools.exec.pathPrepend", "exec runs with the PATH nanobot was started with"),
    (
        "tools.exec.allowedEnvKeys",
        "exec gets the host's environment with secrets removed, not a list of keys",
    ),
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

UNKNOWN_REASON = "not a setting of this tool (check the spelling)"


def match_key(pattern: str, path: list[str]) -> bool:
    parts = pattern.split(".")
    return len(parts) <= len(path) and all(p in ("*", q) for p, q in zip(parts, path))


def reason_for(path: list[str]) -> str:
    for pattern, reason in REASONS:
        if match_key(pattern, path):
            return reason
    return UNKNOWN_REASON


def explains(path: list[str]) -> bool:
    """True when `path` is a nanobot key this tool knows it does not use (not a typo)."""
    return reason_for(path) != UNKNOWN_REASON


@functools.cache
def config_fields(cls: type) -> tuple[tuple[str, str, Any], ...]:
    """(field name, camelCase key, resolved type) of each field of config dataclass `cls` a file
    may set. Resolving the string annotations is the costly part of reading a config, and a
    class's fields never change, so it is done once per class."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (f.name, to_camel(f.name), hints[f.name])
        for f in fields(cls)
        if not f.metadata.get("internal")
    )


def _known_keys(cls: type) -> dict[str, Any]:
    return {key: tp for _, key, tp in config_fields(cls)}


def _explained(path: str) -> bool:
    return explains(path.split("."))


def unknown_keys(
    cls: type, data: Mapping[str, Any], where: str = ""
) -> list[tuple[str, str | None]]:
    """(dotted path of the unknown key, closest known key or None) for every section we know."""
    return [(path, close) for path, close, _ in _unknown(cls, data, where)]


def _unknown(cls: type, data: Mapping[str, Any], where: str) -> list[tuple[str, str | None, Any]]:
    """unknown_keys, with each unknown key's value."""
    found: list[tuple[str, str | None, Any]] = []
    known = _known_keys(cls)
    quiet = NANOBOT_KEYS.get(where, set())
    for key, value in data.items():
        path = f"{where}.{key}".lstrip(".")
        if key not in known:
            if key not in quiet and not _explained(path):
                found.append((path, closest(key, known, cutoff=0.7), value))
            continue
        tp = known[key]
        if isinstance(tp, type) and is_dataclass(tp) and isinstance(value, dict):
            found.extend(_unknown(tp, value, path))
        elif typing.get_origin(tp) is dict and isinstance(value, dict):
            _, val_tp = typing.get_args(tp)
            if isinstance(val_tp, type) and is_dataclass(val_tp):
                for name, sub in value.items():
                    if isinstance(sub, dict):
                        found.extend(_unknown(val_tp, sub, f"{path}.{name}"))
    return found


def _security_key_inside(value: Any) -> str | None:
    """The dotted path, inside `value`, of the first key spelt like a security setting."""
    if not isinstance(value, dict):
        return None
    for key, sub in value.items():
        squashed = str(key).lower().replace("_", "")
        if any(squashed == name.lower() for name in SECURITY_KEYS):
            return str(key)
        inner = _security_key_inside(sub)
        if inner:
            return f"{key}.{inner}"
    return None


def key_warnings(cls: type, data: Mapping[str, Any], source: str) -> list[str]:
    """Warnings for unknown keys; raises ConfigError for a misspelt security setting (rule 2)."""
    warnings = []
    for path, close, value in _unknown(cls, data, ""):
        suggestion = f"; did you mean {close}?" if close else ""
        if close in SECURITY_KEYS:
            raise ConfigError(
                f"{source}: {path}: unknown key; did you mean {path.rsplit('.', 1)[0]}.{close}?",
                hint=f"{close} is a security setting: nanobot will not start while it may be misspelt. "
                "Fix the key's spelling in the file.",
            )
        inside = _security_key_inside(value)
        if inside:
            setting = inside.rsplit(".", 1)[-1]
            home = next(v for k, v in SECURITY_KEYS.items() if k.lower() == setting.lower())
            raise ConfigError(
                f"{source}: {path}.{inside}: {path} is an unknown key, so nanobot would not read "
                f"this setting{suggestion}",
                hint=f"{setting} is a security setting: nanobot will not start while it may be "
                f"silently off. Put it at {home} in the file.",
            )
        warnings.append(f"{source}: {path}: unknown key, ignored{suggestion}")
    return warnings


def check_ranges(cfg: Any, source: str) -> None:
    for dotted, (low, high, unit) in RANGES.items():
        node = cfg
        for part in dotted.split("."):
            node = getattr(node, part)
        if not low <= node <= high:
            path = ".".join(to_camel(p) for p in dotted.split("."))
            raise ConfigError(
                f"{source}: {path}: {node:g}{unit} is out of range",
                hint=f"Use a value from {low:g} to {high:g}{unit} (or remove the key for the default).",
            )
    for name, prov in cfg.providers.items():
        low, high = PROVIDER_TIMEOUT
        if not low <= prov.timeout <= high:
            raise ConfigError(
                f"{source}: providers.{name}.timeout: {prov.timeout:g} seconds is out of range",
                hint=f"Use {low:g} to {high:g} seconds: how long the server may stay silent.",
            )
        if prov.api_base:
            url = urlparse(prov.api_base)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise ConfigError(
                    f"{source}: providers.{name}.apiBase: {prov.api_base!r} is not an http(s) URL",
                    hint="Write the server's base URL, e.g. http://localhost:8000/v1.",
                )


def expand_env(data: Any, environ: Mapping[str, str], source: str, where: str = "") -> Any:
    """`data` with every `${NAME}` in a string replaced from `environ` (rule 4)."""
    if isinstance(data, dict):
        return {
            k: expand_env(v, environ, source, f"{where}.{k}".lstrip(".")) for k, v in data.items()
        }
    if isinstance(data, list):
        return [expand_env(v, environ, source, f"{where}[{i}]") for i, v in enumerate(data)]
    if not isinstance(data, str) or "${" not in data:
        return data

    def value_of(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise ConfigError(
                f"{source}: {where}: ${{{name}}} refers to an environment variable that is not set",
                hint=f"export {name}=... before starting nanobot, or write the value itself in the file.",
            )
        return environ[name]

    return _ENV_REF.sub(value_of, data)


def decode_file(data: bytes, source: str) -> str:
    """The config file's text: a UTF-8 BOM (Windows editors write one) is accepted; any other byte
    that is not UTF-8 is named by line and byte, in words a user can act on."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{source}: line {line}, byte {exc.start - line_start + 1} is not UTF-8 "
            f"(0x{data[exc.start]:02X})",
            hint="Save the file as UTF-8 in your editor, or retype that character.",
        ) from None


def _section(tp: Any) -> type | None:
    """The dataclass a key's value is (or holds by name, as providers do), else None."""
    if is_dataclass(tp):
        return typing.cast(type, tp)
    if typing.get_origin(tp) is dict:
        _, val_tp = typing.get_args(tp)
        if is_dataclass(val_tp):
            return typing.cast(type, val_tp)
    return None


def schema_path(cls: type, parts: list[str]) -> list[str]:
    """`parts` with each level spelt as the schema spells it, matched without case or underscores."""
    out: list[str] = []
    node: type | None = cls
    named = False  # the level after a dict of sections (providers.<name>) is a name, kept as given
    for part in parts:
        if node is None or named:
            out.append(part)
            named = False
            continue
        known = _known_keys(node)
        key = (
            part
            if part in known
            else next(
                (k for k in known if k.lower().replace("_", "") == part.lower().replace("_", "")),
                part,
            )
        )
        out.append(key)
        tp = known.get(key)
        named = tp is not None and not is_dataclass(tp) and _section(tp) is not None
        node = _section(tp) if tp is not None else None
    return out


def unknown_path(cls: type, parts: list[str]) -> tuple[int, str | None] | None:
    """(index of the first level the schema does not know, its closest known key), or None when all are known."""
    node: type | None = cls
    named = False
    for index, part in enumerate(parts):
        if node is None:
            return None  # inside a free-form value (mcpServers.<name>.env, ...): any key goes
        if named:
            named = False
            continue
        known = _known_keys(node)
        if part not in known:
            return index, closest(part, known)
        tp = known[part]
        named = not is_dataclass(tp) and _section(tp) is not None
        node = _section(tp)
    return None


def mode_warning(path: os.PathLike) -> str | None:
    """A warning when the config file can be read by other users (it may hold API keys)."""
    try:
        mode = os.stat(path).st_mode & 0o777
    except OSError:
        return None
    if not mode & 0o077:
        return None
    return (
        f"{path} is readable by other users (mode {mode:04o}) and can hold API keys; "
        f"make it private with: chmod 600 {path}"
    )
