"""One provider call from a synchronous test: the request in a fresh event loop, the client closed after."""

from __future__ import annotations

import asyncio
from typing import Any


def chat_once(provider: Any, messages: list[dict], **kwargs: Any) -> Any:
    """`provider.chat(messages, **kwargs)`'s LLMResponse; the provider is closed either way."""

    async def go():
        try:
            return await provider.chat(messages, **kwargs)
        finally:
            await provider.aclose()

    return asyncio.run(go())
