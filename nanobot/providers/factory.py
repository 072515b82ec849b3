"""Build the provider adapter for a resolved model. SDKs are imported only here, lazily."""

from __future__ import annotations

from nanobot.config import ResolvedModel
from nanobot.providers.base import Provider
from nanobot.providers.retry import RetryCallback, RetryingProvider, RetryPolicy


def make_provider(resolved: ResolvedModel, *, policy: RetryPolicy | None = None,
                  on_retry: RetryCallback | None = None) -> Provider:
    """Build the adapter for a config.ResolvedModel; SDKs are imported only here."""
    if resolved.spec.kind == "anthropic":
        from nanobot.providers.anthropic import AnthropicProvider

        inner: Provider = AnthropicProvider(resolved.model, api_key=resolved.api_key, api_base=resolved.api_base,
                                            extra_headers=resolved.extra_headers)
    else:
        from nanobot.providers.openai_compat import OpenAICompatProvider

        inner = OpenAICompatProvider(resolved.model, name=resolved.spec.name, api_key=resolved.api_key,
                                     api_base=resolved.api_base, extra_headers=resolved.extra_headers)
    return RetryingProvider(inner, policy, on_retry)

