"""agents.defaults.reasoningEffort as each API wants it (nanobot 0.3.5's semantics).

Values: none / minimal / low / medium / high / xhigh / max / adaptive; unset leaves the
provider's default. OpenAI-compatible servers get `reasoning_effort`; some also need their
own switch (`thinking`, `enable_thinking`, `reasoning_split`); Mistral accepts only high/none.
Anthropic-protocol providers get extended thinking with a token budget per effort; the signed
thinking blocks come back with the tool results of the same turn (the API requires that), and
a request that forces a tool (consolidation) goes without thinking, which the API requires too.
"""

from __future__ import annotations

from typing import Any

from nanobot.provider_table import ProviderSpec

EFFORTS = ("none", "minimal", "minimum", "low", "medium", "high", "xhigh", "max", "adaptive")

_MISTRAL = {
    "minimal": "",
    "low": "",
    "none": "",
    "medium": "high",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}


def not_sent_reason(spec: ProviderSpec, model: str) -> str:
    """Why reasoningEffort is not passed to this provider ("" when it is)."""
    if spec.thinking == "mistral" and "magistral" in model.lower():
        return "magistral models always reason and reject the parameter"
    return ""


def openai_defaults(spec: ProviderSpec) -> dict[str, Any]:
    """Request fields sent unless reasoningEffort or extraBody say otherwise: MiniMax's reasoning_split,
    so its thinking comes in `reasoning_details`, apart from the answer, and can go back whole."""
    return {"reasoning_split": True} if spec.thinking == "reasoning_split" else {}


def openai_params(spec: ProviderSpec, model: str, effort: str | None) -> dict[str, Any]:
    """Request fields for an OpenAI-compatible server; extra_body holds the non-standard ones."""
    if not effort or not_sent_reason(spec, model):
        return {}
    semantic = effort.strip().lower()
    semantic = "minimal" if semantic == "minimum" else semantic
    wire: str | None = semantic
    if spec.name == "dashscope" and semantic == "minimal":
        wire = "minimum"  # DashScope's spelling; "minimal" is rejected there
    if spec.thinking == "mistral":
        wire = _MISTRAL.get(semantic, "high") or None
        semantic = wire or "none"
    if semantic == "adaptive":
        wire = None  # an Anthropic notion: leave the OpenAI-side default
    params: dict[str, Any] = {}
    if wire and semantic != "none":
        params["reasoning_effort"] = wire
    enabled = semantic not in ("none", "minimal")
    extra = _thinking_switch(spec.thinking, enabled)
    if extra:
        params["extra_body"] = extra
    return params


def _thinking_switch(style: str, enabled: bool) -> dict[str, Any]:
    if style == "thinking_type":
        return {"thinking": {"type": "enabled" if enabled else "disabled"}}
    if style == "enable_thinking":
        return {"enable_thinking": enabled}
    if style == "reasoning_split":
        return {"reasoning_split": enabled}
    return {}


# thinking budget per effort (tokens); the reply room must exceed it by at least MIN_ANSWER
_ANTHROPIC_BUDGET = {
    "minimal": 1024,
    "minimum": 1024,
    "low": 2048,
    "medium": 8192,
    "adaptive": 8192,
    "high": 16384,
    "xhigh": 32000,
    "max": 32000,
}
MIN_BUDGET = 1024  # the API's minimum
MIN_ANSWER = 1024  # tokens kept for the answer itself


def anthropic_thinking(
    effort: str | None, max_tokens: int, tool_choice: Any
) -> dict[str, Any] | None:
    """The `thinking` field for one Anthropic request, or None when it must not (or cannot) be sent."""
    if not effort or effort.strip().lower() == "none":
        return None
    if tool_choice not in (None, "auto"):
        return None  # the API refuses thinking together with a forced tool choice
    budget = min(_ANTHROPIC_BUDGET.get(effort.strip().lower(), 8192), max_tokens - MIN_ANSWER)
    if budget < MIN_BUDGET:
        return None  # the reply room is too small to think in
    return {"type": "enabled", "budget_tokens": budget}


def drops_temperature(spec: ProviderSpec, params: dict[str, Any]) -> bool:
    """OpenAI's reasoning models reject a temperature once reasoning_effort is set."""
    return spec.name == "openai" and "reasoning_effort" in params
