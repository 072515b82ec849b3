"""The config model: ~/.nanobot/config.json, camelCase in the file, snake_case here.

Precedence: command-line flag > environment variable > file > default. Every leaf can be
set from the environment as NANOBOT_<PATH> with `__` between levels, for example
NANOBOT_AGENTS__DEFAULTS__MODEL; provider keys also come from their usual variables
(ANTHROPIC_API_KEY, OPENAI_API_KEY, ...). Sections this tool does not use (nanobot's
`channels`, `gateway.host`, ...) are kept in the file and ignored.
"""

from __future__ import annotations

import copy
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from nanobot import config_check, paths, provider_table, secrets_mask
from nanobot.config_check import to_camel
from nanobot.errors import ConfigError, MissingKeyError, storage_error
from nanobot.fsio import atomic_write
from nanobot.provider_table import ProviderSpec

CONFIG_MODE = 0o600  # the file holds API keys


# The config model keeps one line per field, its comment beside it: scripts/gen_config_docs.py
# builds docs/configuration.md from those comments.
# fmt: off
@dataclass
class AgentDefaults:
    model: str = "anthropic/claude-sonnet-4-5"  # provider/model; a bare name resolves by keyword
    provider: str = "auto"  # a provider name wins over the model's prefix; "auto" infers it
    workspace: str = ""  # folder the agent works in; empty means ~/.nanobot/workspace
    context_window_tokens: int = 65_536  # the model's context window; prompt + reply room never exceed it
    max_tokens: int = 8_192  # room kept for each reply (at most a quarter of the window)
    context_block_limit: int = 0  # optional cap on prompt tokens, for cost (history is consolidated under it); 0: off
    max_tool_calls_per_step: int = 32  # tool calls run per model step; extra calls get an error result
    consolidation_timeout_seconds: float = 90.0  # deadline for one consolidation request, retries included
    consolidation_wait_seconds: float = 5.0  # a turn waits this long for consolidation to make room, then goes ahead
    consolidation_exit_wait_seconds: float = 20.0  # on exit, consolidation gets this long to finish, then stops (resumed next run)
    consolidate_above_tokens: int = 100_000  # consolidation starts when a prompt reaches this size (or the window's budget, if lower); 0: the budget only
    temperature: float = 0.1  # sampling temperature, 0-2; OpenAI-compatible providers only
    max_tool_iterations: int = 40  # LLM calls per turn before the turn is stopped
    timezone: str = ""  # IANA name for the runtime context; empty means the system's
    subagent_wait_seconds: float = 300.0  # how long `agent -m` waits for subagents it started
    reasoning_effort: str = ""  # none/minimal/low/medium/high/xhigh/max; empty keeps the provider's default
    fallback_models: list[Any] = field(default_factory=list)  # preset names or {model, provider}; tried in order
    model_preset: str = ""  # a name in modelPresets whose settings replace the ones above (nanobot's meaning)


@dataclass
class ModelPreset:
    """A named model + settings (nanobot's modelPresets); fallbackModels may name one."""

    model: str = ""  # provider/model, as in agents.defaults.model
    provider: str = "auto"  # as agents.defaults.provider
    max_tokens: int = 0  # 0: agents.defaults.maxTokens
    context_window_tokens: int = 0  # 0: agents.defaults.contextWindowTokens
    temperature: float | None = None  # as agents.defaults.temperature; null: keep that one
    reasoning_effort: str = ""  # as agents.defaults.reasoningEffort


@dataclass
class Agents:
    defaults: AgentDefaults = field(default_factory=AgentDefaults)


@dataclass
class ProviderConfig:
    api_key: str = ""  # secret; never printed
    api_base: str = ""  # OpenAI-compatible base URL, e.g. http://localhost:11434/v1
    extra_headers: dict[str, str] = field(default_factory=dict)  # sent with every request
    extra_body: dict[str, Any] = field(default_factory=dict)  # OpenAI-compatible: extra request fields
    timeout: float = 180.0  # seconds the server may stay silent before the request fails


# the words tools.exec.confinement takes ("bwrap" is bubblewrap, by its command's name)
CONFINEMENTS = ("auto", "bwrap", "landlock", "none")


@dataclass
class ExecConfig:
    enable: bool = True  # offer the exec tool to the model
    timeout: int = 60  # seconds before a command's whole process group is killed
    confinement: str = "auto"  # "auto" (bubblewrap, else Landlock), "bwrap", "landlock" or "none" (no sandbox)
    network: bool | str = "ask"  # network for commands: false, true, or "ask" (approve each that wants it); then through nanobot's egress proxy, asked per domain
    allow: list[str] = field(default_factory=list)  # regexes: matching commands run without asking
    ask: list[str] = field(default_factory=list)  # regexes: matching commands need approval
    deny: list[str] = field(default_factory=list)  # regexes: matching commands are refused
    allow_patterns: list[str] = field(default_factory=list, metadata={"legacy": True})  # nanobot 0.3.5: only these run
    deny_patterns: list[str] = field(default_factory=list, metadata={"legacy": True})  # nanobot 0.3.5: same as deny
    allow_unconfined: bool = field(default=False, metadata={"internal": True})  # --allow-unconfined-exec


