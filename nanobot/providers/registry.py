"""The table of LLM providers. How to add one: append a ProviderSpec below.

`kind` picks the adapter ("anthropic" uses the anthropic SDK; "openai" the openai SDK,
which also serves every OpenAI-compatible server by base URL). Names match nanobot's
config keys so a nanobot config.json works here unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    kind: str  # "anthropic" | "openai"
    env_key: str | None  # environment variable holding the API key
    default_api_base: str | None = None
    keywords: tuple[str, ...] = ()  # bare model names containing one of these resolve here
    key_required: bool = True  # local servers (ollama, vllm, custom) work without a key


PROVIDERS: tuple[ProviderSpec, ...] = (
    ProviderSpec("anthropic", "anthropic", "ANTHROPIC_API_KEY", keywords=("claude",)),
    ProviderSpec("openai", "openai", "OPENAI_API_KEY", keywords=("gpt", "o1", "o3", "o4", "chatgpt")),
    ProviderSpec("openrouter", "openai", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1"),
    ProviderSpec("deepseek", "openai", "DEEPSEEK_API_KEY", "https://api.deepseek.com/v1", ("deepseek",)),
    ProviderSpec("groq", "openai", "GROQ_API_KEY", "https://api.groq.com/openai/v1"),
    ProviderSpec("gemini", "openai", "GEMINI_API_KEY",
                 "https://generativelanguage.googleapis.com/v1beta/openai/", ("gemini",)),
    ProviderSpec("moonshot", "openai", "MOONSHOT_API_KEY", "https://api.moonshot.ai/v1", ("kimi", "moonshot")),
    ProviderSpec("dashscope", "openai", "DASHSCOPE_API_KEY",
                 "https://dashscope.aliyuncs.com/compatible-mode/v1", ("qwen",)),
    ProviderSpec("zhipu", "openai", "ZHIPUAI_API_KEY", "https://open.bigmodel.cn/api/paas/v4", ("glm",)),
    ProviderSpec("minimax", "openai", "MINIMAX_API_KEY", "https://api.minimax.io/v1", ("minimax",)),
    ProviderSpec("siliconflow", "openai", "SILICONFLOW_API_KEY", "https://api.siliconflow.cn/v1"),
    ProviderSpec("aihubmix", "openai", "AIHUBMIX_API_KEY", "https://aihubmix.com/v1"),
    ProviderSpec("volcengine", "openai", "VOLCENGINE_API_KEY", "https://ark.cn-beijing.volces.com/api/v3"),
    ProviderSpec("ollama", "openai", "OLLAMA_API_KEY", "http://localhost:11434/v1", key_required=False),
    ProviderSpec("vllm", "openai", "VLLM_API_KEY", "http://localhost:8000/v1", key_required=False),
    ProviderSpec("custom", "openai", None, None, key_required=False),
)

BY_NAME = {spec.name: spec for spec in PROVIDERS}


def find(name: str) -> ProviderSpec | None:
    return BY_NAME.get(name.strip().lower().replace("-", "_"))


def by_keyword(model: str) -> ProviderSpec | None:
    """The provider a bare model name implies (claude -> anthropic, gpt/o-series -> openai)."""
    lowered = model.lower()
    for spec in PROVIDERS:
        for word in spec.keywords:
            if lowered.startswith(word) or f"-{word}" in lowered or f"{word}-" in lowered:
                return spec
    return None


def key_env_names() -> list[str]:
    return [spec.env_key for spec in PROVIDERS if spec.env_key]
