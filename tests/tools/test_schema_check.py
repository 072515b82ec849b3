from __future__ import annotations

import pytest

from nanobot.tools.schema_check import drop_null_optionals, validate

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
    args = {"path": "a", "count": 3, "ratio": 0.5, "flag": True, "mode": "fast", "tags": ["x"], "opts": {"deep": False}, "maybe": None}
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
        ({"path": "a", "colour": "red"}, "unknown property 'colour' (known properties: path, count"),
    ],
)
def test_each_violation_is_reported_clearly(args, fragment):
    errors = validate(SCHEMA, args)
    assert any(fragment in e for e in errors), errors


def test_all_problems_reported_at_once():
    assert len(validate(SCHEMA, {"count": 0, "extra": 1})) == 3


def test_additional_properties_true_allows_unknown():
    assert validate({"type": "object", "properties": {}, "additionalProperties": True}, {"x": 1}) == []


def test_null_for_optional_property_means_default():
    assert drop_null_optionals(SCHEMA, {"path": "a", "count": None, "maybe": None}) == {"path": "a", "maybe": None}


def test_null_for_required_property_is_kept_and_rejected():
    args = drop_null_optionals(SCHEMA, {"path": None})
    assert validate(SCHEMA, args) == ["path: expected string, got null null"]
