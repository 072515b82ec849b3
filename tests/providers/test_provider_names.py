"""Every provider name nanobot 0.3.5 writes loads; the ones we speak reach the wire; the rest say why when used."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nanobot import provider_table
from nanobot.app import build_provider
from nanobot.cli.setup import show_status
from nanobot.config import load_config, resolve_model, to_camel
from nanobot.errors import ConfigError, ProviderError
from nanobot.fakellm import Reply
from nanobot.messages import user
from nanobot.providers.retry import RetryPolicy

from provider_calls import chat_once

FIXTURES = Path(__file__).parent.parent / "fixtures" / "nanobot_homes"
V035_CONFIG = FIXTURES / "v0_3_5" / ".nanobot" / "config.json"
FAST = RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.01, max_total=5)


def write_config(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def ask(provider, text: str = "hi", **kwargs):
    return chat_once(provider, [user(text)], max_tokens=100, **kwargs)


def test_every_provider_name_nanobot_0_3_5_writes_loads_and_is_known():
    raw_names = list(json.loads(V035_CONFIG.read_text())["providers"])
    assert len(raw_names) == 43 and "azureOpenai" in raw_names and "lmStudio" in raw_names
    cfg = load_config(V035_CONFIG, environ={})
    for raw in raw_names:
        spec = provider_table.find(raw)
        assert spec is not None, raw
        assert spec.name in cfg.providers
    assert cfg.provider_config("mistral").api_key == "sk-fixture-mistral-0004"
    assert cfg.provider_config("lmStudio") is cfg.providers["lm_studio"]


@pytest.mark.parametrize(
    "spec", [s for s in provider_table.PROVIDERS if s.kind != "unsupported"], ids=lambda s: s.name
)
def test_each_spoken_provider_resolves_to_its_usual_base_url(tmp_path, spec):
    cfg = load_config(
        write_config(tmp_path, {"providers": {to_camel(spec.name): {"apiKey": "sk-test-0001"}}}),
        environ={},
    )
    if spec.default_api_base is None and spec.name not in ("anthropic", "openai"):
        with pytest.raises(ConfigError, match="needs a base URL"):
            resolve_model(cfg, f"{spec.name}/some-model")
        return
    resolved = resolve_model(cfg, f"{spec.name}/some-model")
    assert resolved.spec is spec and resolved.model == "some-model"
    assert resolved.api_base == spec.default_api_base


@pytest.mark.parametrize("name", ["azureOpenai", "bedrock", "githubCopilot", "assemblyai"])
def test_a_provider_we_cannot_speak_loads_and_fails_only_when_used(tmp_path, name):
    path = write_config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "some-model", "provider": name}},
            "providers": {name: {"apiKey": "sk-test-0002", "apiBase": "https://example.invalid"}},
        },
    )
    cfg = load_config(path, environ={})  # loading never fails on a provider name
    with pytest.raises(ConfigError) as info:
        resolve_model(cfg)
    assert f"cannot talk to provider {provider_table.canonical(name)!r}" in info.value.message
    assert provider_table.find(name).unsupported in info.value.message


def test_mistral_from_a_nanobot_config_reaches_the_server_with_reasoning_effort(tmp_path, fake_llm):
    fake_llm.script(Reply.text("bonjour"))
    path = write_config(
        tmp_path,
        {
            "agents": {
                "defaults": {"model": "mistral/mistral-large-latest", "reasoningEffort": "medium"}
            },
            "providers": {
                "mistral": {"apiKey": "sk-mistral-0003", "apiBase": fake_llm.openai_base_url}
            },
        },
    )
    resp = ask(build_provider(load_config(path, environ={}), policy=FAST))
    assert resp.content == "bonjour"
    body = fake_llm.requests[0].body
    assert body["model"] == "mistral-large-latest"
    assert body["reasoning_effort"] == "high"  # Mistral accepts only high/none
    assert fake_llm.requests[0].headers["authorization"] == "Bearer sk-mistral-0003"
    fake_llm.assert_all_valid()


@pytest.mark.parametrize(
    ("provider", "effort", "expected"),
    [
        ("openai", "low", {"reasoning_effort": "low"}),
        ("deepseek", "high", {"reasoning_effort": "high", "thinking": {"type": "enabled"}}),
        ("dashscope", "minimal", {"reasoning_effort": "minimum", "enable_thinking": False}),
        ("groq", "none", {}),
    ],
)
def test_reasoning_effort_on_the_wire(tmp_path, fake_llm, provider, effort, expected):
    fake_llm.script(Reply.text("ok"))
    path = write_config(
        tmp_path,
        {
            "agents": {"defaults": {"model": f"{provider}/m1", "reasoningEffort": effort}},
            "providers": {
                provider: {"apiKey": "sk-test-0004", "apiBase": fake_llm.openai_base_url}
            },
        },
    )
    ask(build_provider(load_config(path, environ={}), policy=FAST))
    body = fake_llm.requests[0].body
    sent = {k: body[k] for k in ("reasoning_effort", "thinking", "enable_thinking") if k in body}
    assert sent == expected
    # OpenAI's reasoning models reject a temperature once an effort is set; others keep theirs
    assert ("temperature" in body) is (provider != "openai")


def test_a_custom_provider_name_with_an_api_base_is_openai_compatible(tmp_path, fake_llm):
    fake_llm.script(Reply.text("from my box"))
    path = write_config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "mybox/llama-3"}},
            "providers": {"mybox": {"apiBase": fake_llm.openai_base_url}},
        },
    )
    assert ask(build_provider(load_config(path, environ={}), policy=FAST)).content == "from my box"
    assert fake_llm.requests[0].body["model"] == "llama-3"


def _fallback_config(tmp_path, fake_llm, fallbacks) -> Path:
    return write_config(
        tmp_path,
        {
            "agents": {
                "defaults": {
                    "model": "primary-model",
                    "provider": "custom",
                    "fallbackModels": fallbacks,
                }
            },
            "providers": {
                "custom": {"apiKey": "sk-test-0005", "apiBase": fake_llm.openai_base_url}
            },
            "modelPresets": {
                "cheap": {"model": "preset-model", "provider": "custom", "temperature": 0.7}
            },
        },
    )


def test_fallback_models_take_over_after_retries_fail_with_5xx_and_say_so_once(tmp_path, fake_llm):
    fake_llm.script(
        Reply.error(503),
        Reply.error(503),
        Reply.error(529),
        Reply.error(529),
        Reply.text("from preset"),
    )
    said: list[str] = []
    cfg = load_config(
        _fallback_config(
            tmp_path, fake_llm, [{"model": "backup-model", "provider": "custom"}, "cheap"]
        ),
        environ={},
    )
    resp = ask(build_provider(cfg, policy=FAST, on_fallback=said.append))
    assert resp.content == "from preset"
    assert [r.body["model"] for r in fake_llm.requests] == ["primary-model"] * 2 + [
        "backup-model"
    ] * 2 + ["preset-model"]
    assert fake_llm.requests[-1].body["temperature"] == 0.7  # the preset's own setting
    assert len(said) == 2
    assert (
        said[0].startswith("primary-model failed (")
        and "switching to fallback model backup-model" in said[0]
    )
    assert "backup-model failed" in said[1] and "cheap" in said[1]


def test_a_rejected_request_does_not_fall_back(tmp_path, fake_llm):
    fake_llm.script(Reply.error(400, message="bad request"), Reply.text("never"))
    cfg = load_config(_fallback_config(tmp_path, fake_llm, ["cheap"]), environ={})
    with pytest.raises(ProviderError) as info:
        ask(build_provider(cfg, policy=FAST))
    assert info.value.status == 400
    assert [r.body["model"] for r in fake_llm.requests] == ["primary-model"]


def test_an_unusable_fallback_is_named_and_skipped(tmp_path, fake_llm):
    fake_llm.script(Reply.error(503), Reply.error(503), Reply.text("from preset"))
    said: list[str] = []
    cfg = load_config(
        _fallback_config(tmp_path, fake_llm, [{"model": "x", "provider": "bedrock"}, "cheap"]),
        environ={},
    )
    assert ask(build_provider(cfg, policy=FAST, on_fallback=said.append)).content == "from preset"
    assert "fallback model x cannot be used" in said[0] and "bedrock" in said[0]


def test_status_lists_the_keys_we_ignore_with_reasons(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    path = write_config(
        tmp_path,
        json.loads(V035_CONFIG.read_text())
        | {
            "providers": {
                "custom": {"apiKey": "k-0006", "apiBase": "http://127.0.0.1:9/v1"},
                "bedrock": {"apiKey": "k-0007"},
            }
        },
    )
    show_status(path)
    out = capsys.readouterr().out
    assert (
        "channels: chat apps (Telegram, Slack, email, ...) are not part of this terminal tool"
        in out
    )
    assert "agents.defaults.dream" in out
    assert "providers.bedrock: nanobot cannot talk to bedrock yet" in out
    assert "providers.custom.apiType" not in out  # nanobot's default asks for what we do anyway
    assert "agents.defaults.reasoningEffort" not in out  # sent to this OpenAI-compatible provider
    assert "agents.defaults.fallbackModels" not in out


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.mark.parametrize("streaming", [False, True])
def test_anthropic_thinks_with_a_budget_and_gets_its_signed_blocks_back_with_the_tool_results(
    tmp_path, fake_llm, streaming
):
    from dataclasses import replace

    from nanobot.messages import tool_result

    fake_llm.script(
        replace(
            Reply.tool_calls([("read_file", {"path": "a.md"})]), reasoning="I should read a.md."
        ),
        Reply.text("It says hi."),
    )
    path = write_config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "anthropic/claude-x", "reasoningEffort": "medium"}},
            "providers": {
                "anthropic": {"apiKey": "sk-ant-0010", "apiBase": fake_llm.anthropic_base_url}
            },
        },
    )
    provider = build_provider(load_config(path, environ={}), policy=FAST)
    on_delta = (lambda _t: None) if streaming else None

    async def go():
        try:
            first = await provider.chat(
                [user("read a.md")], tools=TOOLS, max_tokens=16000, on_delta=on_delta
            )
            history = [
                user("read a.md"),
                first.to_message(),
                tool_result(first.tool_calls[0].id, "read_file", "hi"),
            ]
            await provider.chat(history, tools=TOOLS, max_tokens=16000, on_delta=on_delta)
            # consolidation forces its tool: the API refuses thinking with a forced choice
            await provider.chat(
                [user("summarise")],
                tools=TOOLS,
                tool_choice={"name": "read_file"},
                max_tokens=16000,
            )
            await provider.chat([user("short")], max_tokens=1500)  # too little room to think in
        finally:
            await provider.aclose()

    fake_llm.script(Reply.tool_calls([("read_file", {"path": "x"})]), Reply.text("ok"))
    asyncio.run(go())
    bodies = [r.body for r in fake_llm.requests]
    assert bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    replayed = bodies[1]["messages"][1]["content"]
    assert replayed[0] == {
        "type": "thinking",
        "thinking": "I should read a.md.",
        "signature": "fake-signature",
    }
    assert replayed[1]["type"] == "tool_use"
    assert "thinking" not in bodies[2] and "thinking" not in bodies[3]
    fake_llm.assert_all_valid()


def test_status_has_nothing_to_say_about_reasoning_effort_on_anthropic(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "300")
    path = write_config(
        tmp_path,
        {
            "agents": {"defaults": {"model": "anthropic/claude-x", "reasoningEffort": "high"}},
            "providers": {"anthropic": {"apiKey": "sk-ant-0008"}},
        },
    )
    show_status(path)
    assert "reasoningEffort" not in capsys.readouterr().out


def test_magistral_gets_no_reasoning_effort_because_it_always_reasons(tmp_path, fake_llm):
    fake_llm.script(Reply.text("ok"))
    path = write_config(
        tmp_path,
        {
            "agents": {
                "defaults": {"model": "mistral/magistral-medium", "reasoningEffort": "high"}
            },
            "providers": {"mistral": {"apiKey": "sk-m-0009", "apiBase": fake_llm.openai_base_url}},
        },
    )
    ask(build_provider(load_config(path, environ={}), policy=FAST))
    assert "reasoning_effort" not in fake_llm.requests[0].body


def test_the_one_shot_chat_says_it_switched_models_on_one_line(configure, fake_llm, nanobot_run):

    path = configure()
    data = json.loads(path.read_text())
    data["agents"]["defaults"]["fallbackModels"] = [{"model": "backup-model", "provider": "custom"}]
    path.write_text(json.dumps(data))
    fake_llm.script(*[Reply.error(503)] * 4, Reply.text("Answered by the backup."))
    run = nanobot_run("agent", "-m", "hello", env={"NANOBOT_RETRY_BASE_DELAY": "0"})
    assert run.returncode == 0, run.stderr
    assert "Answered by the backup." in run.stdout
    lines = [
        ln for ln in run.stderr.splitlines() if "switching to fallback model backup-model" in ln
    ]
    assert len(lines) == 1 and lines[0].strip().startswith(
        "custom/test-model failed (custom: HTTP 503"
    )
    assert [r.body["model"] for r in fake_llm.requests] == ["custom/test-model"] * 4 + [
        "backup-model"
    ]  # provider "custom" passes the name through


def test_a_thinking_turn_through_the_agent_loop_replays_blocks_only_within_the_turn(
    configure, fake_llm
):
    from dataclasses import replace

    from nanobot.app import open_assistant

    configure("anthropic", reasoningEffort="low")
    fake_llm.script(
        replace(Reply.tool_calls([("list_dir", {"path": "."})]), reasoning="Look first."),
        Reply.text("Listed."),
        Reply.text("Hello again."),
    )

    async def go():
        assistant = open_assistant(load_config(), "cli:direct", stream=True)
        try:
            await assistant.conversation.send("what is here?")
            await assistant.conversation.send("thanks")
        finally:
            await assistant.aclose()

    asyncio.run(go())
    first, second, third = (r.body for r in fake_llm.requests)
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assistant_turn = [m for m in second["messages"] if m["role"] == "assistant"][-1]["content"]
    assert (
        assistant_turn[0]["type"] == "thinking"
        and assistant_turn[0]["signature"] == "fake-signature"
    )
    # a new turn: earlier thinking is not sent again (the API does not need it)
    assert not any(
        b.get("type") == "thinking"
        for m in third["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
    )
    fake_llm.assert_all_valid()


def test_model_preset_replaces_the_defaults_and_default_means_none(tmp_path):
    presets = {
        "fast": {
            "model": "groq/llama-3.3",
            "maxTokens": 2048,
            "contextWindowTokens": 32768,
            "reasoningEffort": "low",
        }
    }
    cfg = load_config(
        write_config(
            tmp_path, {"agents": {"defaults": {"modelPreset": "fast"}}, "modelPresets": presets}
        ),
        environ={"GROQ_API_KEY": "gsk-0011"},
    )
    assert (
        cfg.defaults.model,
        cfg.defaults.max_tokens,
        cfg.defaults.context_window_tokens,
        cfg.defaults.reasoning_effort,
    ) == ("groq/llama-3.3", 2048, 32768, "low")
    assert resolve_model(cfg).spec.name == "groq"
    flagged = load_config(
        write_config(
            tmp_path, {"agents": {"defaults": {"modelPreset": "fast"}}, "modelPresets": presets}
        ),
        overrides={"agents.defaults.model": "openai/gpt-4.1"},
        environ={},
    )
    assert flagged.defaults.model == "openai/gpt-4.1"  # a flag still wins
    plain = load_config(
        write_config(tmp_path, {"agents": {"defaults": {"modelPreset": "default"}}}), environ={}
    )
    assert plain.defaults.model == "anthropic/claude-sonnet-4-5"
