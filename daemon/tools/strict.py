"""Whether a tool's input schema can be offered with `strict: true` (the Messages API's strict
tool use: the model's input is sampled to match the schema by grammar).

Strict mode takes a subset of JSON Schema. A schema is offered strict only when every part of it
is in the subset this module knows to be accepted: types, properties, required, items, enum,
const, anyOf, descriptions and defaults, with `additionalProperties: false` on every object.
Bounds (lengths, ranges, counts), patterns, formats and references make it non-strict: the daemon
still validates them, and prefers not offering strict to a definition the API could refuse.
"""

from __future__ import annotations

from typing import Any

_ALLOWED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "description",
        "title",
        "default",
    }
)
_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})


def strict_compatible(schema: Any) -> bool:
    """Whether `schema` (a tool's input schema, an object) may be offered with strict: true."""
    return isinstance(schema, dict) and schema.get("type") == "object" and _fits(schema)


def _fits(schema: Any) -> bool:
    if not isinstance(schema, dict) or not set(schema) <= _ALLOWED:
        return False
    kinds = schema.get("type")
    if kinds is not None and not all(
        k in _TYPES for k in ([kinds] if isinstance(kinds, str) else kinds)
    ):
        return False
    if "object" in ([kinds] if isinstance(kinds, str) else kinds or ()):
        if schema.get("additionalProperties") is not False:
            return False
        properties = schema.get("properties", {})
        if not isinstance(properties, dict) or not all(_fits(p) for p in properties.values()):
            return False
    elif "additionalProperties" in schema or "properties" in schema:
        return False
    if "items" in schema and not _fits(schema["items"]):
        return False
    options = schema.get("anyOf")
    return options is None or (isinstance(options, list) and all(_fits(o) for o in options))
