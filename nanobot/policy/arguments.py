"""How deep and how large a tool call's arguments may be, checked without recursion.

A model (or a server in its place) can send arguments nested thousands of levels deep or many
megabytes long. Python's json module, and every recursive walk after it (unicode cleaning,
secret masking, schema checks, saving), would raise RecursionError and end the turn. So the
text is measured before it is parsed, by a linear scan, and a value that arrived already
parsed is measured by a walk with its own stack; what is over a limit becomes a tool error the
model reads (the call is not run), never an exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_CHARS", "MAX_DEPTH", "clip_depth", "max_depth", "text_problem", "value_problem"]

MAX_DEPTH = 64  # levels of nested objects and arrays in one call's arguments
MAX_CHARS = (
    1_000_000  # characters of one call's arguments as JSON text (a long file is about 1/10 of it)
)
TOO_DEEP = "[nanobot: nested too deep, cut here]"  # what clip_depth puts where a deeper value was


def _depth_problem(limit: int) -> str:
    return f"the arguments are nested more than {limit} levels deep; send them with less nesting"


def _size_problem(size: int, limit: int) -> str:
    return (
        f"the arguments are {size:,} characters long, over the limit of {limit:,}; "
        "send less in one call (write a long file in several steps)"
    )


def _brackets(text: str) -> Iterator[tuple[int, str]]:
    """The position and character of each [ { ] } in JSON `text` that is outside a string."""
    in_string = escaped = False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{]}":
            yield i, c


def max_depth(text: str, stop_at: int) -> int:
    """How deep `text`'s brackets nest outside strings (a scan that stops once past `stop_at`)."""
    depth = deepest = 0
    for _, c in _brackets(text):
        if c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_at:
                    return deepest
        else:
            depth -= 1
    return deepest


def text_problem(text: str, *, limit: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> str | None:
    """Why this JSON text of arguments is refused before parsing (too long, too deep), else None."""
    if len(text) > max_chars:
        return _size_problem(len(text), max_chars)
    if max_depth(text, limit) > limit:
        return _depth_problem(limit)
    return None


def value_problem(
    value: Any, *, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS
) -> str | None:
    """The same limits for arguments that arrived parsed: a walk with its own stack, no recursion."""
    size = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            if depth > max_depth:
                return _depth_problem(max_depth)
            size += 2
            for k, v in item.items():
                size += len(str(k)) + 4
                stack.append((v, depth + 1))
        elif isinstance(item, (list, tuple)):
            if depth > max_depth:
                return _depth_problem(max_depth)
            size += 2 + len(item)
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            size += len(item) + 2
        else:
            size += 8
        if size > max_chars:
            return _size_problem(size, max_chars)
    return None


def clip_depth(text: str, limit: int) -> str:
    """`text` (JSON) with every object or array deeper than `limit` replaced by the string TOO_DEEP,
    so that json.loads (which recurses) can read the rest; value_problem then flags what was cut."""
    out: list[str] = []
    depth = 0
    start = 0  # of the text not yet copied
    cut_from: int | None = None  # where the value being replaced began
    for i, c in _brackets(text):
        if c in "[{":
            if depth == limit and cut_from is None:
                out.append(text[start:i])
                cut_from = i
            depth += 1
            continue
        depth -= 1
        if cut_from is not None and depth == limit:  # the replaced value ends here
            out.append(f'"{TOO_DEEP}"')
            start, cut_from = i + 1, None
    if cut_from is not None:  # never closed: the rest is cut
        out.append(f'"{TOO_DEEP}"')
        start = len(text)
    out.append(text[start:])
    return "".join(out)
