"""agents.defaults.fallbackModels: the next model when one keeps failing (nanobot's semantics).

Each candidate is a RetryingProvider, so a model is given up only after its own retries are
spent, and only for failures another model may not share: overload, rate limits, 5xx,
timeouts and lost connections (the errors marked retryable). A rejected request (400), a bad
key (401) or a prompt that is too long is raised at once: another model would not fix it.
A fallback with its own smaller window that cannot hold the request even cut (RequestTooLarge
from its own last check, app.py) is passed over unsent: the next one may be larger. When no
model is left, the error names each model tried and why it failed.
Nothing is switched once text has been streamed to the screen (the answer would repeat).
Every request starts with the primary model; after it failed over three requests in a row
it is skipped for a minute, then tried again. Each switch is announced in one line.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nanobot.errors import NanobotError, ProviderError, RequestTooLarge
from nanobot.messages import Message
from nanobot.providers.base import LLMResponse, Provider, StreamTap

FallbackCallback = Callable[[str], None]

PRIMARY_FAILURE_THRESHOLD = 3
PRIMARY_COOLDOWN_SECONDS = 60.0


@dataclass
class Candidate:
    label: str  # provider/model as the user wrote it
    provider: Provider | None
    temperature: float | None = None  # the fallback's own settings, when it has them
    max_tokens: int = 0
    unusable: str = ""  # why it cannot be tried (a missing key, a provider we cannot speak)


def _reason(error: NanobotError) -> str:
    if isinstance(error, RequestTooLarge):  # its own message is a paragraph of figures
        return "its own context window cannot hold this request even cut, so it was not sent"
    return str(error.message).splitlines()[0][:160]


class FallbackProvider(Provider):
    def __init__(
        self,
        chain: list[Candidate],
        on_fallback: FallbackCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        primary = chain[0].provider
        assert primary is not None
        super().__init__(primary.model)
        self.name = primary.name
        self.primary = primary
        self.capabilities = primary.capabilities  # every request starts with the primary
        self.chain = chain
        self.on_fallback = on_fallback
        self._clock = clock
        self._primary_failures = 0
        self._primary_skipped_until = 0.0

    async def chat(self, messages: list[Message], **kwargs: Any) -> LLMResponse:
        on_delta = kwargs.get("on_delta")
        relay = StreamTap(on_delta) if on_delta is not None else None
        if relay is not None:
            kwargs["on_delta"] = relay
        last_error: NanobotError | None = None
        tried: list[str] = []  # "label (why it failed)", for the error when none is left
        previous = self.chain[0].label
        for index, candidate in enumerate(self.chain):
            if index == 0 and self._clock() < self._primary_skipped_until:
                previous = f"{candidate.label} (skipped for a minute after repeated failures)"
                continue
            if candidate.provider is None:
                self._say(f"fallback model {candidate.label} cannot be used: {candidate.unusable}")
                continue
            if index > 0:
                self._say(
                    f"{previous} failed ({_reason(last_error)}); switching to fallback model {candidate.label}"
                    if last_error is not None
                    else f"{previous}; using fallback model {candidate.label}"
                )
            try:
                response = await candidate.provider.chat(
                    messages, **self._settings(candidate, kwargs)
                )
            except RequestTooLarge as error:  # its own window is too small: it was sent nothing
                last_error = error
                previous = candidate.label
                tried.append(f"{candidate.label} ({_reason(error)})")
                continue
            except ProviderError as error:
                # a model that has begun answering is not swapped for another
                if not error.retryable or (relay is not None and bool(relay.pieces)):
                    raise
                last_error = error
                previous = candidate.label
                tried.append(f"{candidate.label} ({_reason(error)})")
                if index == 0:
                    self._primary_failures += 1
                    if self._primary_failures >= PRIMARY_FAILURE_THRESHOLD:
                        self._primary_skipped_until = self._clock() + PRIMARY_COOLDOWN_SECONDS
                        self._primary_failures = 0
                continue
            if index == 0:
                self._primary_failures = 0
            response.served_by = response.served_by or candidate.label
            response.fallback = index > 0
            return response
        if last_error is None:
            raise ProviderError("no model left to try: every fallback model is unusable")
        if len(tried) < 2:
            raise last_error
        raise _exhausted(tried, last_error)

    @staticmethod
    def _settings(candidate: Candidate, kwargs: dict[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        if candidate.temperature is not None:
            out["temperature"] = candidate.temperature
        if candidate.max_tokens and "max_tokens" in out:
            out["max_tokens"] = min(
                out["max_tokens"], candidate.max_tokens
            )  # never more than the budget allows
        return out

    def _say(self, text: str) -> None:
        if self.on_fallback is not None:
            self.on_fallback(text)

    def prewarm(self) -> None:
        self.primary.prewarm()

    async def aclose(self) -> None:
        for candidate in self.chain:
            if candidate.provider is not None:
                await candidate.provider.aclose()


def _exhausted(tried: list[str], last: NanobotError) -> NanobotError:
    """The error when every model failed: each one tried and why, as the last error's kind."""
    message = f"every model failed: {'; '.join(tried)}"
    if isinstance(last, ProviderError):
        return ProviderError(
            message,
            hint=last.hint,
            status=last.status,
            retryable=last.retryable,
            retry_after=last.retry_after,
        )
    return RequestTooLarge(
        message,
        hint="A fallback's window is its own contextWindowTokens (in agents.defaults.fallbackModels "
        "or its modelPresets entry): raise it if the model allows, or add a fallback with a larger "
        "window; or try again when the models before it answer.",
    )
