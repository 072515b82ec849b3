"""Config: precedence, nanobot compatibility, and every failure mode."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from nanobot.config import ensure_config_file, load_config, mask_key, resolve_model
from nanobot.errors import ConfigError, MissingKeyError


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_defaults_without_a_file(tmp_path):
    cfg = load_config(tmp_path / "missing.json", environ={})
    assert cfg.defaults.model == "anthropic/claude-sonnet-4-5"
    assert cfg.defaults.context_window_tokens == 65536
    assert cfg.defaults.max_tool_iterations == 40
    assert cfg.tools.exec.enable is True


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    path = write(
        tmp_path / "c.json",
        {"agents": {"defaults": {"model": "file/m", "maxTokens": 111, "temperature": 0.5}}},
    )
    env = {
        "NANOBOT_AGENTS__DEFAULTS__MODEL": "openai/env-model",
        "NANOBOT_AGENTS__DEFAULTS__MAX_TOKENS": "222",
    }
    assert load_config(path, environ={}).defaults.model == "file/m"
    cfg = load_config(path, environ=env)
    assert (cfg.defaults.model, cfg.defaults.max_tokens, cfg.defaults.temperature) == (
        "openai/env-model",
        222,
        0.5,
    )
    cfg = load_config(path, environ=env, overrides={"agents.defaults.model": "anthropic/flag"})
    assert cfg.defaults.model == "anthropic/flag"
    assert cfg.defaults.context_window_tokens == 65536  # default still fills the rest


def test_provider_key_env_beats_file(tmp_path):
    path = write(tmp_path / "c.json", {"providers": {"openai": {"apiKey": "sk-file"}}})
    assert load_config(path, environ={}).providers["openai"].api_key == "sk-file"
    assert (
        load_config(path, environ={"OPENAI_API_KEY": "sk-env"}).providers["openai"].api_key
        == "sk-env"
    )


def test_a_nanobot_config_file_loads_and_unknown_sections_are_kept(tmp_path):
    nanobot_file = {
        "agents": {
            "defaults": {
                "workspace": "~/.nanobot/workspace",
                "model": "anthropic/claude-opus-4-5",
                "maxTokens": 8192,
                "temperature": 0.7,
                "maxToolIterations": 20,
                "memoryWindow": 50,
            }
        },
        "channels": {"telegram": {"enabled": False, "token": ""}},
        "gateway": {"host": "0.0.0.0", "port": 18790},
        "providers": {
            "anthropic": {"apiKey": "sk-ant-x", "apiBase": None, "extraHeaders": None},
            "groq": {"apiKey": ""},
            "github_copilot": {"apiKey": ""},
        },
        "tools": {
            "web": {"search": {"apiKey": "", "maxResults": 5}},
            "exec": {"timeout": 60},
            "restrictToWorkspace": False,
            "mcpServers": {},
        },
    }
    path = write(tmp_path / "c.json", json.dumps(nanobot_file))
    before = path.read_text()
    cfg = load_config(path, environ={})
    assert cfg.defaults.model == "anthropic/claude-opus-4-5"
    assert resolve_model(cfg).api_key == "sk-ant-x"
    assert not [w for w in cfg.warnings if "unknown key" in w]  # nanobot's own keys and sections
    ensure_config_file(path)
    after = json.loads(path.read_text())
    assert (
        after["channels"] == nanobot_file["channels"]
        and after["gateway"] == nanobot_file["gateway"]
    )
    assert after["agents"]["defaults"]["temperature"] == 0.7  # user's value untouched
    assert after["agents"]["defaults"]["contextWindowTokens"] == 65536  # missing default added
    assert before != path.read_text()


@pytest.mark.parametrize(
    "content,expected",
    [
        ("{not json", "invalid JSON at line 1"),
        (
            '{"agents": {"defaults": {"maxTokens": "lots"}}}',
            "agents.defaults.maxTokens: expected an integer",
        ),
        ('{"tools": {"exec": {"enable": "yes"}}}', "tools.exec.enable: expected true or false"),
        (
            '{"agents": {"defaults": {"fallbackModels": [3]}}}',
            "fallbackModels[0]: expected a model name or an object",
        ),
        (
            '{"agents": {"defaults": {"modelPreset": "fast"}}}',
            "modelPreset: no preset named 'fast'",
        ),
        (
            '{"tools": {"mcpServers": {"x": {"args": "not-a-list"}}}}',
            "tools.mcpServers.x.args: expected a list",
        ),
        (
            '{"tools": {"mcpServers": {"x": {"toolTimeout": 0}}}}',
            "tools.mcpServers.x.toolTimeout: must be a positive",
        ),
        ("[1, 2]", "top level must be a JSON object"),
        ('{"agents": {"defaults": {"contextWindowTokens": 0}}}', "must be a positive integer"),
        ('{"tools": {"exec": {"timeout": 0}}}', "tools.exec.timeout: must be a positive number"),
        (
            '{"agents": {"defaults": {"subagentWaitSeconds": -1}}}',
            "subagentWaitSeconds: must not be negative",
        ),
        (
            '{"agents": {"defaults": {"consolidationWaitSeconds": -1}}}',
            "consolidationWaitSeconds: must not be negative",
        ),
        (
            '{"gateway": {"jobsPollS": 0}}',
            "gateway.jobsPollS: must be a positive number of seconds",
        ),
    ],
)
def test_invalid_file_names_file_key_and_reason_and_is_never_rewritten(tmp_path, content, expected):
    path = write(tmp_path / "c.json", content)
    with pytest.raises(ConfigError) as info:
        load_config(path, environ={})
    assert str(path) in str(info.value) and expected in str(info.value)
    assert info.value.exit_code == 2
    with pytest.raises(ConfigError):
        ensure_config_file(path)
    assert path.read_text() == content


def test_ensure_config_file_is_idempotent_and_private(tmp_path):
    path = tmp_path / "home" / "config.json"
    changed, added = ensure_config_file(path)
    assert changed and "agents" in added
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    first = path.read_text()
    data = json.loads(first)
    data["agents"]["defaults"]["model"] = "openai/gpt-4.1"
    data["providers"]["openai"]["apiKey"] = "sk-mine"
    path.write_text(json.dumps(data))
    os.chmod(path, 0o644)
    changed, added = ensure_config_file(path)
    assert (changed, added) == (False, [])
    assert json.loads(path.read_text())["agents"]["defaults"]["model"] == "openai/gpt-4.1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "model,provider,name",
    [
        ("anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("openrouter/anthropic/claude-sonnet-4", "openrouter", "anthropic/claude-sonnet-4"),
        ("claude-opus-4-5", "anthropic", "claude-opus-4-5"),
        ("gpt-4.1", "openai", "gpt-4.1"),
        ("o3-mini", "openai", "o3-mini"),
        ("ollama/qwen3", "ollama", "qwen3"),
        ("deepseek-chat", "deepseek", "deepseek-chat"),
    ],
)
def test_model_resolution(tmp_path, model, provider, name):
    env = {
        "ANTHROPIC_API_KEY": "a",
        "OPENAI_API_KEY": "o",
        "OPENROUTER_API_KEY": "r",
        "DEEPSEEK_API_KEY": "d",
    }
    cfg = load_config(
        tmp_path / "none.json", environ=env, overrides={"agents.defaults.model": model}
    )
    resolved = resolve_model(cfg)
    assert (resolved.spec.name, resolved.model) == (provider, name)


def test_explicit_provider_wins_and_passes_the_model_name_through(tmp_path):
    path = write(
        tmp_path / "c.json",
        {
            "agents": {"defaults": {"provider": "custom", "model": "anthropic/odd-name"}},
            "providers": {"custom": {"apiBase": "http://localhost:8080/v1"}},
        },
    )
    resolved = resolve_model(load_config(path, environ={}))
    assert (resolved.spec.name, resolved.model, resolved.api_base) == (
        "custom",
        "anthropic/odd-name",
        "http://localhost:8080/v1",
    )
    assert resolved.api_key == ""


def test_missing_key_names_the_variables_and_onboard(tmp_path):
    with pytest.raises(MissingKeyError) as info:
        resolve_model(load_config(tmp_path / "none.json", environ={}))
    text = str(info.value)
    assert "ANTHROPIC_API_KEY" in text and "OPENAI_API_KEY" in text and "nanobot onboard" in text
    assert info.value.exit_code == 2


def test_mask_key_never_shows_the_middle():
    assert mask_key("sk-ant-abcdefghijklmnop") == "sk-a…mnop"
    assert mask_key("short") == "****"
    assert mask_key("") == "(not set)"


def test_a_relative_workspace_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(
        tmp_path / "none.json", environ={}, overrides={"agents.defaults.workspace": "proj"}
    )
    assert cfg.workspace_path() == tmp_path / "proj"


# --- validation: unknown keys, ranges, ${VAR}, file mode (nanobot/config_check.py) ---------------


def test_unknown_keys_in_known_sections_warn_with_the_closest_key(tmp_path):
    path = write(
        tmp_path / "c.json",
        {
            "agents": {
                "defaults": {"contxtWindowTokens": 500, "memoryWindow": 50}
            },  # a typo; a nanobot key
            "providers": {"openai": {"apiKye": "sk-x"}},
            "tools": {"web": {"serach": {}}, "mcpServers": {}},
            "channels": {
                "telegram": {"whatever": 1}
            },  # an unknown section: nanobot's, kept quietly
        },
    )
    cfg = load_config(path, environ={})
    assert cfg.defaults.context_window_tokens == 65536  # the typo did not set anything
    assert cfg.warnings == [
        f"{path}: agents.defaults.contxtWindowTokens: unknown key, ignored; did you mean contextWindowTokens?",
        f"{path}: providers.openai.apiKye: unknown key, ignored; did you mean apiKey?",
        f"{path}: tools.web.serach: unknown key, ignored; did you mean search?",
    ]


def test_a_misspelt_security_setting_stops_and_nanobots_old_place_for_it_counts(tmp_path):
    path = write(tmp_path / "c.json", {"tools": {"restrictToWorkSpace": True}})
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert "did you mean tools.restrictToWorkspace" in caught.value.message
    assert "security setting" in caught.value.hint
    legacy = write(tmp_path / "legacy.json", {"tools": {"exec": {"restrictToWorkspace": True}}})
    assert load_config(legacy, environ={}).tools.restrict_to_workspace is True


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"agents": {"defaults": {"temperature": -3}}},
            "agents.defaults.temperature: -3 is out of range",
        ),
        (
            {"agents": {"defaults": {"temperature": 2.5}}},
            "agents.defaults.temperature: 2.5 is out of range",
        ),
        (
            {"agents": {"defaults": {"maxToolIterations": 100000}}},
            "agents.defaults.maxToolIterations: 100000",
        ),
        (
            {"tools": {"web": {"search": {"maxResults": 0}}}},
            "tools.web.search.maxResults: 0 is out of range",
        ),
        (
            {"providers": {"openai": {"timeout": 0}}},
            "providers.openai.timeout: 0 seconds is out of range",
        ),
        (
            {"providers": {"custom": {"apiBase": "not a url"}}},
            "providers.custom.apiBase: 'not a url' is not an http(s) URL",
        ),
    ],
)
def test_numbers_are_range_checked_and_api_base_must_be_a_url(tmp_path, data, expected):
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path / "c.json", data), environ={})
    assert expected in caught.value.message and caught.value.hint


def test_env_references_are_expanded_or_stop_with_the_key_named(tmp_path):
    path = write(
        tmp_path / "c.json",
        {"providers": {"openai": {"apiKey": "${MY_KEY}", "apiBase": "https://${HOST}/v1"}}},
    )
    cfg = load_config(path, environ={"MY_KEY": "sk-from-env", "HOST": "gw.example"})
    assert cfg.providers["openai"].api_key == "sk-from-env"
    assert cfg.providers["openai"].api_base == "https://gw.example/v1"
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={"HOST": "gw.example"})
    assert caught.value.message == (
        f"{path}: providers.openai.apiKey: ${{MY_KEY}} refers to an environment "
        "variable that is not set"
    )
    assert "export MY_KEY=" in caught.value.hint
    ensure_config_file(path)  # onboard completes the file but keeps the reference, not the secret
    assert json.loads(path.read_text())["providers"]["openai"]["apiKey"] == "${MY_KEY}"


def test_a_config_with_keys_readable_by_others_is_mentioned(tmp_path):
    path = write(tmp_path / "c.json", {"providers": {"openai": {"apiKey": "sk-x"}}})
    os.chmod(path, 0o644)
    assert any(
        "readable by other users (mode 0644)" in w and "chmod 600" in w
        for w in load_config(path, environ={}).warnings
    )
    os.chmod(path, 0o600)
    assert load_config(path, environ={}).warnings == []


def test_each_config_class_is_read_by_its_own_fields_and_each_load_reads_the_file_anew(tmp_path):
    # a class's resolved field types are worked out once; another class gets its own
    from dataclasses import dataclass, field

    from nanobot.config_check import config_fields, unknown_keys

    @dataclass
    class Limits:
        max_items: int = 1
        secret: str = field(default="", metadata={"internal": True})

    @dataclass
    class Labels:
        max_items: str = "a"

    assert config_fields(Limits) == (("max_items", "maxItems", int),)
    assert config_fields(Labels) == (("max_items", "maxItems", str),)
    assert unknown_keys(Limits, {"maxItem": 2}, "limits") == [("limits.maxItem", "maxItems")]
    path = write(tmp_path / "c.json", {"agents": {"defaults": {"maxTokens": 1000}}})
    assert load_config(path).defaults.max_tokens == 1000
    write(path, {"agents": {"defaults": {"maxTokens": 2000}}, "tools": {"exec": {"timeout": 7}}})
    cfg = load_config(path)
    assert cfg.defaults.max_tokens == 2000 and cfg.tools.exec.timeout == 7
    write(path, {"agents": {"defaults": {"maxTokens": "many"}}})
    with pytest.raises(ConfigError, match="agents.defaults.maxTokens: expected an integer"):
        load_config(path)


def _explicit(tmp_path, provider: str, model: str, **provider_cfg) -> object:
    data = {
        "agents": {"defaults": {"provider": provider, "model": model}},
        "providers": {provider: {"apiKey": "k", **provider_cfg}},
    }
    return load_config(write(tmp_path / "c.json", data), environ={})


@pytest.mark.parametrize(
    "provider,model,sent",
    [
        ("openai", "openai/gpt-x", "gpt-x"),
        ("anthropic", "anthropic/claude-x", "claude-x"),
        ("deepseek", "deepseek/deepseek-chat", "deepseek-chat"),
    ],
)
def test_a_prefix_naming_the_providers_own_api_is_dropped(tmp_path, provider, model, sent):
    resolved = resolve_model(_explicit(tmp_path, provider, model))
    assert (resolved.spec.name, resolved.model, resolved.label) == (provider, sent, model)


def test_a_prefix_naming_another_provider_stops_before_any_request_with_what_to_do(tmp_path):
    with pytest.raises(ConfigError) as info:
        resolve_model(_explicit(tmp_path, "anthropic", "openai/gpt-x"))
    assert info.value.exit_code == 2
    assert info.value.message == (
        "model 'openai/gpt-x' names provider openai, but agents.defaults.provider is "
        "'anthropic', whose API has no model of that name"
    )
    assert 'set agents.defaults.provider to "auto"' in info.value.hint
    assert "anthropic/claude-sonnet-4-5" in info.value.hint  # or stay, with one of its models


@pytest.mark.parametrize(
    "provider,model,extra",
    [
        ("openrouter", "openai/gpt-4.1", {}),  # a gateway: vendor/model is the model's name
        ("openrouter", "openrouter/auto", {}),  # OpenRouter's own model, named with its prefix
        ("groq", "openai/gpt-oss-120b", {}),  # a host of other vendors' models
        ("openai", "anthropic/claude-x", {"apiBase": "http://localhost:4000/v1"}),  # a proxy
        ("openai", "openai/gpt-x", {"apiBase": "http://localhost:4000/v1"}),
    ],
)
def test_gateways_hosts_and_proxies_get_the_model_name_as_written(tmp_path, provider, model, extra):
    assert resolve_model(_explicit(tmp_path, provider, model, **extra)).model == model


def test_the_sdks_base_url_variable_marks_a_proxy_too(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:4000/v1")
    assert resolve_model(_explicit(tmp_path, "openai", "anthropic/claude-x")).model == (
        "anthropic/claude-x"
    )