@dataclass
class SearchConfig:
    provider: str = "brave"  # "brave" (keyless DuckDuckGo while no Brave key is set) or "duckduckgo" (always, even with a key)
    api_key: str = ""  # Brave Search key (or BRAVE_API_KEY)
    max_results: int = 5  # results web_search returns (1-50): its default, and the most the model may ask for


# the names tools.web.search.provider accepts: the search services tools/web.py implements
WEB_SEARCH_PROVIDERS = ("brave", "duckduckgo")


@dataclass
class WebConfig:
    search: SearchConfig = field(default_factory=SearchConfig)
    allow_domains: list[str] = field(default_factory=list)  # web_fetch and commands reach these without asking ("example.com" covers its subdomains; "*": every domain)


@dataclass
class MCPServerConfig:
    """One MCP server, as nanobot writes it in tools.mcpServers."""

    type: str = ""  # "stdio" | "sse" | "streamableHttp"; empty: stdio with a command, else by the URL
    command: str = ""  # stdio: the program to start
    args: list[str] = field(default_factory=list)  # stdio: its arguments
    env: dict[str, str] = field(default_factory=dict)  # stdio: extra environment variables
    cwd: str = ""  # stdio: working folder (default: the workspace)
    url: str = ""  # sse / streamableHttp: the endpoint
    headers: dict[str, str] = field(default_factory=dict)  # sse / streamableHttp: sent with every request
    tool_timeout: float = 30.0  # seconds before one tool call is abandoned
    enabled_tools: list[str] = field(default_factory=lambda: ["*"])  # raw or mcp_<server>_<tool> names; * = all
    trusted: bool = False  # run this server's tools without asking first


@dataclass
class RecallConfig:
    scope: str = "all"  # search_history / read_history reach "all" sessions (others labelled) or only this "session"


@dataclass
class Tools:
    exec: ExecConfig = field(default_factory=ExecConfig)
    web: WebConfig = field(default_factory=WebConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)  # the recall tools over archived conversations
    restrict_to_workspace: bool = False  # file tools refuse paths outside the workspace; exec sees only it and system folders
    auto_approve: list[str] = field(default_factory=list)  # approval kinds allowed without asking, e.g. ["file-outside"]
    mcp_servers: dict[str, MCPServerConfig] = field(default_factory=dict)  # MCP servers whose tools the agent gets


@dataclass
class HeartbeatConfig:
    enabled: bool = True  # `nanobot serve` reads HEARTBEAT.md on a schedule (nanobot's key)
    interval_s: int = 1800  # seconds between heartbeats (nanobot's gateway.heartbeat.intervalS)
    memory: bool = False  # heartbeat turns may consolidate into MEMORY.md and HISTORY.md (else their session keeps them)


@dataclass
class Gateway:
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)  # nanobot's host/port are ignored
    jobs_poll_s: float = 5.0  # seconds between a waiting runner's (serve's, a chat's) rereads of the jobs file


@dataclass
class UsageLimits:
    helpers_per_turn: int = 5  # helpers (subagents) one turn may start; later spawns get an error result; 0: no limit
    helper_chain: int = 3  # helpers in a row where each was started by the previous one's report; 0: no limit
    background_daily_tokens: int = 1_000_000  # tokens a day for cron jobs and the heartbeat together; 0: no limit
    job_daily_tokens: int = 300_000  # tokens a day for any one cron job (or the heartbeat); 0: no limit
    daily_tokens: int = 0  # tokens a day for everything, chat included; 0: no limit


@dataclass
class ModelPrice:
    input: float = 0.0  # price per million prompt tokens (those not read from or written to the cache)
    output: float = 0.0  # price per million completion tokens
    cache_read: float | None = None  # per million prompt tokens read from the cache; unset: the input price
    cache_write: float | None = None  # per million prompt tokens written to the cache; unset: the input price


@dataclass
class UsageConfig:
    limits: UsageLimits = field(default_factory=UsageLimits)  # hard limits, checked before each provider call
    prices: dict[str, ModelPrice] = field(default_factory=dict)  # "provider/model": prices, for `nanobot usage` costs


