"""Check tool arguments against the tool's JSON schema, with messages the model can act on.

The checking is the `jsonschema` library's (any draft the schema names, 2020-12 by default:
anyOf, oneOf, $ref/$defs, pattern, formats ignored); only the wording is ours. Two modes:
- our own tools (`closed=True`): an object schema without `additionalProperties` rejects
  unknown properties, so a misspelt argument is reported instead of silently ignored;
- MCP servers' schemas (`closed=False`): the standard meaning, unknown properties allowed
  unless the schema says otherwise; a schema the library cannot use is not enforced
  (`usable` says so) and the server judges the call itself.
jsonschema is imported on the first check, not at start-up (about 70 ms).
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

__all__ = ["validate", "drop_null_optionals", "usable"]

_cache: dict[
    tuple[int, bool], tuple[dict, Any]
] = {}  # (id(schema), closed) -> (schema kept alive, validator)
_CACHE_LIMIT = 1024


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


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _close_objects(schema: Any) -> Any:
    """A copy where every object schema that does not say otherwise forbids unknown properties."""
    if isinstance(schema, list):
        return [_close_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: _close_objects(v) if k not in ("enum", "const", "default", "examples") else v
        for k, v in schema.items()
    }
    if (
        (out.get("type") == "object" or "properties" in out)
        and "additionalProperties" not in out
        and "patternProperties" not in out
    ):
        out["additionalProperties"] = False
    return out


def _validator(schema: dict[str, Any], closed: bool) -> Any:
    key = (id(schema), closed)
    hit = _cache.get(key)
    if hit is not None and hit[0] is schema:
        return hit[1]
    from jsonschema.validators import Draft202012Validator, validator_for

    effective = _close_objects(copy.deepcopy(schema)) if closed else schema
    cls = validator_for(effective, default=Draft202012Validator)
    cls.check_schema(effective)
    validator = cls(effective)
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[key] = (schema, validator)
    return validator


def usable(schema: dict[str, Any]) -> str:
    """ "" when the schema can be enforced, else why not (a broken schema from an MCP server)."""
    from jsonschema.exceptions import SchemaError

    try:
        _validator(schema, False)
    except SchemaError as exc:
        return exc.message
    return ""


def validate(
    schema: dict[str, Any], value: Any, where: str = "arguments", *, closed: bool = True
) -> list[str]:
    """Every problem found, worded for the model (empty when `value` fits `schema`, or when the
    schema itself is broken: then the tool, an MCP server, judges the call)."""
    from jsonschema.exceptions import SchemaError

    try:
        validator = _validator(schema, closed)
    except SchemaError:
        return []
    errors = sorted(
        validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.validator)
    )
    out: list[str] = []
    for error in errors:
        out.extend(_describe(error, where))
    return out


def _where(error: Any, root: str) -> str:
    parts = list(error.absolute_path)
    if not parts:
        return root
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text if root == "arguments" else f"{root}.{text}"


def _describe(error: Any, root: str) -> list[str]:
    where = _where(error, root)
    kind, want, value = error.validator, error.validator_value, error.instance
    if kind == "type":
        names = [want] if isinstance(want, str) else list(want)
        return [f"{where}: expected {' or '.join(names)}, got {_type_name(value)} {_short(value)}"]
    if kind == "required":
        match = re.match(r"^'(.*)' is a required property", error.message)
        name = match.group(1) if match else error.message
        return [f"{where}: missing required property {name!r}"]
    if kind == "additionalProperties" and isinstance(value, dict):
        props = error.schema.get("properties") or {}
        patterns = list(error.schema.get("patternProperties") or {})
        known = ", ".join(props) or "none"
        extras = [k for k in value if k not in props and not any(re.search(p, k) for p in patterns)]
        return [
            f"{where}: unknown property {name!r} (known properties: {known})" for name in extras
        ]
    if kind == "enum":
        return [
            f"{where}: {_short(value)} is not one of the allowed values: {', '.join(_short(v) for v in want)}"
        ]
    if kind == "const":
        return [f"{where}: must be exactly {_short(want)}"]
    if kind in ("minimum", "exclusiveMinimum"):
        return [f"{where}: {value} is less than the minimum {want}"]
    if kind in ("maximum", "exclusiveMaximum"):
        return [f"{where}: {value} is greater than the maximum {want}"]
    if kind == "minLength":
        return [f"{where}: must be at least {want} characters long"]
    if kind == "maxLength":
        return [f"{where}: must be at most {want} characters long"]
    if kind == "pattern":
        return [f"{where}: {_short(value)} does not match the pattern {want}"]
    if kind in ("minItems", "maxItems"):
        return [
            f"{where}: must have {'at least' if kind == 'minItems' else 'at most'} {want} items"
        ]
    if kind in ("anyOf", "oneOf"):
        # the branch whose type fitted but a constraint did not says most; else the first one
        context = sorted(error.context or (), key=lambda e: e.validator == "type")
        closest = context[0] if context else None
        detail = f" (closest: {_describe(closest, root)[0]})" if closest is not None else ""
        return [f"{where}: {_short(value)} does not match any of the allowed forms{detail}"]
    return [f"{where}: {error.message}"]


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
            declared = props[name].get("type") if isinstance(props[name], dict) else None
            accepts_null = declared == "null" or (isinstance(declared, list) and "null" in declared)
            if not accepts_null and not _mentions_null(props[name]):
                continue
        out[name] = value
    return out


def _mentions_null(spec: Any) -> bool:
    """anyOf/oneOf with a null branch (how MCP servers write Optional[...])."""
    if not isinstance(spec, dict):
        return False
    for key in ("anyOf", "oneOf"):
        for branch in spec.get(key) or ():
            if isinstance(branch, dict) and branch.get("type") == "null":
                return True
    return False
