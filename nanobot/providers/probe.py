"""One cheap request that says whether the provider answers and knows the model (for `nanobot doctor`).

OpenAI-compatible servers list their models (GET /models); Anthropic answers for one model
(GET /v1/models/<id>). No tokens are spent. Servers without a models route are reachable
but cannot say whether the model exists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nanobot.config import ResolvedModel
from nanobot.errors import ProviderError
from nanobot.providers import _sdk_on_demand
from nanobot.providers.base import http_timeout
from nanobot.providers.errors_map import translate
from nanobot.tls import shared_tls_context


@dataclass
class ProbeResult:
    url: str
    model_known: bool | None  # None: the server cannot say
    listed: list[str] = field(default_factory=list)  # the models an OpenAI-compatible server lists


async def probe(resolved: ResolvedModel, *, timeout: float = 10.0) -> ProbeResult:
    """Raises ProviderError when the server cannot be reached or rejects the key."""
    _sdk_on_demand.install()
    if resolved.spec.kind == "anthropic":
        import anthropic

        sdk: Any = anthropic  # the two SDKs have the same error names and a models route
        client: Any = sdk.AsyncAnthropic(
            api_key=resolved.api_key or "none",
            base_url=resolved.api_base or None,
            max_retries=0,
            timeout=http_timeout(timeout),
            default_headers=resolved.extra_headers or None,
            http_client=sdk.DefaultAsyncHttpxClient(verify=shared_tls_context()),
        )
    else:
        import openai

        sdk = openai
        client = sdk.AsyncOpenAI(
            api_key=resolved.api_key or "no-key",
            base_url=resolved.api_base or None,
            max_retries=0,
            timeout=http_timeout(timeout),
            default_headers=resolved.extra_headers or None,
            http_client=sdk.DefaultAsyncHttpxClient(verify=shared_tls_context()),
        )
    url = str(client.base_url)
    try:
        if resolved.spec.kind == "anthropic":
            try:
                await client.models.retrieve(resolved.model)
                return ProbeResult(url, True)
            except sdk.NotFoundError:
                return ProbeResult(url, False)
        try:
            page = await client.models.list()
        except (sdk.NotFoundError, sdk.UnprocessableEntityError, sdk.BadRequestError):
            return ProbeResult(url, None)  # no models route: reachable, cannot say
        listed = [m.id for m in page.data]
        return ProbeResult(url, resolved.model in listed if listed else None, listed)
    except (sdk.APIStatusError, sdk.APIConnectionError) as exc:
        raise translate(resolved.spec.name, exc, url=url, seconds=timeout) from None
    except ProviderError:
        raise
    except Exception as exc:  # an answer that is not the API's JSON (a web page at apiBase)
        raise ProviderError(
            f"{resolved.spec.name}: {url} did not answer like the API ({type(exc).__name__})",
            hint=f"Check providers.{resolved.spec.name}.apiBase.",
        ) from None
    finally:
        await client.close()