@dataclass
class Config:
    agents: Agents = field(default_factory=Agents)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)  # keys and URLs per provider name (anthropic, openai, custom, ...)
    tools: Tools = field(default_factory=Tools)
    gateway: Gateway = field(default_factory=Gateway)
    model_presets: dict[str, ModelPreset] = field(default_factory=dict)  # named models for modelPreset / fallbacks
    usage: UsageConfig = field(default_factory=UsageConfig)  # the spend ledger's prices and the hard limits
    path: Path | None = field(default=None, metadata={"internal": True})  # where it was read from
    warnings: list[str] = field(default_factory=list, metadata={"internal": True})  # for the user, once

    @property
    def defaults(self) -> AgentDefaults:
        return self.agents.defaults

    def workspace_path(self) -> Path:
        raw = self.defaults.workspace
        # absolute, so the prompt and the tools agree whatever the current folder later is
        return (Path(raw).expanduser() if raw else paths.default_workspace()).absolute()

    def provider_config(self, name: str) -> ProviderConfig:
        return self.providers.get(provider_table.canonical(name)) or ProviderConfig()

    def secret_values(self) -> list[str]:
        """Every configured secret, so tools can keep them out of child processes and output."""
        values = [p.api_key for p in self.providers.values() if p.api_key]
        values += [v for p in self.providers.values() for k, v in p.extra_headers.items()
                   if v and any(word in k.lower() for word in ("auth", "key", "token", "secret"))]
        if self.tools.web.search.api_key:
            values.append(self.tools.web.search.api_key)
        for server in self.tools.mcp_servers.values():  # tokens for MCP servers
            values += [v.split(" ", 1)[-1] for v in server.headers.values() if v]
            values += [v for k, v in server.env.items() if v and secrets_mask.is_secret_name(k)]
        return values


# fmt: on

# --- camelCase <-> snake_case -------------------------------------------------------


def to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# --- reading ------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(
        tp, str(tp)
    )


FIX_IN_FILE = "Fix the value in the file (or remove the key to use the default)."


def _coerce(tp: Any, value: Any, where: str, source: str, fix: str) -> Any:
    """Check `value` against the declared type; raise ConfigError naming the key path, with `fix`."""
    origin = typing.get_origin(tp)

    def wrong(expected: str) -> ConfigError:
        return ConfigError(
            f"{source}: {where}: expected {expected}, got {json.dumps(value)}", hint=fix
        )

    if isinstance(tp, type) and is_dataclass(tp):
        if not isinstance(value, dict):
            raise wrong("an object")
        return _build(tp, value, where, source, fix)
    if origin is dict:
        _, val_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise wrong("an object")
        return {k: _coerce(val_tp, v, f"{where}.{k}", source, fix) for k, v in value.items()}
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise wrong("a list")
        return [_coerce(item_tp, v, f"{where}[{i}]", source, fix) for i, v in enumerate(value)]
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or len(args) != 1:
            return value
        return _coerce(args[0], value, where, source, fix)
    ok = (
        (tp is bool and isinstance(value, bool))
        or (tp is int and isinstance(value, int) and not isinstance(value, bool))
        or (tp is float and isinstance(value, (int, float)) and not isinstance(value, bool))
        or (tp is str and isinstance(value, str))
    )
    if not ok:
        raise wrong(_type_name(tp))
    return float(value) if tp is float else value


def _build(cls: type, data: dict, where: str, source: str, fix: str = FIX_IN_FILE) -> Any:
    kwargs: dict[str, Any] = {}
    for name, camel, tp in config_check.config_fields(cls):
        for key in (camel, name):
            if key in data:
                if data[key] is None:
                    break  # nanobot writes null for unset values: use the default
                kwargs[name] = _coerce(tp, data[key], f"{where}.{key}".lstrip("."), source, fix)
                break
    return cls(**kwargs)


def _check_semantics(cfg: Config, source: str) -> None:
    # Provider names are not checked here: nanobot accepts any name (one with an apiBase is an
    # OpenAI-compatible server), so an odd one fails when it is used, in resolve_model.
    cfg.providers = {provider_table.canonical(name): prov for name, prov in cfg.providers.items()}
    _check_nanobot_keys(cfg, source)
    for key in (
        "context_window_tokens",
        "max_tokens",
        "max_tool_iterations",
        "max_tool_calls_per_step",
    ):
        if getattr(cfg.defaults, key) <= 0:
            raise ConfigError(
                f"{source}: agents.defaults.{to_camel(key)}: must be a positive integer"
            )
    if cfg.defaults.context_block_limit < 0:
        raise ConfigError(
            f"{source}: agents.defaults.contextBlockLimit: must be 0 (off) or a positive number of tokens"
        )
    if cfg.defaults.consolidation_timeout_seconds <= 0:
        raise ConfigError(
            f"{source}: agents.defaults.consolidationTimeoutSeconds: must be a positive number of seconds"
        )
    if cfg.tools.exec.timeout <= 0:
        raise ConfigError(f"{source}: tools.exec.timeout: must be a positive number of seconds")
    _check_exec(cfg.tools.exec, source)
    cfg.tools.web.search.provider = (
        cfg.tools.web.search.provider.strip().lower()
    )  # "DuckDuckGo" is meant too
    if cfg.tools.web.search.provider not in WEB_SEARCH_PROVIDERS:
        # A nanobot config may name a service nanobot lacks (tavily, searxng, jina): it still loads,
        # searches the default way, and says so once.
        names = " or ".join(json.dumps(name) for name in WEB_SEARCH_PROVIDERS)
        cfg.warnings.append(
            f"tools.web.search.provider: {json.dumps(cfg.tools.web.search.provider)} is not a search "
            f"service nanobot has; searching with the default (Brave with a key, else DuckDuckGo). "
            f"Use {names}, or remove the key."
        )
        cfg.tools.web.search.provider = Config().tools.web.search.provider
    config_check.check_choice(
        cfg.tools.recall.scope, ("all", "session"), "tools.recall.scope", source
    )
    if cfg.gateway.heartbeat.interval_s < 60:
        raise ConfigError(f"{source}: gateway.heartbeat.intervalS: must be at least 60 seconds")
    if cfg.gateway.jobs_poll_s <= 0:
        raise ConfigError(f"{source}: gateway.jobsPollS: must be a positive number of seconds")
    if cfg.defaults.consolidation_wait_seconds < 0:
        raise ConfigError(
            f"{source}: agents.defaults.consolidationWaitSeconds: must not be negative"
        )
    if cfg.defaults.consolidation_exit_wait_seconds < 0:
        raise ConfigError(
            f"{source}: agents.defaults.consolidationExitWaitSeconds: must not be negative"
        )
    if cfg.defaults.consolidate_above_tokens < 0:
        raise ConfigError(
            f"{source}: agents.defaults.consolidateAboveTokens: must be 0 (the budget only) or a "
            "positive number of tokens"
        )
    if cfg.defaults.subagent_wait_seconds < 0:
        raise ConfigError(f"{source}: agents.defaults.subagentWaitSeconds: must not be negative")
    for key, value in vars(cfg.usage.limits).items():
        if value < 0:
            raise ConfigError(
                f"{source}: usage.limits.{to_camel(key)}: must be 0 (no limit) or a positive number"
            )
    config_check.check_ranges(cfg, source)


