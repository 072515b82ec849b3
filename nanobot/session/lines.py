"""The lines of a session file: what each one is (a message, a metadata record, an approval decision,
a record kind from a newer version, or damage), how one is read and written. The one rule, for the
parse and the load index (session/index.py) and the store (session/store.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import orjson

from nanobot.messages import clean_unicode

__all__ = [
    "DECISION_TYPE",
    "BAD",
    "MESSAGE",
    "META",
    "DECISION",
    "OTHER",
    "classify",
    "meta_record",
    "loads",
    "exact_loads",
    "dumps",
    "plain_int",
]

DECISION_TYPE = "decision"  # the `_type` of an approval decision record


# what a line is: the one rule, for the full parse and for the index
BAD, MESSAGE, META, DECISION, OTHER = range(5)
_BOM = b"\xef\xbb\xbf"


def classify(raw: bytes, reader: Callable[[bytes], Any] | None = None) -> tuple[int, Any]:
    if raw.startswith(_BOM) or raw.endswith(
        b"\r"
    ):  # an editor's BOM or CRLF: the line itself is fine
        raw = raw.removeprefix(_BOM).removesuffix(b"\r")
    try:
        record = (reader or loads)(raw)
    except (UnicodeDecodeError, ValueError):
        return BAD, None
    if not isinstance(record, dict):
        return BAD, None
    kind = record.get("_type")
    if kind == "metadata":
        return META, record
    if kind == DECISION_TYPE:
        return DECISION, record
    if "_type" in record:
        return OTHER, record  # a record kind from a newer version: keep its line, ignore it here
    if isinstance(record.get("role"), str):
        return MESSAGE, record
    return BAD, None


def meta_record(raw: bytes) -> dict[str, Any] | None:
    kind, record = classify(raw)
    return record if kind == META else None


def loads(raw: bytes) -> Any:
    """One JSONL line, fast. orjson parses a long session about twice as fast as json; a line it
    refuses but json reads (NaN, for instance) still loads, through json. orjson reads an integer
    past 64 bits as a float, so whatever writes messages back (repair) parses with `exact_loads`."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw.decode("utf-8"))


def exact_loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"))


def dumps(record: Mapping[str, Any]) -> bytes:
    # default=str: an odd value in a message must not cost the user the whole turn on disk.
    text = json.dumps(record, ensure_ascii=False, default=str) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (bytes that were not UTF-8): save it as U+FFFD
        return (json.dumps(clean_unicode(record), ensure_ascii=False, default=str) + "\n").encode(
            "utf-8"
        )


def plain_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
