"""A lone surrogate that slips past the edges is sent as U+FFFD instead of failing the request."""

from __future__ import annotations

import pytest
from nanobot.fakellm import Reply
from nanobot.providers.anthropic import AnthropicProvider
from nanobot.providers.openai_compat import OpenAICompatProvider

from provider_calls import chat_once


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_a_lone_surrogate_in_a_request_goes_out_as_replacement_character(fake_llm, protocol):
    if protocol == "openai":
        provider = OpenAICompatProvider(
            "m", name="custom", api_key="k", api_base=fake_llm.openai_base_url
        )
    else:
        provider = AnthropicProvider(
            "claude-test", api_key="k", api_base=fake_llm.anthropic_base_url
        )
    fake_llm.script(Reply.text("fine"))

    assert chat_once(provider, [{"role": "user", "content": "caf\udce9 menu"}]).content == "fine"
    sent = fake_llm.requests[0].messages[-1]["content"]
    assert (sent if isinstance(sent, str) else sent[0]["text"]) == "caf\ufffd menu"
