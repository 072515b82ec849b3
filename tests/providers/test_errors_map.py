"""The retry classifier: quota and spend caps are final, rate limits and overloads are retried."""

from __future__ import annotations

import asyncio

import pytest
from nanobot.errors import ProviderError
from nanobot.providers.base import LLMResponse, Provider
from nanobot.providers.errors_map import status_error
from nanobot.providers.retry import RetryingProvider, RetryPolicy


@pytest.mark.parametrize(
    "status, message, kind, retry_after",
    [
        (
            429,
            "You exceeded your current quota, please check your plan and billing details.",
            "insufficient_quota",
            None,
        ),
        (
            400,
            "Your credit balance is too low to access the Anthropic API.",
            "invalid_request_error",
            None,
        ),
        (
            429,
            "You have reached your specified API usage limits. You will regain access on 2026-12-31.",
            "",
            None,
        ),
        (
            402,
            "Insufficient credits. Add more using https://openrouter.ai/settings/credits",
            "",
            None,
        ),
    ],
)
def test_quota_and_spend_caps_are_final_with_a_hint(status, message, kind, retry_after):
    error = status_error("openai", status, message, retry_after, kind)
    assert not error.retryable
    assert "quota or spending limit reached" in error.message and "add credit" in error.hint


@pytest.mark.parametrize(
    "status, message, retry_after",
    [
        (429, "Rate limit reached for gpt-4.1 on tokens per min. Please try again in 20s.", None),
        (
            429,
            "Quota exceeded for metric: generate_content_free_tier_requests. Please retry in 18s.",
            None,
        ),
        (429, "You exceeded your current quota", "7"),  # the provider says when: worth waiting
        (529, "Overloaded", None),
        (503, "upstream unavailable", None),
    ],
)
def test_rate_limits_and_overloads_are_retried(status, message, retry_after):
    assert status_error("anthropic", status, message, retry_after).retryable


class _Scripted(Provider):
    def __init__(self, errors: list[ProviderError]) -> None:
        super().__init__("m")
        self.errors = errors
        self.calls = 0

    async def chat(self, messages, **kwargs) -> LLMResponse:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return LLMResponse(content="ok")


def test_retry_stops_at_once_for_quota_and_for_a_wait_past_the_budget():
    quota = _Scripted(
        [status_error("openai", 429, "exceeded your current quota", None, "insufficient_quota")]
    )
    with pytest.raises(ProviderError):
        asyncio.run(RetryingProvider(quota, RetryPolicy(base_delay=0)).chat([]))
    assert quota.calls == 1
    later = _Scripted([status_error("openai", 429, "slow down", "3600")])
    with pytest.raises(ProviderError) as caught:
        asyncio.run(RetryingProvider(later, RetryPolicy(base_delay=0)).chat([]))
    assert later.calls == 1 and "wait 3600s" in caught.value.hint
    brief = _Scripted([status_error("openai", 429, "slow down", "0")])
    assert asyncio.run(RetryingProvider(brief, RetryPolicy(base_delay=0)).chat([])).content == "ok"
    assert brief.calls == 2


@pytest.mark.parametrize(
    "status, message, refused",
    [
        (400, "tool_choice of type 'function' is not supported by this model", True),
        (400, "Invalid value for 'tool-choice': forced function calling is unavailable", True),
        (400, "messages: roles must alternate", False),
        (
            500,
            "tool_choice handler crashed",
            False,
        ),  # a server failure, not a refusal to force a tool
        (
            400,
            "This model's maximum context length is 8192 tokens (tool_choice counted)",
            False,
        ),  # an overflow
    ],
)
def test_a_refused_forced_tool_choice_is_a_flag_on_the_error(status, message, refused):
    assert status_error("custom", status, message).tool_choice_refused is refused
