"""Check tool arguments against the small JSON-schema subset our tools declare.

Supported: type (object, string, integer, number, boolean, array, null, or a list of
those), properties, required, additionalProperties (unknown properties are rejected
unless it is true), enum, minimum/maximum, minLength/maxLength, items.
Anything else in a schema is ignored. Messages are written for the model to act on.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["validate", "drop_null_optionals"]

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "null": (type(None),),
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    # bool is an int subclass in Python, but true is not a valid JSON integer.
    if isinstance(value, bool) and name in ("integer", "number"):
        return False
    return isinstance(value, _PY_TYPES.get(name, ()))


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def validate(schema: dict[str, Any], value: Any, where: str = "arguments") -> list[str]:
    """Return every problem found (empty when `value` fits `schema`)."""
    errors: list[str] = []
    _check(schema, value, where, errors)
    return errors


def _check(schema: dict[str, Any], value: Any, where: str, errors: list[str]) -> None:
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is_type(value, n) for n in names):
            errors.append(f"{where}: expected {' or '.join(names)}, got {_type_name(value)} {_short(value)}")
            return

    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_short(v) for v in schema["enum"])
        errors.append(f"{where}: {_short(value)} is not one of the allowed values: {allowed}")

    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{where}: {value} is less than the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{where}: {value} is greater than the maximum {schema['maximum']}")

    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{where}: must be at least {schema['minLength']} characters long")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{where}: must be at most {schema['maxLength']} characters long")

    if isinstance(value, (list, tuple)) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(schema["items"], item, f"{where}[{i}]", errors)

    if isinstance(value, dict):
        _check_object(schema, value, where, errors)


def _check_object(schema: dict[str, Any], value: dict[str, Any], where: str, errors: list[str]) -> None:
    props: dict[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(f"{where}: missing required property {name!r}")
    extra = schema.get("additionalProperties", False)
    for name, item in value.items():
        if name in props:
            _check(props[name], item, f"{name}" if where == "arguments" else f"{where}.{name}", errors)
        elif isinstance(extra, dict):
            _check(extra, item, f"{where}.{name}", errors)
        elif extra is not True:
            known = ", ".join(props) or "none"
            errors.append(f"{where}: unknown property {name!r} (known properties: {known})")


def drop_null_optionals(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Remove `null` values of optional properties that do not accept null.

    Models often spell "use the default" as `"limit": null`; treating that as absent is
    what they mean, and rejecting it would only cost a round trip.
    """
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    out = {}
    for name, value in args.items():
        if value is None and name in props and name not in required:
            declared = props[name].get("type")
            accepts_null = declared == "null" or (isinstance(declared, list) and "null" in declared)
            if not accepts_null:
                continue
        out[name] = value
    return out
