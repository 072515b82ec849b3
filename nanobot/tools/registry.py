"""The set of tools a loop may call, and the one place a tool call becomes a ToolResult.

Whatever goes wrong (unknown tool, arguments that are not JSON, arguments that do not fit
the schema, a ToolError, a bug in the tool) comes back as ToolResult(is_error=True) that
the model can read and act on; the turn goes on. Only cancellation propagates, so Ctrl-C
stops a running tool.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from nanobot.errors import ToolError
from nanobot.policy.arguments import value_problem
from nanobot.secrets_mask import mask_secrets, mask_value
from nanobot.tools.base import Tool, ToolResult
from nanobot.tools.schema_check import drop_null_optionals, validate

__all__ = ["ToolRegistry"]

log = logging.getLogger(__name__)


def _error(text: str) -> ToolResult:
    return ToolResult(content=f"Error: {text}", is_error=True)


def _masked(result: ToolResult) -> ToolResult:
    """Every result passes the one masker: the model, the screen and the session see the same text."""
    content = mask_secrets(result.content)
    return (
        result
        if content == result.content
        else ToolResult(content=content, is_error=result.is_error)
    )


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        if (tool.parameters or {}).get("type") != "object":
            raise ValueError(
                f"tool {tool.name!r}: parameters must be a JSON schema of type 'object'"
            )
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def without(self, *names: str) -> ToolRegistry:
        """A new registry with the same tool objects minus `names` (e.g. no spawn for subagents)."""
        return ToolRegistry(t for n, t in self._tools.items() if n not in names)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function-tool schemas, in registration order (stable, for prompt caching)."""
        return [tool.schema() for tool in self._tools.values()]

    def hint(self, name: str, args: Any) -> str:
        """A short line for the screen (secrets masked); never raises, even for odd arguments."""
        tool = self._tools.get(name)
        if tool is None or not isinstance(args, dict):
            return f"{name}(...)"
        try:
            return mask_secrets(tool.hint(mask_value(args)))  # masked before it is cut to fit
        except Exception:  # a display nicety must never break the turn
            return f"{name}(...)"

    async def execute(self, name: str, args: Any, parse_error: str | None = None) -> ToolResult:
        """Run one tool call and always return a result, secrets masked (cancellation excepted)."""
        return _masked(await self._execute(name, args, parse_error))

    async def _execute(self, name: str, args: Any, parse_error: str | None) -> ToolResult:
        tool = self._tools.get(name)
        if tool is None:
            available = ", ".join(self._tools) or "none"
            return _error(f"unknown tool {name!r}. Available tools: {available}.")
        if parse_error is not None:
            return _error(
                f"the arguments for {name} could not be used ({parse_error}); the tool was not run. "
                "Resend the call with the arguments as one valid JSON object."
            )
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return _error(
                f"the arguments for {name} must be a JSON object, got {type(args).__name__}; "
                "the tool was not run."
            )
        problem = value_problem(args)  # before anything below recurses into them
        if problem:
            return _error(f"{problem}; {name} was not run.")
        args = drop_null_optionals(tool.parameters, args)
        problems = validate(tool.parameters, args, closed=tool.closed_schema)
        if problems:
            return _error(
                f"invalid arguments for {name}; the tool was not run.\n- "
                + "\n- ".join(problems)
                + f"\nExpected parameters: {_describe(tool.parameters)}"
            )
        try:
            result = await tool.run(**args)
        except asyncio.CancelledError:
            raise
        except ToolError as exc:
            return _error(str(exc))
        except Exception as exc:
            log.exception("tool %s failed unexpectedly", name)
            return _error(f"{name} failed unexpectedly: {type(exc).__name__}: {exc}")
        if isinstance(result, ToolResult):
            return result
        if not isinstance(result, str):
            result = str(result)
        return ToolResult(content=result)


def _describe(schema: dict[str, Any]) -> str:
    """One line listing parameters, so the model can fix its call without rereading the schema."""
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = []
    for name, spec in props.items():
        kind = spec.get("type", "any")
        kind = kind if isinstance(kind, str) else "|".join(kind)
        parts.append(f"{name} ({kind}{', required' if name in required else ''})")
    return ", ".join(parts) or "none"
