"""Input schemas that come from outside the daemon (operator files, upstream MCP servers),
checked by a real JSON Schema validator (2020-12), safely.

A `$ref` must point inside the schema ("#..."): jsonschema would otherwise fetch a remote one
over HTTP, from the daemon, while a call is being checked. Validators get an empty registry, so
nothing is ever retrieved. Schemas of upstream servers are checked without their regular
expressions (`pattern`, `patternProperties`): a hostile pattern can take exponential time on a
short input and stall the daemon; such a server checks its own input anyway.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
import referencing
import referencing.exceptions

MAX_SCHEMA_ERRORS = 8


class SchemaProblem(ValueError):
    """A schema that cannot be used for a tool's input."""


def _nodes(schema: Any) -> Iterator[dict[str, Any]]:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def _without_regexes(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_without_regexes(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {k: _without_regexes(v) for k, v in schema.items() if k != "pattern"}
    if "patternProperties" in copy:
        del copy["patternProperties"]
        if copy.get("additionalProperties") is False:
            del copy["additionalProperties"]  # the names those patterns allowed stay allowed
    return copy


def input_validator(
    schema: dict[str, Any], *, run_regexes: bool = True
) -> jsonschema.Draft202012Validator:
    """A validator for a tool input schema; SchemaProblem when it is not a valid JSON Schema of
    an object or refers outside itself."""
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.path) or "(top)"
        raise SchemaProblem(f"not a valid JSON Schema at {where}: {exc.message}") from exc
    if schema.get("type") != "object":
        raise SchemaProblem('the input must be an object: say "type": "object"')
    for node in _nodes(schema):
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str) and not ref.startswith("#"):
                raise SchemaProblem(f"{key} {ref!r} points outside the schema; only #... refs")
    checked = schema if run_regexes else _without_regexes(schema)
    return jsonschema.Draft202012Validator(checked, registry=referencing.Registry())


def _where(error: jsonschema.ValidationError) -> str:
    return "/".join(str(part) for part in error.absolute_path) or "(input)"


def schema_errors(validator: jsonschema.Draft202012Validator, document: Any) -> list[str]:
    """What is wrong with `document`, one line per problem (the first few), by field."""
    try:
        errors = sorted(validator.iter_errors(document), key=_where)
    except referencing.exceptions.Unresolvable as exc:
        return [f"- the tool's input schema refers to something it does not define ({exc})"]
    return [f"- `{_where(e)}`: {e.message}" for e in errors[:MAX_SCHEMA_ERRORS]]