def _migrate(data: dict) -> dict:
    """nanobot's older place for restrictToWorkspace (tools.exec) still counts, as it does there."""
    tools = data.get("tools")
    exec_cfg = tools.get("exec") if isinstance(tools, dict) else None
    if (
        isinstance(tools, dict)
        and isinstance(exec_cfg, dict)
        and "restrictToWorkspace" in exec_cfg
        and "restrictToWorkspace" not in tools
    ):
        data = copy.deepcopy(data)
        data["tools"]["restrictToWorkspace"] = data["tools"]["exec"].pop("restrictToWorkspace")
    return data


def _check_exec(ex: ExecConfig, source: str) -> None:
    config_check.check_choice(
        ex.confinement,
        CONFINEMENTS,
        "tools.exec.confinement",
        source,
        hint='"auto" picks bubblewrap where it is installed, else Landlock; "bwrap" is '
        'bubblewrap (its command\'s name), "landlock" the kernel\'s Landlock, "none" no sandbox.',
    )
    if ex.network not in (False, True, "ask"):
        raise ConfigError(
            f'{source}: tools.exec.network: expected false, true or "ask", got {json.dumps(ex.network)}'
        )
    for key in ("allow", "ask", "deny", "allow_patterns", "deny_patterns"):
        for pattern in getattr(ex, key):
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ConfigError(
                    f"{source}: tools.exec.{to_camel(key)}: invalid pattern {pattern!r}: {exc}",
                    hint="Patterns are Python regular expressions, searched in the command.",
                ) from None


def _check_nanobot_keys(cfg: Config, source: str) -> None:
    """fallbackModels, modelPreset and tools.mcpServers: the parts of nanobot's format checked here."""
    for i, entry in enumerate(cfg.defaults.fallback_models):
        where = f"{source}: agents.defaults.fallbackModels[{i}]"
        if isinstance(entry, str):
            if not entry.strip():
                raise ConfigError(f"{where}: empty model name")
        elif isinstance(entry, dict):
            if not isinstance(entry.get("model"), str) or not entry["model"].strip():
                raise ConfigError(
                    f'{where}: needs a "model" (and usually a "provider")',
                    hint='Write it as {"model": "gpt-4.1", "provider": "openai"} or a modelPresets name.',
                )
        else:
            raise ConfigError(
                f"{where}: expected a model name or an object, got {json.dumps(entry)}"
            )
    for name, server in cfg.tools.mcp_servers.items():
        if server.tool_timeout <= 0:
            raise ConfigError(
                f"{source}: tools.mcpServers.{name}.toolTimeout: must be a positive number of seconds"
            )
    preset = cfg.defaults.model_preset
    if (
        preset and preset != "default" and preset not in cfg.model_presets
    ):  # "default": nanobot's name for none
        known = ", ".join(cfg.model_presets) or "none are defined"
        raise ConfigError(
            f"{source}: agents.defaults.modelPreset: no preset named {preset!r} (modelPresets: {known})"
        )


