"""agents.defaults.reasoningEffort as each API wants it (nanobot 0.3.5's semantics).

Values: none / minimal / low / medium / high / xhigh / max / adaptive; unset leaves the
provider's default. OpenAI-compatible servers get `reasoning_effort`; some also need their
own switch (`thinking`, `enable_thinking`, `reasoning_split`); Mistral accepts only high/none.
Anthropic's extended thinking is not sent: it needs the signed thinking blocks replayed with
every tool result, which our sessions do not store; `not_sent_reason` says so for `status`.
"""

from __future__ import annotations

from typing import Any

from nanobot.providers.registry import ProviderSpec

EFFORTS = ("none", "minimal", "minimum", "low", "medium", "high", "xhigh", "max", "adaptive")

_MISTRAL = {"minimal": "", "low": "", "none": "", "medium": "high", "high": "high", "xhigh": "high", "max": "high"}


def not_sent_reason(spec: ProviderSpec, model: str) -> str:
    """Why reasoningEffort is not passed to this provider ("" when it is)."""
    if spec.kind == "anthropic":
        return ("not sent to Anthropic-protocol providers: extended thinking needs its signed thinking blocks "
                "replayed with every tool result, which nanobot's sessions do not keep yet")
    if spec.thinking == "mistral" and "magistral" in model.lower():
        return "magistral models always reason and reject the parameter"
    return ""


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


def drops_temperature(spec: ProviderSpec, params: dict[str, Any]) -> bool:
    """OpenAI's reasoning models reject a temperature once reasoning_effort is set."""
    return spec.name == "openai" and "reasoning_effort" in params
