from __future__ import annotations

import pytest
from nanobot.tools.schema_check import drop_null_optionals, usable, validate

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}},
        "maybe": {"type": ["string", "null"]},
    },
    "required": ["path"],
}


def test_valid_arguments_pass():
    args = {
        "path": "a",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "mode": "fast",
        "tags": ["x"],
        "opts": {"deep": False},
        "maybe": None,
    }
    assert validate(SCHEMA, args) == []


def test_integer_accepted_where_number_expected():
    assert validate(SCHEMA, {"path": "a", "ratio": 2}) == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({}, "missing required property 'path'"),
        ({"path": 3}, "path: expected string, got integer 3"),
        ({"path": "a", "count": "3"}, "count: expected integer, got string"),
        ({"path": "a", "count": 2.5}, "count: expected integer, got number"),
        ({"path": "a", "count": True}, "count: expected integer, got boolean"),
        ({"path": "a", "flag": "yes"}, "flag: expected boolean"),
        ({"path": "a", "count": 0}, "less than the minimum 1"),
        ({"path": "a", "count": 11}, "greater than the maximum 10"),
        ({"path": "a", "mode": "medium"}, "not one of the allowed values"),
        ({"path": "a", "tags": ["x", 2]}, "tags[1]: expected string"),
        ({"path": "a", "tags": "x"}, "tags: expected array"),
        ({"path": "a", "opts": {"deep": 1}}, "opts.deep: expected boolean"),
        ({"path": "a", "opts": {"wide": 1}}, "unknown property 'wide'"),
        ({"path": ""}, "at least 1 characters"),
        (
            {"path": "a", "colour": "red"},
            "unknown property 'colour' (known properties: path, count",
        ),
    ],
)
def test_each_violation_is_reported_clearly(args, fragment):
    errors = validate(SCHEMA, args)
    assert any(fragment in e for e in errors), errors


def test_all_problems_reported_at_once():
    assert len(validate(SCHEMA, {"count": 0, "extra": 1})) == 3


def test_additional_properties_true_allows_unknown():
    assert (
        validate({"type": "object", "properties": {}, "additionalProperties": True}, {"x": 1}) == []
    )


def test_null_for_optional_property_means_default():
    assert drop_null_optionals(SCHEMA, {"path": "a", "count": None, "maybe": None}) == {
        "path": "a",
        "maybe": None,
    }


def test_null_for_required_property_is_kept_and_rejected():
    args = drop_null_optionals(SCHEMA, {"path": None})
    assert validate(SCHEMA, args) == ["path: expected string, got null null"]


# MCP servers write richer schemas: anyOf, $ref/$defs, pattern (checked by jsonschema)
MCP_SCHEMA = {
    "type": "object",
    "$defs": {
        "Point": {
            "type": "object",
            "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
            "required": ["x", "y"],
        }
    },
    "properties": {
        "where": {"$ref": "#/$defs/Point"},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None},
    },
    "required": ["where"],
}


def test_ref_anyof_and_pattern_are_enforced_with_the_standard_meaning():
    assert (
        validate(
            MCP_SCHEMA,
            {"where": {"x": 1, "y": 2}, "code": "ABC", "limit": None, "extra": 1},
            closed=False,
        )
        == []
    )
    errors = validate(MCP_SCHEMA, {"where": {"x": 1}, "code": "abc", "limit": 0}, closed=False)
    assert "where: missing required property 'y'" in errors
    assert 'code: "abc" does not match the pattern ^[A-Z]{3}$' in errors
    assert any(
        e.startswith("limit: 0 does not match any of the allowed forms") and "minimum 1" in e
        for e in errors
    )


def test_our_own_tools_keep_refusing_unknown_properties_inside_refs():
    assert "unknown property 'z'" in " ".join(
        validate(MCP_SCHEMA, {"where": {"x": 1, "y": 2, "z": 3}})
    )


def test_a_broken_schema_is_not_enforced():
    broken = {"type": "object", "properties": {"a": {"type": "no-such-type"}}}
    assert usable(broken) and validate(broken, {"a": 1}, closed=False) == []


def test_null_for_an_optional_anyof_with_null_is_kept():
    assert drop_null_optionals(MCP_SCHEMA, {"where": {}, "limit": None}) == {
        "where": {},
        "limit": None,
    }
