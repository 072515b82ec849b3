"""The fake LLM in the test process: the fake server's script, replies and request rules, no socket.

`ScriptedLLM` is a `FakeLLMServer` that is never started: `script()`, `responder`, `strict`,
`context_window`, `requests` and `assert_all_valid()` work as they do on the server, because
every request goes through the same `FakeLLMServer.answer` (the rules of rules.py, the window,
strictness, the script) that the HTTP handler uses. `provider("openai" | "anthropic")` is the
real adapter (OpenAICompatProvider / AnthropicProvider) with the official SDK, whose HTTP client
hands each request to that method in process: request bodies, streaming, status errors, a cut
stream and their translation run as they do over the wire, in about a millisecond a request
instead of a loopback connection to a server thread.

What only the socket shows (keep-alive, timeouts, a server that dies mid-stream, the delays
between streamed deltas) stays with the HTTP server: the `fake_llm` fixture and tests/fakellm.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx2
from nanobot.fakellm import FakeLLMServer
from nanobot.fakellm.server import MODELS_PATH
from nanobot.providers.anthropic import AnthropicProvider
from nanobot.providers.base import Provider
from nanobot.providers.openai_compat import OpenAICompatProvider

BASE = "http://fakellm.in-process"  # never resolved: the transport below answers every request


class _Body(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes], cut: bool) -> None:
        self._chunks, self._cut = chunks, cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk
        if self._cut:  # what the client sees when the server drops the connection mid-body
            raise httpx2.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )


class InProcessTransport(httpx2.AsyncBaseTransport):
    """httpx2 transport whose server is `fake` (a FakeLLMServer, started or not)."""

    def __init__(self, fake: FakeLLMServer) -> None:
        self.fake = fake

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path.rstrip("/")
        if request.method == "GET" and path.startswith(MODELS_PATH):
            self.fake.model_requests.append(path)
            models = {
                "object": "list",
                "data": [{"id": m, "object": "model", "type": "model"} for m in self.fake.models],
            }
            return httpx2.Response(200, json=models, request=request)
        body = json.loads(await request.aread() or b"{}")
        # in a thread: a reply's delay must not stop the event loop (a real server would not)
        answer = await asyncio.to_thread(self.fake.answer, path, dict(request.headers), body)
        if answer.cut and not answer.chunks:
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx2.Response(
            answer.status,
            headers=answer.headers,
            stream=_Body(answer.chunks, answer.cut),
            request=request,
        )


class ScriptedLLM(FakeLLMServer):
    """A fake LLM answered in process; see the module docstring."""

    def start(self) -> ScriptedLLM:
        return self  # nothing listens: `with ScriptedLLM() as llm:` works as with the server

    @property
    def base_url(self) -> str:
        return BASE

    def provider(
        self, protocol: str = "openai", *, model: str | None = None, timeout: float = 30.0
    ) -> Provider:
        client = httpx2.AsyncClient(transport=InProcessTransport(self))
        if protocol == "anthropic":
            return AnthropicProvider(
                model or "claude-test",
                api_key="sk-ant-test-key-123456",
                api_base=BASE,
                timeout=timeout,
                http_client=client,
            )
        return OpenAICompatProvider(
            model or "test-model",
            name="custom",
            api_key="sk-test-key-123456",
            api_base=BASE + "/v1",
            timeout=timeout,
            http_client=client,
        )