def read_file(path: Path) -> dict:
    """The raw JSON object in `path` ({} when missing). Raises ConfigError when unreadable."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror}") from None
    text = config_check.decode_file(data, str(path))
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
            hint="Fix the file by hand; nanobot does not rewrite a file it could not read.",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: the top level must be a JSON object",
            hint='Write the settings inside { }, e.g. {"agents": {"defaults": {"model": '
            '"anthropic/claude-sonnet-4-5"}}}; nanobot does not rewrite a file it could not read.',
        )
    return data


def _env_layer(environ: typing.Mapping[str, str]) -> dict:
    """Settings from NANOBOT_A__B__C variables and the providers' usual key variables."""
    layer: dict = {}
    for spec in provider_table.PROVIDERS:
        if spec.env_key and environ.get(spec.env_key):
            layer.setdefault("providers", {}).setdefault(to_camel(spec.name), {})["apiKey"] = (
                environ[spec.env_key]
            )
    if environ.get("BRAVE_API_KEY"):
        layer.setdefault("tools", {}).setdefault("web", {}).setdefault("search", {})["apiKey"] = (
            environ["BRAVE_API_KEY"]
        )
    for _, parts, value in _env_settings(environ):
        _put(layer, parts, value)
    return layer


def _put(node: dict, parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _env_settings(environ: typing.Mapping[str, str]) -> list[tuple[str, list[str], Any]]:
    """(variable, key path, value) for each NANOBOT_A__B variable, by name."""
    out = []
    for name in sorted(environ):
        if not name.startswith("NANOBOT_") or "__" not in name:
            continue
        raw = environ[name]
        # each level matched to the schema's key whatever its case (APIBASE, API_BASE: apiBase)
        parts = config_check.schema_path(
            Config, [to_camel(p.lower()) for p in name[len("NANOBOT_") :].split("__")]
        )
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if isinstance(value, (int, float)) and parts[-1] in ("apiKey", "model", "workspace"):
            value = raw  # a numeric-looking key or name stays a string
        out.append((name, parts, value))
    return out


def _check_env(environ: typing.Mapping[str, str]) -> list[str]:
    """Each NANOBOT_A__B variable checked on its own, so an error names it and says how to fix
    it there; returns a word for each that names no setting, with the closest that does. One
    that looks like a security setting stops nanobot instead (config_check's rule 2)."""
    out = []
    for name, parts, value in _env_settings(environ):
        miss = config_check.unknown_path(Config, parts)
        if miss is None:
            _build(Config, _put_new(parts, value), "", name, f"Fix or unset {name}.")
            continue
        at, close = miss
        fixed = [*parts[:at], close, *parts[at + 1 :]] if close else []
        better = "NANOBOT_" + "__".join(to_snake(p).upper() for p in fixed) if fixed else ""
        leaf = (close if at == len(parts) - 1 and close else parts[-1]).lower().replace("_", "")
        security = next((k for k in config_check.SECURITY_KEYS if k.lower() == leaf), None)
        if security:
            raise ConfigError(
                f"environment: {name} names no setting"
                + (f"; did you mean {better}?" if better else ""),
                hint=f"{security} is a security setting: nanobot will not start while it may be "
                "silently off. Fix or unset the variable.",
            )
        out.append(
            f"environment: {name} names no setting, ignored"
            + (f"; did you mean {better}?" if better else "")
        )
    return out


def _put_new(parts: list[str], value: Any) -> dict:
    layer: dict = {}
    _put(layer, parts, value)
    return layer


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# Maps whose keys are names the user chose (an MCP server, an environment variable, an HTTP
# header), not settings: their keys are kept exactly as written.
_FREE_FORM = ("mcpServers", "env", "headers", "extraHeaders", "extraBody", "modelPresets", "prices")


def _normalize_keys(data: Any, free_form: bool = False) -> Any:
    """Accept snake_case keys in the file too, storing them camelCase for merging."""
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            key = k if free_form or not ("_" in k and k.islower()) else to_camel(k)
            if key == "providers" and isinstance(v, dict):
                # one spelling per provider, whatever the file used (lm_studio, lmStudio, lm-studio)
                out[key] = {
                    to_camel(provider_table.canonical(n)): _normalize_keys(p) for n, p in v.items()
                }
                continue
            out[key] = _normalize_keys(v, free_form=key in _FREE_FORM and not free_form)
        return out
    return data


def load_config(
    path: Path | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    environ: typing.Mapping[str, str] | None = None,
) -> Config:
    """Load the config with flag > env > file > default precedence.

    `overrides` maps dotted snake_case paths (e.g. "agents.defaults.model") to flag values.
    """
    path = Path(path) if path else paths.default_config_path()
    environ = os.environ if environ is None else environ
    file_data = _migrate(_normalize_keys(read_file(path)))
    warnings = config_check.key_warnings(Config, file_data, str(path))
    file_data = config_check.expand_env(file_data, environ, str(path))
    file_cfg = _build(Config, file_data, "", str(path))  # validate the file on its own first
    _check_semantics(file_cfg, str(path))
    env_warnings = _check_env(environ)
    merged = deep_merge(file_data, _env_layer(environ))
    _apply_preset(merged)
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = merged
        *parents, leaf = [to_camel(p) for p in dotted.split(".")]
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    cfg = _build(Config, merged, "", "environment or flags")
    _check_semantics(cfg, "environment or flags")
    cfg.path = path
    private = config_check.mode_warning(path) if file_cfg.secret_values() else None
    cfg.warnings = warnings + env_warnings + ([private] if private else []) + cfg.warnings
    secrets_mask.remember_secrets(
        cfg.secret_values()
    )  # the one masker hides them exactly from now on
    secrets_mask.remember_environment(environ)
    return cfg


def _apply_preset(data: dict) -> None:
    """agents.defaults.modelPreset: the preset's settings replace the defaults' (flags still win)."""
    defaults = data.get("agents", {}).get("defaults", {})
    name = defaults.get("modelPreset") if isinstance(defaults, dict) else None
    preset = (
        (data.get("modelPresets") or {}).get(name)
        if isinstance(name, str) and name != "default"
        else None
    )
    if not isinstance(preset, dict):
        return
    for key in (
        "model",
        "provider",
        "maxTokens",
        "contextWindowTokens",
        "temperature",
        "reasoningEffort",
    ):
        if preset.get(key) is not None:
            defaults[key] = preset[key]


# --- writing ------------------------------------------------------------------------


def _as_file_dict(obj: Any) -> Any:
    if is_dataclass(obj):
        return {
            to_camel(f.name): _as_file_dict(getattr(obj, f.name))
            for f in fields(obj)
            if not f.metadata.get("internal") and not f.metadata.get("legacy")
        }
    if isinstance(obj, dict):
        return {k: _as_file_dict(v) for k, v in obj.items()}
    return obj


def default_file_dict(workspace: Path | None = None) -> dict:
    """What `nanobot onboard` writes: every default, the workspace given or the default one."""
    cfg = Config()
    cfg.agents.defaults.workspace = str(workspace or paths.default_workspace())
    data = _as_file_dict(cfg)
    del data["gateway"]  # nanobot's section: its defaults apply until the user sets it (README)
    data["providers"] = {
        name: _as_file_dict(ProviderConfig())
        for name in ("anthropic", "openai", "openrouter", "ollama", "custom")
    }
    return data


def fill_missing(existing: dict, defaults: dict) -> dict:
    """Defaults added where the user's file has no value; the user's values always win."""
    out = copy.deepcopy(existing)
    for key, value in defaults.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = fill_missing(out[key], value)
    return out


def save_file(path: Path, data: dict) -> None:
    """Write the config atomically with mode 0600 (its folder, when it is the nanobot home, 0700)."""
    try:
        if Path(path).absolute().parent == paths.nanobot_home().absolute():
            paths.ensure_private_dir(paths.nanobot_home())
        # a config that is a link (a dotfiles folder) stays one: the file it points at is rewritten
        target = Path(path).resolve() if Path(path).is_symlink() else path
        atomic_write(
            target, json.dumps(data, indent=2, ensure_ascii=False) + "\n", mode=CONFIG_MODE
        )
    except OSError as exc:
        raise storage_error(exc, "write the config file", path) from None


def ensure_config_file(path: Path, workspace: Path | None = None) -> tuple[bool, list[str]]:
    """Create or complete the config file; `workspace` is written where the file names none.
    Returns (changed, added dotted keys).

    The user's values are never overwritten, and a file that cannot be read is not touched.
    """
    existing = read_file(path)
    _check_semantics(_build(Config, _normalize_keys(existing), "", str(path)), str(path))
    merged = fill_missing(existing, default_file_dict(workspace))
    added = _diff_keys(existing, merged)
    if added or not path.exists():
        save_file(path, merged)
        return True, added
    if path.stat().st_mode & 0o077:
        os.chmod(path, CONFIG_MODE)
    return False, []


def _diff_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in new.items():
        where = f"{prefix}{key}"
        if key not in old:
            out.append(where)
        elif isinstance(value, dict) and isinstance(old[key], dict):
            out.extend(_diff_keys(old[key], value, where + "."))
    return out


# --- providers ----------------------------------------------------------------------


@dataclass
class ResolvedModel:
    spec: ProviderSpec
    model: str  # the name the provider receives
    api_key: str
    api_base: str | None
    extra_headers: dict[str, str]
    extra_body: dict[str, Any] = field(default_factory=dict)
    reasoning_effort: str = ""  # agents.defaults.reasoningEffort (or the fallback's own)
    label: str = ""  # provider/model as the user wrote it, for messages
    temperature: float | None = None  # a fallback's own temperature; None: the turn's
    max_tokens: int = 0  # a fallback's own reply cap; 0: the turn's
    context_window: int = 0  # a fallback's own window; 0: agents.defaults.contextWindowTokens
    timeout: float = 180.0  # providers.<name>.timeout


def resolve_model(
    cfg: Config, model: str | None = None, *, provider: str | None = None
) -> ResolvedModel:
    """Which provider serves the model, with its key and base URL.

    An explicit provider (agents.defaults.provider, or `provider`) wins and the model name is
    passed through; otherwise "provider/model" splits on the first slash, and a bare name
    resolves by keyword. A provider we cannot speak fails here, when it is used, with the reason.
    """
    model = (model or cfg.defaults.model).strip()
    if not model:
        raise ConfigError(
            "no model configured", hint="Set agents.defaults.model in the config or pass --model."
        )
    spec: ProviderSpec | None = None
    name = model
    explicit = (provider if provider is not None else cfg.defaults.provider).strip()
    if explicit and explicit != "auto":
        spec = _provider_named(cfg, explicit, f"provider {explicit!r}")
        where = "agents.defaults.provider" if provider is None else "the fallback's provider"
        name = _name_for(cfg, spec, model, where)
    elif "/" in model and _known_or_configured(cfg, model.split("/", 1)[0]):
        prefix, name = model.split("/", 1)
        spec = _provider_named(cfg, prefix, f"model {model!r}")
    else:
        spec = provider_table.by_keyword(model)
    if spec is None:
        raise ConfigError(
            f"cannot tell which provider serves model {model!r}",
            hint="Write it as provider/model (e.g. anthropic/claude-sonnet-4-5, openai/gpt-4.1, "
            "ollama/qwen3) or set agents.defaults.provider.",
        )
    pc = cfg.provider_config(spec.name)
    api_base = pc.api_base or spec.default_api_base
    if spec.kind == "openai" and not api_base and spec.name != "openai":
        raise ConfigError(
            f"provider {spec.name!r} needs a base URL",
            hint=f"Set providers.{to_camel(spec.name)}.apiBase (e.g. http://localhost:8000/v1) in the config.",
        )
    if spec.key_required and not pc.api_key:
        keyed = [
            name
            for name, other in sorted(cfg.providers.items())
            if other.api_key
            and name != spec.name
            and getattr(provider_table.find(name), "kind", "") != "unsupported"
        ]
        raise missing_key_error(
            spec, cfg.path, keyed, forced=explicit not in ("", "auto") and provider is None
        )
    return ResolvedModel(
        spec,
        name,
        pc.api_key,
        api_base,
        dict(pc.extra_headers),
        dict(pc.extra_body),
        reasoning_effort=cfg.defaults.reasoning_effort,
        label=model,
        timeout=pc.timeout,
    )


# the variables the official SDKs read for a base URL when they are given none
_SDK_BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


def _name_for(cfg: Config, spec: ProviderSpec, model: str, where: str) -> str:
    """The name sent to a provider asked for by name (`where`). Only the vendor's own API
    (ProviderSpec.own_models, reached without an apiBase or the SDK's base-URL variable) is known
    to have no "provider/" names: there a prefix naming it is dropped, and one naming another
    provider is refused before any request. A gateway, a host or a proxy gets the name as written."""
    prefix, _, rest = model.partition("/")
    named = provider_table.find(prefix) if rest else None
    if named is None or not spec.own_models or cfg.provider_config(spec.name).api_base:
        return model
    if spec.default_api_base is None and os.environ.get(_SDK_BASE_URL_ENV.get(spec.kind, "")):
        return model
    if named.name == spec.name:
        return rest
    example = _EXAMPLE_MODELS.get(spec.name, f"{spec.name}/<model>")
    raise ConfigError(
        f"model {model!r} names provider {named.name}, but {where} is {spec.name!r}, whose API "
        "has no model of that name",
        hint=f'To use {named.name}: set {where} to "auto" (the prefix then picks the provider) '
        f'or to "{named.name}". To stay on {spec.name}: give one of its models, e.g. {example}.',
    )


def _known_or_configured(cfg: Config, name: str) -> bool:
    return provider_table.find(name) is not None or bool(cfg.provider_config(name).api_base)


def _provider_named(cfg: Config, name: str, what: str) -> ProviderSpec:
    spec = provider_table.find(name)
    if spec is None:
        if cfg.provider_config(name).api_base:
            return provider_table.dynamic(
                name
            )  # nanobot's custom providers: any name with an apiBase
        known = ", ".join(s.name for s in provider_table.PROVIDERS if s.kind != "unsupported")
        raise ConfigError(
            f"{what}: unknown provider {name!r}",
            hint=f"Known providers: {known}; or give providers.{name}.apiBase for an "
            "OpenAI-compatible server.",
        )
    if spec.kind == "unsupported":
        raise ConfigError(
            f"{what}: nanobot cannot talk to provider {spec.name!r} yet: {spec.unsupported}."
        )
    return spec


@dataclass
class UnusableModel:
    """A fallback model that cannot be tried; said when it would have been."""

    label: str
    reason: str


def resolve_fallbacks(cfg: Config) -> list[ResolvedModel | UnusableModel]:
    """agents.defaults.fallbackModels, resolved in order (a preset name or {model, provider, ...})."""
    out: list[ResolvedModel | UnusableModel] = []
    for entry in cfg.defaults.fallback_models:
        try:
            out.append(_resolve_fallback(cfg, entry))
        except ConfigError as exc:
            label = entry if isinstance(entry, str) else str(entry.get("model"))
            out.append(UnusableModel(label, exc.message))
    return out


def _resolve_fallback(cfg: Config, entry: str | dict) -> ResolvedModel:
    """One fallbackModels entry: a modelPresets name, a provider/model name, or {model, provider, ...}."""
    if isinstance(entry, str) and entry in cfg.model_presets:
        p = cfg.model_presets[entry]
        settings = {
            "model": p.model,
            "provider": p.provider,
            "temperature": p.temperature,
            "maxTokens": p.max_tokens,
            "contextWindowTokens": p.context_window_tokens,
            "reasoningEffort": p.reasoning_effort,
        }
    elif isinstance(entry, str):
        settings = {"model": entry}  # not a preset: a provider/model name
    else:
        settings = entry
    resolved = resolve_model(
        cfg, str(settings["model"]), provider=str(settings.get("provider") or "auto")
    )
    effort = settings.get("reasoningEffort", settings.get("reasoning_effort"))
    if effort:
        resolved.reasoning_effort = str(effort)
    temperature = settings.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):
        resolved.temperature = float(temperature)
    cap = settings.get("maxTokens", settings.get("max_tokens"))
    if isinstance(cap, int) and not isinstance(cap, bool) and cap > 0:
        resolved.max_tokens = cap
    window = settings.get("contextWindowTokens", settings.get("context_window_tokens"))
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        resolved.context_window = window
    if isinstance(entry, str) and entry in cfg.model_presets:
        resolved.label = f"{entry} ({resolved.label})"
    return resolved


