"""Bounded retries for the failures where trying again can help (429, 5xx, 529, network).

Not retried: quota and spend-cap answers (errors_map.is_quota), a Retry-After longer than one
wait may be, and everything that is not `retryable`. Each attempt that failed and is made again is
first handed to `failed_attempt`'s callback when one is set for the call (the usage meter's: a
stream the network cut was billed, and is recorded on its own).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from nanobot.errors import ProviderError
from nanobot.messages import Message
from nanobot.providers.base import LLMResponse, Provider, RestartableDelta

RetryCallback = Callable[[int, float, ProviderError], None]
# Set by the caller around one call (usage/meter.py): told of each attempt that failed and is made
# again, before the wait, with the model it was made to (RetryingProvider.label; "": the caller's). A context variable, as the cron job is (cron/jobs.current_job): the
# retries sit deep in the provider stack, and the keyword arguments reach the adapters.
failed_attempt: ContextVar[Callable[[ProviderError, str], None] | None] = ContextVar(
    "failed_attempt", default=None
)


@dataclass
class RetryPolicy:
    attempts: int = 4  # total tries, the first included
    base_delay: float = 1.0  # seconds; doubles each retry, with jitter
    max_delay: float = 30.0  # a single wait never exceeds this (nor a longer Retry-After)
    max_total: float = 90.0  # give up when the next wait would pass this many seconds in all

    def delay(self, attempt: int, error: ProviderError) -> float:
        if error.retry_after is not None:
            return min(error.retry_after, self.max_delay)
        backoff = self.base_delay * (2 ** (attempt - 1))
        return min(self.max_delay, backoff * (0.75 + random.random() / 2))


class RetryingProvider(Provider):
    """Wraps a provider; retries retryable ProviderErrors within the policy's budget."""

    def __init__(
        self,
        inner: Provider,
        policy: RetryPolicy | None = None,
        on_retry: RetryCallback | None = None,
        *,
        label: str = "",
    ) -> None:
        super().__init__(inner.model)
        self.label = (
            label  # the model as the ledger names it, for a fallback model ("": the caller's)
        )
        self.inner = inner
        self.name = inner.name
        self.capabilities = inner.capabilities
        self.policy = policy or RetryPolicy()
        self.on_retry = on_retry

    async def chat(self, messages: list[Message], **kwargs: Any) -> LLMResponse:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self.inner.chat(messages, **kwargs)
            except ProviderError as error:
                if not error.retryable or attempt >= self.policy.attempts:
                    raise
                if error.retry_after is not None and error.retry_after > self.policy.max_total:
                    # waiting that long in silence helps nobody: say when it may work again
                    error.hint = (
                        f"The provider asks to wait {error.retry_after:.0f}s before trying again."
                    )
                    raise
                wait = self.policy.delay(attempt, error)
                if time.monotonic() - started + wait > self.policy.max_total:
                    raise
                observer = failed_attempt.get()
                if observer is not None:
                    observer(error, self.label)
                on_delta = kwargs.get("on_delta")
                if isinstance(on_delta, RestartableDelta):
                    on_delta.restart()  # a half-streamed answer is closed off before the retry line
                if self.on_retry:
                    self.on_retry(attempt, wait, error)
                await asyncio.sleep(wait)

    def prewarm(self) -> None:
        self.inner.prewarm()

    async def aclose(self) -> None:
        await self.inner.aclose()
