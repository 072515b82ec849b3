"""Provider capabilities: one object per adapter, shared by every wrapper around it."""

from __future__ import annotations

from nanobot.config import load_config, resolve_fallbacks, resolve_model
from nanobot.fakellm import Reply
from nanobot.messages import user
from nanobot.providers.base import Capabilities, LLMResponse, Provider
from nanobot.providers.factory import DeferredProvider, make_provider
from nanobot.providers.fallback import Candidate, FallbackProvider
from nanobot.providers.retry import RetryingProvider, RetryPolicy

from provider_calls import chat_once


class _Plain(Provider):
    def __init__(self) -> None:
        super().__init__("m")
        self.prewarmed = 0

    def prewarm(self) -> None:
        self.prewarmed += 1

    async def chat(self, messages, **kwargs) -> LLMResponse:
        return LLMResponse(content="ok")


def test_a_plain_provider_can_force_a_tool_and_has_nothing_to_prewarm():
    caps = _Plain().capabilities
    assert caps == Capabilities(forced_tool_choice=True, prewarm=False)


def test_wrappers_share_their_inner_providers_capabilities_and_prewarm_it():
    inner = _Plain()
    retrying = RetryingProvider(inner, RetryPolicy(base_delay=0))
    fallback = FallbackProvider(
        [Candidate("a/m", retrying), Candidate("b/m", RetryingProvider(_Plain()))]
    )
    assert fallback.capabilities is retrying.capabilities is inner.capabilities
    fallback.capabilities.forced_tool_choice = False  # learned through the outermost wrapper ...
    assert inner.capabilities.forced_tool_choice is False  # ... is what the adapter's callers see
    fallback.prewarm()
    retrying.prewarm()
    assert inner.prewarmed == 2


def test_the_deferred_adapter_says_it_can_prewarm_and_keeps_one_object_once_built(
    fake_llm, configure
):
    cfg = load_config(configure())
    provider = make_provider(
        resolve_model(cfg), policy=RetryPolicy(base_delay=0), fallbacks=resolve_fallbacks(cfg)
    )
    assert provider.capabilities.prewarm is True
    deferred = provider.inner
    assert isinstance(deferred, DeferredProvider)
    fake_llm.script(Reply.text("hi"))

    assert chat_once(provider, [user("hello")], max_tokens=16).content == "hi"
    assert deferred._inner is not None and deferred._inner.capabilities is provider.capabilities