_EXAMPLE_MODELS = {"openai": "openai/gpt-4.1", "anthropic": "anthropic/claude-sonnet-4-5"}


def missing_key_error(
    spec: ProviderSpec,
    config: Path | None = None,
    keyed: list[str] | None = None,
    *,
    forced: bool = False,
) -> MissingKeyError:
    """`config`: the file the key would go in (the default one when not given); `keyed`: the providers
    that do have a key (the environment's included), which the user may have meant; `forced`: the
    provider was named by agents.defaults.provider, which a --model prefix does not change."""
    config = config or paths.default_config_path()
    make_it = "" if config.exists() else " (`nanobot onboard` creates that file)"
    other_key = ""
    # with agents.defaults.provider set, `--model openai/...` would still go to that provider
    unforce = f'set agents.defaults.provider to "auto" in {config}, then ' if forced else ""
    if keyed:
        example = _EXAMPLE_MODELS.get(keyed[0], f"{keyed[0]}/<model>")
        other = other_key = (
            f"You have a key for {', '.join(keyed)}: to use it, {unforce}set agents.defaults.model "
            f"(e.g. {example}) or run `nanobot agent --model {example}`."
        )
    else:
        name = "anthropic" if spec.name == "openai" else "openai"
        other = (
            f"Another provider: {unforce}{'run ' if forced else ''}`nanobot agent --model "
            f"{_EXAMPLE_MODELS[name]}` with {provider_table.BY_NAME[name].env_key} set."
        )
    return MissingKeyError(
        f"no API key for provider {spec.name!r}",
        hint=f"Set {spec.env_key} in the environment, or put the key in providers.{to_camel(spec.name)}.apiKey in "
        f"{config}{make_it}. {other} To try nanobot with no key at all: "
        "`nanobot demo` (scripted answers from a bundled fake LLM).",
        provider=spec.name,
        env_key=spec.env_key or "",
        config=config,
        other_key=other_key,
    )


