from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nanobot.errors import ToolError
from nanobot.tools.base import Tool, ToolResult
from nanobot.tools.registry import ToolRegistry


class Echo(Tool):
    name = "echo"
    description = "Echo text back."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
        "required": ["text"],
    }

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.calls: list[dict[str, Any]] = []

    async def run(self, text: str, times: int = 1) -> str:
        self.calls.append({"text": text, "times": times})
        return text * times


class Failing(Tool):
    name = "failing"
    description = "Always fails."
    parameters = {
        "type": "object",
        "properties": {"how": {"type": "string", "enum": ["tool", "bug", "result"]}},
    }

    async def run(self, how: str = "tool") -> str | ToolResult:
        if how == "tool":
            raise ToolError("disk is full")
        if how == "result":
            return ToolResult("partial", is_error=True)
        return {}["missing"]


class Slow(Tool):
    name = "slow"
    description = "Sleeps."
    parameters = {"type": "object", "properties": {}}

    async def run(self) -> str:
        await asyncio.sleep(30)
        return "done"


@pytest.fixture
def registry(make_ctx):
    ctx = make_ctx()
    return ToolRegistry([Echo(ctx), Failing(ctx), Slow(ctx)])


def test_execute_runs_the_tool(registry):
    result = asyncio.run(registry.execute("echo", {"text": "ab", "times": 2}))
    assert result == ToolResult("abab", is_error=False)


def test_unknown_tool_names_the_available_ones(registry):
    result = asyncio.run(registry.execute("rm_everything", {}))
    assert result.is_error
    assert result.content.startswith("Error: unknown tool 'rm_everything'")
    assert "echo, failing, slow" in result.content


def test_malformed_json_arguments_are_not_executed(registry):
    result = asyncio.run(
        registry.execute("echo", {}, parse_error="Expecting ',' delimiter: line 1 column 9")
    )
    assert result.is_error
    assert "could not be used (Expecting ','" in result.content and "Resend" in result.content
    assert registry.get("echo").calls == []


def test_schema_violation_is_an_error_result_and_not_executed(registry):
    result = asyncio.run(registry.execute("echo", {"text": "a", "times": 0, "loud": True}))
    assert result.is_error
    assert "invalid arguments for echo" in result.content
    assert "times: 0 is less than the minimum 1" in result.content
    assert "unknown property 'loud'" in result.content
    assert "text (string, required)" in result.content
    assert registry.get("echo").calls == []


def test_missing_required_argument(registry):
    result = asyncio.run(registry.execute("echo", {}))
    assert result.is_error and "missing required property 'text'" in result.content


def test_non_object_arguments_rejected(registry):
    result = asyncio.run(registry.execute("echo", ["a"]))
    assert result.is_error and "must be a JSON object" in result.content


def test_null_optional_argument_uses_default(registry):
    result = asyncio.run(registry.execute("echo", {"text": "a", "times": None}))
    assert result == ToolResult("a")


def test_tool_error_becomes_error_result(registry):
    result = asyncio.run(registry.execute("failing", {"how": "tool"}))
    assert result == ToolResult("Error: disk is full", is_error=True)


def test_unexpected_exception_becomes_error_result(registry):
    result = asyncio.run(registry.execute("failing", {"how": "bug"}))
    assert result.is_error
    assert result.content == "Error: failing failed unexpectedly: KeyError: 'missing'"


def test_tool_returned_error_result_passes_through(registry):
    assert asyncio.run(registry.execute("failing", {"how": "result"})) == ToolResult(
        "partial", is_error=True
    )


def test_cancellation_propagates(registry):
    async def main():
        task = asyncio.create_task(registry.execute("slow", {}))
        await asyncio.sleep(0.05)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(main())


def test_schemas_are_openai_function_tools_in_order(registry):
    schemas = registry.schemas()
    assert [s["function"]["name"] for s in schemas] == ["echo", "failing", "slow"]
    assert schemas[0] == {
        "type": "function",
        "function": {
            "name": "echo",
            "description": "Echo text back.",
            "parameters": Echo.parameters,
        },
    }


def test_names_get_and_without(registry):
    assert registry.names() == ["echo", "failing", "slow"]
    assert registry.get("nope") is None
    smaller = registry.without("slow")
    assert smaller.names() == ["echo", "failing"] and "slow" in registry and len(smaller) == 2


def test_duplicate_registration_refused(registry, make_ctx):
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Echo(make_ctx()))


def test_hint(registry):
    assert registry.hint("echo", {"text": "hello"}) == 'echo("hello")'
    assert registry.hint("unknown", {"a": 1}) == "unknown(...)"
    assert registry.hint("echo", "not a dict") == "echo(...)"
