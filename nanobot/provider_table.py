"""The table of LLM providers. How to add one: append a ProviderSpec below.

`kind` picks the adapter ("anthropic" uses the anthropic SDK; "openai" the openai SDK,
which also serves every OpenAI-compatible server by base URL). `kind="unsupported"` marks a
name nanobot accepts but we cannot speak: the config still loads, and using it fails with
`unsupported` as the reason. Names match nanobot 0.3.5's config keys (snake_case here; the
file may spell them camelCase, e.g. lmStudio), so a nanobot config.json works unchanged.
A name not in the table that has an apiBase is an OpenAI-compatible server, as in nanobot.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ProviderSpec:
    name: str
    kind: str  # "anthropic" | "openai" | "unsupported"
    env_key: str | None  # environment variable holding the API key
    default_api_base: str | None = None
    keywords: tuple[str, ...] = ()  # bare model names containing one of these resolve here
    key_required: bool = True  # local servers (ollama, vllm, custom) work without a key
    thinking: str = (
        ""  # how the server switches thinking on besides reasoning_effort (reasoning.py)
    )
    # an assistant message with tool_calls goes back with its reasoning_content (DeepSeek's thinking
    # mode answers 400 without it; Kimi's thinking models need it for multi-step tool use)
    reasoning_back: bool = False
    # assistant messages of the turn go back with the reasoning_details the server sent (MiniMax: its
    # interleaved thinking, split from the answer by reasoning_split, must come back whole)
    details_back: bool = False
    unsupported: str = ""  # why we cannot speak it, and what to use instead
    # the vendor's own API, whose model names never hold a "provider/" prefix (gpt-4.1,
    # claude-sonnet-4-5): asked for by name, a prefix naming it is dropped and one naming another
    # provider is refused (config.resolve_model); gateways and hosts (vendor/model names) are not
    own_models: bool = False


def _compat(
    name: str, env_key: str | None, base: str | None, keywords: tuple[str, ...] = (), **kw
) -> ProviderSpec:
    return ProviderSpec(name, "openai", env_key, base, keywords, **kw)


def _local(
    name: str, env_key: str | None, base: str | None, keywords: tuple[str, ...] = ()
) -> ProviderSpec:
    return ProviderSpec(name, "openai", env_key, base, keywords, key_required=False)


def _unsupported(name: str, why: str) -> ProviderSpec:
    return ProviderSpec(name, "unsupported", None, unsupported=why)


_OAUTH = (
    "it signs in with OAuth through nanobot's own login flow, which this tool does not have; "
    "use an API-key provider instead"
)

PROVIDERS: tuple[ProviderSpec, ...] = (
    # The first sixteen keep their order: bare model names resolve by keyword in table order.
    ProviderSpec(
        "anthropic", "anthropic", "ANTHROPIC_API_KEY", keywords=("claude",), own_models=True
    ),
    ProviderSpec(
        "openai",
        "openai",
        "OPENAI_API_KEY",
        keywords=("gpt", "o1", "o3", "o4", "chatgpt"),
        own_models=True,
    ),
    _compat("openrouter", "OPENROUTER_API_KEY", "https://openrouter.ai/api/v1"),
    _compat(
        "deepseek",
        "DEEPSEEK_API_KEY",
        "https://api.deepseek.com/v1",
        ("deepseek",),
        thinking="thinking_type",
        reasoning_back=True,
        own_models=True,
    ),
    _compat("groq", "GROQ_API_KEY", "https://api.groq.com/openai/v1"),
    _compat(
        "gemini",
        "GEMINI_API_KEY",
        "https://generativelanguage.googleapis.com/v1beta/openai/",
        ("gemini",),
        own_models=True,
    ),
    _compat(
        "moonshot",
        "MOONSHOT_API_KEY",
        "https://api.moonshot.ai/v1",
        ("kimi", "moonshot"),
        reasoning_back=True,
        own_models=True,
    ),
    _compat(
        "dashscope",
        "DASHSCOPE_API_KEY",
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
        ("qwen",),
        thinking="enable_thinking",
    ),
    _compat(
        "zhipu",
        "ZHIPUAI_API_KEY",
        "https://open.bigmodel.cn/api/paas/v4",
        ("glm",),
        own_models=True,
    ),
    _compat(
        "minimax",
        "MINIMAX_API_KEY",
        "https://api.minimax.io/v1",
        ("minimax",),
        thinking="reasoning_split",
        details_back=True,
    ),
    _compat("siliconflow", "SILICONFLOW_API_KEY", "https://api.siliconflow.cn/v1"),
    _compat("aihubmix", "AIHUBMIX_API_KEY", "https://aihubmix.com/v1"),
    _compat(
        "volcengine",
        "VOLCENGINE_API_KEY",
        "https://ark.cn-beijing.volces.com/api/v3",
        thinking="thinking_type",
    ),
    _local("ollama", "OLLAMA_API_KEY", "http://localhost:11434/v1"),
    _local("vllm", "VLLM_API_KEY", "http://localhost:8000/v1"),
    _local("custom", None, None),
    # The rest of nanobot 0.3.5's names.
    _compat(
        "mistral",
        "MISTRAL_API_KEY",
        "https://api.mistral.ai/v1",
        ("mistral", "magistral", "ministral", "codestral", "devstral"),
        thinking="mistral",
        own_models=True,
    ),
    _compat("stepfun", "STEPFUN_API_KEY", "https://api.stepfun.com/v1", ("stepfun",)),
    _compat("nvidia", "NVIDIA_NIM_API_KEY", "https://integrate.api.nvidia.com/v1", ("nvapi",)),
    _compat("orcarouter", "ORCAROUTER_API_KEY", "https://api.orcarouter.ai/v1"),
    _compat("edenai", "EDENAI_API_KEY", "https://api.edenai.run/v3"),
    _compat("opencode", "OPENCODE_API_KEY", "https://opencode.ai/zen/v1"),
    _compat("opencode_zen", "OPENCODE_API_KEY", "https://opencode.ai/zen/v1"),
    _compat("opencode_go", "OPENCODE_API_KEY", "https://opencode.ai/zen/go/v1"),
    _compat("huggingface", "HF_TOKEN", "https://router.huggingface.co/v1"),
    _compat("skywork", "SKYWORK_API_KEY", "https://api.apifree.ai/agent/v1"),
    _compat("novita", "NOVITA_API_KEY", "https://api.novita.ai/openai"),
    _compat(
        "volcengine_coding_plan",
        "VOLCENGINE_API_KEY",
        "https://ark.cn-beijing.volces.com/api/coding/v3",
        thinking="thinking_type",
    ),
    _compat(
        "byteplus",
        "BYTEPLUS_API_KEY",
        "https://ark.ap-southeast.bytepluses.com/api/v3",
        thinking="thinking_type",
    ),
    _compat(
        "byteplus_coding_plan",
        "BYTEPLUS_API_KEY",
        "https://ark.ap-southeast.bytepluses.com/api/coding/v3",
        thinking="thinking_type",
    ),
    _compat(
        "modelscope",
        "MODELSCOPE_API_KEY",
        "https://api-inference.modelscope.cn/v1",
        thinking="enable_thinking",
    ),
    ProviderSpec(
        "kimi_coding", "anthropic", "KIMI_CODING_API_KEY", "https://api.kimi.com/coding/v1"
    ),
    ProviderSpec(
        "minimax_anthropic", "anthropic", "MINIMAX_API_KEY", "https://api.minimax.io/anthropic"
    ),
    _compat(
        "xiaomi_mimo",
        "XIAOMIMIMO_API_KEY",
        "https://api.xiaomimimo.com/v1",
        ("mimo",),
        thinking="thinking_type",
    ),
    _compat("longcat", "LONGCAT_API_KEY", "https://api.longcat.chat/openai/v1", ("longcat",)),
    _compat("ant_ling", "ANT_LING_API_KEY", "https://api.ant-ling.com/v1"),
    _compat("qianfan", "QIANFAN_API_KEY", "https://qianfan.baidubce.com/v2", ("ernie",)),
    _local("lm_studio", "LM_STUDIO_API_KEY", "http://localhost:1234/v1"),
    _local("atomic_chat", "ATOMIC_CHAT_API_KEY", "http://localhost:1337/v1"),
    _local("ovms", None, "http://localhost:8000/v3"),
    _unsupported(
        "azure_openai",
        "Azure OpenAI needs its own authentication and deployment URLs; point "
        "providers.custom.apiBase at https://<resource>.openai.azure.com/openai/v1 and put the key in "
        'providers.custom.extraHeaders as {"api-key": "..."}',
    ),
    _unsupported(
        "bedrock",
        "AWS Bedrock signs requests with AWS credentials, which this tool does not do; "
        "use Anthropic's own API or an OpenAI-compatible gateway such as openrouter",
    ),
    _unsupported("assemblyai", "AssemblyAI is a speech-to-text service, not a chat model"),
    _unsupported("openai_codex", _OAUTH),
    _unsupported("github_copilot", _OAUTH),
    _unsupported("xai_grok", _OAUTH),
)

BY_NAME = {spec.name: spec for spec in PROVIDERS}


def canonical(name: str) -> str:
    """nanobot's snake_case spelling of a provider name as the file may write it (lmStudio, lm-studio)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name.strip())
    return snake.lower().replace("-", "_")


