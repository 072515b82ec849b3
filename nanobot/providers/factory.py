"""Build the provider adapter for a resolved model. SDKs are imported only here, lazily.

Importing an SDK is the slowest part of start-up (about 1 s for anthropic, 0.45 s for openai as
shipped, most of it their type modules), so the adapter is built on the first request, the import
can be warmed in a background thread while the user is still typing, and the SDKs load what the
client does not read on demand (providers/_sdk_on_demand.py: about 0.36 s and 0.2 s).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from nanobot import reasoning
from nanobot.config import ResolvedModel, UnusableModel
from nanobot.messages import Message
from nanobot.providers import _sdk_on_demand
from nanobot.providers.base import LLMResponse, Provider
from nanobot.providers.fallback import Candidate, FallbackCallback, FallbackProvider
from nanobot.providers.retry import RetryCallback, RetryingProvider, RetryPolicy
from nanobot.threads import start_quiet
from nanobot.tls import prewarm_tls_context

_ADAPTERS = {
    "anthropic": "nanobot.providers.anthropic",
    "openai": "nanobot.providers.openai_compat",
}


def _build(resolved: ResolvedModel) -> Provider:
    _sdk_on_demand.install()
    if resolved.spec.kind == "anthropic":
        from nanobot.providers.anthropic import AnthropicProvider

        return AnthropicProvider(
            resolved.model,
            api_key=resolved.api_key,
            api_base=resolved.api_base,
            extra_headers=resolved.extra_headers,
            timeout=resolved.timeout,
            reasoning_effort=resolved.reasoning_effort or None,
        )
    from nanobot.providers.openai_compat import OpenAICompatProvider

    return OpenAICompatProvider(
        resolved.model,
        name=resolved.spec.name,
        api_key=resolved.api_key,
        api_base=resolved.api_base,
        extra_headers=resolved.extra_headers,
        timeout=resolved.timeout,
        **openai_request_options(resolved),
    )


def openai_request_options(resolved: ResolvedModel) -> dict[str, Any]:
    """reasoningEffort and providers.<name>.extraBody as top-level request fields (the adapter posts
    the body as plain JSON), whether the temperature goes too, and whether reasoning goes back."""
    extra = reasoning.openai_params(
        resolved.spec, resolved.model, resolved.reasoning_effort or None
    )
    fields = {
        **reasoning.openai_defaults(resolved.spec),
        **resolved.extra_body,
        **extra.pop("extra_body", {}),
        **extra,
    }
    return {
        "extra_params": fields,
        "send_temperature": not reasoning.drops_temperature(resolved.spec, fields),
        "reasoning_back": resolved.spec.reasoning_back,
        "details_back": resolved.spec.details_back,
    }


def _load(module: str, api_base: str | None) -> None:
    prewarm_tls_context(api_base)  # here, so httpcore2's import keeps off the main thread too
    importlib.import_module(module)


class DeferredProvider(Provider):
    """Builds the real adapter (and so imports its SDK) on the first request."""

    def __init__(
        self, resolved: ResolvedModel, build: Callable[[ResolvedModel], Provider] = _build
    ) -> None:
        super().__init__(resolved.model)
        self.name = resolved.spec.name
        self._resolved = resolved
        self._build = build
        self._inner: Provider | None = None
        self.capabilities.prewarm = True

    def prewarm(self) -> None:
        """Start importing the SDK in a background thread (the first request then finds it loaded)."""
        module = _ADAPTERS[self._resolved.spec.kind]
        _sdk_on_demand.install()  # here, not in the thread: sys.meta_path changes only on the main thread
        start_quiet(_load, module, self._resolved.api_base, name="sdk-prewarm")

    async def chat(self, messages: list[Message], **kwargs: Any) -> LLMResponse:
        if self._inner is None:
            prewarm_tls_context(
                self._resolved.api_base
            )  # the CA file loads on another core while the SDK is imported
            self._inner = self._build(self._resolved)
            self._inner.capabilities = (
                self.capabilities
            )  # one object: what the adapter learns, callers see
        return await self._inner.chat(messages, **kwargs)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()


def make_provider(
    resolved: ResolvedModel,
    *,
    policy: RetryPolicy | None = None,
    on_retry: RetryCallback | None = None,
    fallbacks: Sequence[ResolvedModel | UnusableModel] = (),
    on_fallback: FallbackCallback | None = None,
    own_window: Callable[[Provider, ResolvedModel], Provider] | None = None,
) -> Provider:
    """The provider for a config.ResolvedModel: deferred SDK adapter, wrapped in bounded retries;
    with fallbacks, each gets its own retries and is tried in turn (providers/fallback.py).
    `own_window` wraps a fallback that has its own context window (the budget's last check for that
    window, app.py), so what it is sent fits that window."""
    primary = RetryingProvider(DeferredProvider(resolved), policy, on_retry)
    if not fallbacks:
        return primary
    chain: list[Candidate] = [Candidate(resolved.label or resolved.model, primary)]
    for fb in fallbacks:
        if isinstance(fb, UnusableModel):
            chain.append(Candidate(fb.label, None, unusable=fb.reason))
            continue
        inner: Provider = RetryingProvider(
            DeferredProvider(fb), policy, on_retry, label=fb.label or fb.model
        )
        if fb.context_window and own_window is not None:
            inner = own_window(inner, fb)
        chain.append(
            Candidate(
                fb.label or fb.model,
                inner,
                temperature=fb.temperature,
                max_tokens=fb.max_tokens,
            )
        )
    return FallbackProvider(chain, on_fallback)
