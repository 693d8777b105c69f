"""`strict: true` is offered in tools_json exactly where the whole input schema is in strict
mode's subset."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.tools.builtin import builtin_registry
from daemon.tools.strict import strict_compatible

CLOSED = {"type": "object", "additionalProperties": False}


@pytest.mark.parametrize(
    "schema",
    [
        {**CLOSED, "properties": {"a": {"type": "string", "description": "x"}}, "required": ["a"]},
        {**CLOSED, "properties": {"m": {"enum": ["a", "b"]}, "n": {"type": ["integer", "null"]}}},
        {**CLOSED, "properties": {"l": {"type": "array", "items": {**CLOSED, "properties": {}}}}},
        {**CLOSED, "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "null"}]}}},
    ],
)  # fmt: skip
def test_schemas_in_the_subset_are_strict(schema: dict[str, Any]) -> None:
    assert strict_compatible(schema)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "string"}}},  # open object
        {**CLOSED, "properties": {"a": {"type": "string", "minLength": 1}}},
        {**CLOSED, "properties": {"a": {"type": "integer", "maximum": 5}}},
        {**CLOSED, "properties": {"a": {"type": "string", "pattern": "^x$"}}},
        {**CLOSED, "properties": {"a": {"$ref": "#/$defs/A"}}, "$defs": {"A": {"type": "string"}}},
        {**CLOSED, "properties": {"a": {"type": "array", "items": {"type": "object"}}}},
        {**CLOSED, "properties": {"a": {"type": "file"}}},
        {"type": "string"},
        [],
    ],
    ids=[
        "open",
        "min-length",
        "maximum",
        "pattern",
        "ref",
        "open-item",
        "bad-type",
        "not-object",
        "list",
    ],
)
def test_anything_else_is_not(schema: Any) -> None:
    assert not strict_compatible(schema)


def test_tools_json_marks_the_strict_built_ins() -> None:
    registry = builtin_registry()
    marked = {
        t.name
        for t in registry.enabled()
        if registry.definition(t.name).to_anthropic().get("strict")
    }
    assert {"Write", "Edit", "LS", "NotebookEdit"} <= marked
    assert "Bash" not in marked  # its timeout has a lower bound