def written_api_key(path: Path, provider: str) -> str:
    """providers.<provider>.apiKey as the file at `path` spells it ("" when absent): a reference
    such as "${MY_KEY}" counts as written, even while its variable is empty."""
    return _written_key(read_file(path), provider)


def _written_key(data: dict, provider: str) -> str:
    entry = _provider_entry(data, provider)
    value = next((entry[k] for k in ("apiKey", "api_key") if k in entry), "") if entry else ""
    return value if isinstance(value, str) else ""


def save_api_key(path: Path, provider: str, key: str) -> None:
    """Put `key` in providers.<provider>.apiKey of the config file at `path` (a complete new
    file when there is none), keeping everything else in it as the user wrote it; mode 0600.
    A key the file already holds (or refers to) is never replaced here."""
    data = read_file(path) if path.exists() else default_file_dict()
    if _written_key(data, provider):
        raise ConfigError(
            f"{path}: providers.{to_camel(provider)}.apiKey is already set there",
            hint="Edit the file by hand to change it.",
        )
    providers = data.setdefault("providers", {})
    if not isinstance(providers, dict):
        raise ConfigError(f"{path}: providers must be an object", hint="Fix the file by hand.")
    entry = _provider_entry(data, provider)
    if entry is None:
        entry = providers[to_camel(provider)] = {}
    entry.pop("api_key", None)
    entry["apiKey"] = key
    save_file(path, data)


def _provider_entry(data: dict, provider: str) -> dict | None:
    """The file's object for `provider`, however the file spells its name (lmStudio, lm_studio)."""
    providers = data.get("providers")
    if not isinstance(providers, dict):
        return None
    for name, entry in providers.items():
        if provider_table.canonical(name) == provider_table.canonical(provider):
            if not isinstance(entry, dict):
                raise ConfigError(
                    f"providers.{name} must be an object", hint="Fix the file by hand."
                )
            return entry
    return None


def mask_key(key: str) -> str:
    if not key:
        return "(not set)"
    if len(key) <= 8:
        return "****"
    return f"{key[:4]}…{key[-4:]}"
