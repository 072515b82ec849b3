"""Scripted replies and how each one looks on the OpenAI and Anthropic wires.

A `Reply` says *what* the model answers; the `openai_*` / `anthropic_*` functions render it into
the exact JSON bodies and SSE events the official SDKs parse. Rendering is pure so it can be read
and tested without sockets.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from nanobot.fakellm.rules import estimate_tokens

__all__ = ["Reply", "Usage", "ToolCall"]

# OpenAI finish_reason <-> Anthropic stop_reason, so one script serves both protocols.
_TO_ANTHROPIC_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
_TO_OPENAI_FINISH = {v: k for k, v in _TO_ANTHROPIC_STOP.items()}

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}

# A streamed text arrives in at most this many deltas, and a tool call's arguments in pieces of
# 16 characters, or in this many longer ones when they are long (40 KB of arguments in 16-character
# deltas would be 2,500 events for one call).
_MAX_TEXT_CHUNKS = 100
_ARG_PIECE = 16


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a reply; `arguments` is a dict or a raw (possibly malformed) JSON string."""

    name: str
    arguments: dict | str
    id: str | None = None  # None: the server assigns a unique "call_<n>" / "toolu_<n>"

    @property
    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)


@dataclass(frozen=True)
class Reply:
    """What the fake model answers to one request. Build with the classmethods, not directly."""

    kind: str  # "text" | "tool_calls" | "error" | "cut"
    content: str | None = None
    calls: tuple[ToolCall, ...] = ()
    usage: dict | None = None
    finish_reason: str = "stop"
    chunks: Any = None  # None (split by words) | int (that many pieces) | list[str] (exact deltas)
    delay: float = 0.0
    reasoning: str | None = None
    # OpenAI side: the reasoning goes out as MiniMax's `reasoning_details` (reasoning_split), not reasoning_content
    reasoning_details: bool = False
    pace: float = (
        0.0  # seconds between streamed events: a slow stream (a Ctrl-C can land mid-answer)
    )
    status: int = 200
    message: str = ""
    retry_after: float | str | None = None
    error_type: str | None = None

    @classmethod
    def text(
        cls,
        text: str,
        *,
        usage: dict | None = None,
        finish_reason: str = "stop",
        chunks: Any = None,
        delay: float = 0.0,
        reasoning: str | None = None,
        pace: float = 0.0,
    ) -> Reply:
        if isinstance(chunks, list) and "".join(chunks) != text:
            raise ValueError("chunks must join to exactly the reply text")
        return cls(
            "text",
            content=text,
            usage=usage,
            finish_reason=finish_reason,
            chunks=chunks,
            delay=delay,
            reasoning=reasoning,
            pace=pace,
        )

    @classmethod
    def tool_calls(
        cls,
        calls: list,
        *,
        text: str | None = None,
        usage: dict | None = None,
        delay: float = 0.0,
        finish_reason: str = "tool_calls",
        reasoning: str | None = None,
        reasoning_details: bool = False,
    ) -> Reply:
        """`calls`: (name, args) pairs, or (name, args, id) to force an id (e.g. a duplicate);
        `finish_reason="length"`: a reply the length limit cut off (Anthropic: max_tokens)."""
        parsed = []
        for call in calls:
            if isinstance(call, ToolCall):
                parsed.append(call)
                continue
            name, args, *rest = call
            if not isinstance(args, (dict, str)):
                raise TypeError(f"tool call args must be a dict or str, got {type(args).__name__}")
            parsed.append(ToolCall(name, args, rest[0] if rest else None))
        if not parsed:
            raise ValueError("Reply.tool_calls needs at least one call")
        return cls(
            "tool_calls",
            content=text,
            calls=tuple(parsed),
            usage=usage,
            finish_reason=finish_reason,
            delay=delay,
            reasoning=reasoning,
            reasoning_details=reasoning_details,
        )

    @classmethod
    def error(
        cls,
        status: int,
        *,
        message: str | None = None,
        retry_after: float | str | None = None,
        error_type: str | None = None,
        delay: float = 0.0,
    ) -> Reply:
        if message is None:
            try:
                message = f"fake {status} {HTTPStatus(status).phrase}"
            except ValueError:
                message = f"fake error {status}"
        return cls(
            "error",
            status=status,
            message=message,
            retry_after=retry_after,
            error_type=error_type,
            delay=delay,
        )

    @classmethod
    def cut_stream(
        cls, text_before: str = "", *, delay: float = 0.0, chunks: Any = None, pace: float = 0.0
    ) -> Reply:
        """Streams `text_before` (in `chunks`, as `text` does), then drops the connection."""
        return cls("cut", content=text_before, delay=delay, chunks=chunks, pace=pace)

    @classmethod
    def from_dict(cls, d: dict) -> Reply:
        """Build a reply from a JSON script entry (used by `python -m nanobot.fakellm --script`).

        Shapes: {"text": ...}, {"tool_calls": [[name, args], ...], "text"?: ...},
        {"error": status, "message"?, "retry_after"?}, {"cut_stream": text}; plus "delay"/"usage", and
        "pace"/"chunks" on text and cut_stream (a slow stream, in those pieces).
        """
        delay = float(d.get("delay", 0.0))
        common: dict[str, Any] = {"delay": delay}
        if "error" in d:
            return cls.error(
                int(d["error"]),
                message=d.get("message"),
                retry_after=d.get("retry_after"),
                error_type=d.get("error_type"),
                **common,
            )
        pace, chunks = float(d.get("pace", 0.0)), d.get("chunks")  # a slow stream, in these pieces
        if "cut_stream" in d:
            return cls.cut_stream(d["cut_stream"], **common, pace=pace, chunks=chunks)
        if "tool_calls" in d:
            return cls.tool_calls(
                [tuple(c) for c in d["tool_calls"]],
                text=d.get("text"),
                usage=d.get("usage"),
                finish_reason=d.get("finish_reason", "tool_calls"),
                reasoning=d.get("reasoning"),
                **common,
            )
        if "text" in d:
            return cls.text(
                d["text"],
                usage=d.get("usage"),
                finish_reason=d.get("finish_reason", "stop"),
                reasoning=d.get("reasoning"),
                **common,
                pace=pace,
                chunks=chunks,
            )
        raise ValueError(f"unrecognised script entry: {d!r}")

    def text_pieces(self) -> list[str]:
        """The streamed deltas of this reply's text."""
        text = self.content or ""
        if not text:
            return []
        if isinstance(self.chunks, list):
            return [c for c in self.chunks if c]
        if isinstance(self.chunks, int) and self.chunks > 0:
            return _split_even(text, self.chunks)
        words = re.findall(r"\s*\S+\s*|\s+", text)
        if len(words) > _MAX_TEXT_CHUNKS:
            step = -(-len(words) // _MAX_TEXT_CHUNKS)
            words = ["".join(words[k : k + step]) for k in range(0, len(words), step)]
        return words


def _split_even(text: str, n: int) -> list[str]:
    size = -(-len(text) // n)
    return [text[k : k + size] for k in range(0, len(text), size)]


def _arg_pieces(s: str) -> list[str]:
    size = max(_ARG_PIECE, -(-len(s) // _MAX_TEXT_CHUNKS))
    return [s[k : k + size] for k in range(0, len(s), size)] or [""]


@dataclass(frozen=True)
class Usage:
    """Token counts for one answer, in a protocol-neutral form."""

    prompt: int
    completion: int
    cache_read: int | None = None
    cache_creation: int | None = None

    @classmethod
    def for_reply(cls, reply: Reply, prompt_estimate: int) -> Usage:
        """Estimate from the request and reply text unless the reply overrides some counts."""
        completion = 0
        if reply.content:
            completion += estimate_tokens(reply.content)
        if reply.reasoning:
            completion += estimate_tokens(reply.reasoning)
        for call in reply.calls:
            completion += estimate_tokens(call.arguments_json) + estimate_tokens(call.name)
        o = reply.usage or {}
        return cls(
            prompt=int(o.get("prompt_tokens", o.get("input_tokens", prompt_estimate))),
            completion=int(o.get("completion_tokens", o.get("output_tokens", max(completion, 1)))),
            cache_read=o.get("cache_read_input_tokens", o.get("cached_tokens")),
            cache_creation=o.get("cache_creation_input_tokens"),
        )

    def openai(self) -> dict:
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        }
        if self.cache_read is not None:
            out["prompt_tokens_details"] = {"cached_tokens": self.cache_read}
        return out

    def anthropic(self) -> dict:
        return {
            "input_tokens": self.prompt,
            "output_tokens": self.completion,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation_input_tokens": self.cache_creation,
        }


# --------------------------------------------------------------------------- errors


def error_body(
    protocol: str, status: int, message: str, error_type: str | None = None, code: str | None = None
) -> dict:
    """The JSON error body each provider returns for `status`."""
    if protocol == "anthropic":
        etype = error_type or _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": etype, "message": message}}
    etype = error_type or _OPENAI_ERROR_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return {"error": {"message": message, "type": etype, "param": None, "code": code}}


# --------------------------------------------------------------------------- OpenAI


def openai_finish(reason: str) -> str:
    return _TO_OPENAI_FINISH.get(reason, reason)


def _minimax_detail(text: str) -> dict[str, Any]:
    """One entry of MiniMax's `reasoning_details` (its OpenAI-compatible API with reasoning_split)."""
    return {
        "type": "reasoning.text",
        "id": "reasoning-text-1",
        "format": "MiniMax-response-v1",
        "index": 0,
        "text": text,
    }


def openai_response(
    reply: Reply, *, model: str, ids: list[str], usage: Usage, response_id: str
) -> dict:
    """A non-streaming chat.completion body; `ids` are the tool-call ids to use, in order."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.reasoning and reply.reasoning_details:
        message["reasoning_details"] = [_minimax_detail(reply.reasoning)]
    elif reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json},
            }
            for cid, c in zip(ids, reply.calls)
        ]
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": openai_finish(reply.finish_reason),
            }
        ],
        "usage": usage.openai(),
    }


def openai_stream(
    reply: Reply,
    *,
    model: str,
    ids: list[str],
    usage: Usage,
    response_id: str,
    include_usage: bool,
    cut: bool = False,
) -> Iterator[dict]:
    """The chat.completion.chunk objects of a streamed answer (the caller adds `data: [DONE]`).

    With `cut`, stops after the content deltas, as a dropped connection would.
    """
    created = int(time.time())
    chunk_id = response_id

    def chunk(delta: dict, finish: str | None = None) -> dict:
        out = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            out["usage"] = None
        return out

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    if reply.reasoning:
        for piece in Reply.text(reply.reasoning).text_pieces():
            # MiniMax streams each piece of its thinking as a continuation of detail 0
            yield chunk(
                {"reasoning_details": [_minimax_detail(piece)]}
                if reply.reasoning_details
                else {"reasoning_content": piece}
            )
    for piece in reply.text_pieces():
        yield chunk({"content": piece})
    if cut:
        return
    for index, (cid, call) in enumerate(zip(ids, reply.calls)):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": cid,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _arg_pieces(call.arguments_json):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, openai_finish(reply.finish_reason))
    if include_usage:
        yield {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": None,
            "choices": [],
            "usage": usage.openai(),
        }


# --------------------------------------------------------------------------- Anthropic


def anthropic_stop(reason: str) -> str:
    return _TO_ANTHROPIC_STOP.get(reason, reason)


class RawJSON(str):
    """JSON text put into a body as it is: arguments nested deeper than json.loads can read."""


def encode_body(body: dict) -> bytes:
    """json.dumps of a body, with each RawJSON value (in a content block) spliced in unquoted."""
    raws: dict[str, str] = {}
    content = body.get("content")
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and isinstance(block.get("input"), RawJSON):
            marker = f"nanobot-fake-raw-{len(raws)}"
            raws[marker] = str(block["input"])
            block["input"] = marker
    text = json.dumps(body)
    for marker, raw in raws.items():
        text = text.replace(json.dumps(marker), raw, 1)
    return text.encode()


def _tool_input(call: ToolCall) -> Any:
    if isinstance(call.arguments, dict):
        return call.arguments
    try:
        return json.loads(call.arguments)
    except ValueError:
        return call.arguments  # deliberately malformed: pass it through as-is
    except RecursionError:
        return RawJSON(
            call.arguments
        )  # deeper than json nests: sent as written (tests of the limits)


def _anthropic_blocks(reply: Reply, ids: list[str]) -> list[dict]:
    blocks: list[dict] = []
    if reply.reasoning:
        blocks.append(
            {"type": "thinking", "thinking": reply.reasoning, "signature": "fake-signature"}
        )
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for cid, call in zip(ids, reply.calls):
        blocks.append(
            {"type": "tool_use", "id": cid, "name": call.name, "input": _tool_input(call)}
        )
    return blocks


def anthropic_response(
    reply: Reply, *, model: str, ids: list[str], usage: Usage, message_id: str
) -> dict:
    """A non-streaming Messages API body."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _anthropic_blocks(reply, ids),
        "stop_reason": anthropic_stop(reply.finish_reason),
        "stop_sequence": None,
        "usage": usage.anthropic(),
    }


def anthropic_stream(
    reply: Reply, *, model: str, ids: list[str], usage: Usage, message_id: str, cut: bool = False
) -> Iterator[tuple[str, dict]]:
    """(event name, data) pairs in the order the real API sends them.

    With `cut`, stops in the middle of the text block, as a dropped connection would.
    """
    start_usage = dict(usage.anthropic(), output_tokens=1)
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
    )
    yield "ping", {"type": "ping"}
    index = 0

    def block(start: dict, deltas: list[dict]) -> Iterator[tuple[str, dict]]:
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": start},
        )
        for delta in deltas:
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}

    if reply.reasoning:
        deltas = [
            {"type": "thinking_delta", "thinking": p}
            for p in Reply.text(reply.reasoning).text_pieces()
        ]
        deltas.append({"type": "signature_delta", "signature": "fake-signature"})
        yield from block({"type": "thinking", "thinking": "", "signature": ""}, deltas)
        index += 1
    if reply.content or cut:
        deltas = [{"type": "text_delta", "text": p} for p in reply.text_pieces()]
        events = list(block({"type": "text", "text": ""}, deltas))
        if cut:
            yield from events[:-1]
            return
        yield from events
        index += 1
    for cid, call in zip(ids, reply.calls):
        deltas = [
            {"type": "input_json_delta", "partial_json": p}
            for p in [""] + _arg_pieces(call.arguments_json)
        ]
        yield from block({"type": "tool_use", "id": cid, "name": call.name, "input": {}}, deltas)
        index += 1
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": anthropic_stop(reply.finish_reason), "stop_sequence": None},
            "usage": usage.anthropic(),
        },
    )
    yield "message_stop", {"type": "message_stop"}
