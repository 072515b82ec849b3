"""Keep every request inside the context window.

Consolidation bounds the history between turns; inside a turn, one large tool result can still
overflow the window (nanobot 0.1.4 sent 33-43k-token requests to an 8k model after reading a
330 KB file). `fit_request` runs before every LLM call and shrinks tool results (head + tail,
with a note on how to read the rest) until the request fits. `check_fixed_prompt` refuses at
start-up when even an empty conversation could not fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from nanobot.errors import ContextTooSmallError
from nanobot.messages import Message, text_of
from nanobot.tokens import Calibration, TokenCounter, byte_bound

__all__ = [
    "fit_request", "request_tokens", "check_fixed_prompt", "reply_room", "shrink_text",
    "MIN_TOOL_RESULT_CHARS", "MIN_CONVERSATION_TOKENS",
]

# A shrunk tool result keeps at least this many characters of its own text.
MIN_TOOL_RESULT_CHARS = 300
# Start-up check: room left for history and the user's message besides the fixed prompt.
MIN_CONVERSATION_TOKENS = 1024
_HOW_TO_READ_REST = ("to see them, use read_file with offset/limit on the file, or exec with "
                     "head/tail/grep on the command's output")


def reply_room(window: int, max_tokens: int) -> int:
    """Tokens kept for the reply: maxTokens, but never more than a quarter of the window.

    An 8,192-token window with the default maxTokens of 8,192 would otherwise leave no room at all.
    """
    return max(1, min(max_tokens, window // 4))


def request_tokens(messages: list[Message], counter: TokenCounter, *, tools: list[dict] | None = None,
                   calibration: Calibration | None = None) -> int:
    raw = counter.count_messages(messages) + counter.count_tools(tools)
    return calibration.adjust(raw) if calibration is not None else raw


def shrink_text(text: str, keep: int) -> str:
    """Head and tail of `text` with a marker saying how much was cut and how to get it."""
    if len(text) <= keep:
        return text
    head = max(1, keep * 2 // 3)
    tail = max(0, keep - head)
    cut = len(text) - head - tail
    marker = (f"\n\n[... {cut:,} characters cut from the middle of this tool result to fit the context "
              f"window; {_HOW_TO_READ_REST} ...]\n\n")
    return text[:head] + marker + (text[-tail:] if tail else "")


def _last_user_index(messages: list[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return 0


def fit_request(messages: list[Message], budget: int, counter: TokenCounter, *, turn_start: int | None = None,
                tools: list[dict] | None = None, calibration: Calibration | None = None) -> list[Message]:
    """`messages`, or a copy whose largest tool results are cut so the request fits `budget`.

    This turn's results (index >= turn_start; default: from the last user message) are cut first,
    largest first; older results only when this turn's are all down to the minimum. The input
    list and its messages are never modified. If nothing more can be cut the result may still be
    over budget; the caller decides what to do then.
    """
    if turn_start is None:
        turn_start = _last_user_index(messages)
    ratio = calibration.ratio if calibration is not None else 1.0
    total = request_tokens(messages, counter, tools=tools, calibration=calibration)
    if total <= budget:
        return messages
    out = list(messages)
    current = [i for i in range(turn_start, len(out)) if out[i].get("role") == "tool"]
    older = [i for i in range(min(turn_start, len(out))) if out[i].get("role") == "tool"]
    for group in (current, older):
        originals = {i: text_of(out[i].get("content")) for i in group}
        keeps = {i: len(text) for i, text in originals.items()}
        while total > budget:
            candidates = [(keep, i) for i, keep in keeps.items() if keep > MIN_TOOL_RESULT_CHARS]
            if not candidates:
                break
            length, index = max(candidates)
            before = counter.count_message(out[index])
            shown = len(text_of(out[index].get("content")))
            chars_per_token = max(1.0, shown / max(1, before))
            excess_raw = math.ceil((total - budget) / ratio)
            # aim just under what fits: the marker costs ~60 tokens, and token density varies a little
            target = before - excess_raw - 80
            keeps[index] = max(MIN_TOOL_RESULT_CHARS, min(length - 1, int(target * chars_per_token * 0.97)))
            shrunk = shrink_text(originals[index], keeps[index])
            if len(shrunk) < len(originals[index]):
                out[index] = {**out[index], "content": shrunk}
            total = request_tokens(out, counter, tools=tools, calibration=calibration)
        if total <= budget:
            break
    return out


def check_fixed_prompt(system_prompt: str, tool_schemas: list[dict] | None, reply_tokens: int, window: int,
                       counter: TokenCounter, *, memory_tokens: int | Callable[[], int] | None = None) -> int:
    """Tokens the fixed prompt takes; raises ContextTooSmallError when a conversation cannot fit.

    When a hard upper bound already fits, that bound is returned without tokenising.
    """
    bound = byte_bound(system_prompt, tool_schemas or [])
    if bound + reply_tokens + MIN_CONVERSATION_TOKENS <= window:
        return bound
    system = counter.count_message({"role": "system", "content": system_prompt})
    tools = counter.count_tools(tool_schemas)
    need = system + tools + reply_tokens + MIN_CONVERSATION_TOKENS
    if need <= window:
        return system + tools
    if callable(memory_tokens):
        memory_tokens = memory_tokens()  # counted only to explain a refusal
    memory = f", of which MEMORY.md {memory_tokens:,}" if memory_tokens else ""
    raise ContextTooSmallError(
        f"the prompt does not fit the context window: the system prompt takes {system:,} tokens{memory}, "
        f"the tool schemas {tools:,}, the reply needs {reply_tokens:,} and the conversation at least "
        f"{MIN_CONVERSATION_TOKENS:,}: {need:,} tokens, {need - window:,} more than the window of {window:,}",
        hint=("raise agents.defaults.contextWindowTokens (if the model allows it), lower agents.defaults.maxTokens, "
              "shorten AGENTS.md, SOUL.md, USER.md, TOOLS.md or MEMORY.md (`nanobot memory edit`), "
              "or disable tools (e.g. tools.exec.enable = false)"),
    )