def find(name: str) -> ProviderSpec | None:
    return BY_NAME.get(canonical(name))


def dynamic(name: str) -> ProviderSpec:
    """A provider name nanobot does not know, with an apiBase: an OpenAI-compatible server."""
    return ProviderSpec(canonical(name), "openai", None, None, key_required=False)


def by_keyword(model: str) -> ProviderSpec | None:
    """The provider a bare model name implies (claude -> anthropic, gpt/o-series -> openai)."""
    lowered = model.lower()
    for spec in PROVIDERS:
        for word in spec.keywords:
            if lowered.startswith(word) or f"-{word}" in lowered or f"{word}-" in lowered:
                return spec
    return None


def key_env_names() -> list[str]:
    return list(dict.fromkeys(spec.env_key for spec in PROVIDERS if spec.env_key))


# Secrets read outside the provider table: the web-search key and the config's key override.
OTHER_KEY_ENV = ("BRAVE_API_KEY", "NANOBOT_API_KEY")


def secret_env_names() -> frozenset[str]:
    """The one list of variables holding a key nanobot reads: the table's and OTHER_KEY_ENV."""
    return frozenset(key_env_names()) | frozenset(OTHER_KEY_ENV)


def scrubbed_env_names(environ: Mapping[str, str]) -> set[str]:
    """What must not reach a test or benchmark child: every key, base-URL override and NANOBOT_* variable."""
    return (
        set(secret_env_names())
        | {"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"}
        | {name for name in environ if name.startswith("NANOBOT_")}
    )
