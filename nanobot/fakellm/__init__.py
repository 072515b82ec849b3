"""A scripted fake LLM: a local HTTP server speaking the OpenAI and Anthropic APIs, for tests and demos."""

from nanobot.fakellm.replies import Reply
from nanobot.fakellm.server import FakeLLMServer, RecordedRequest

__all__ = ["FakeLLMServer", "RecordedRequest", "Reply"]
