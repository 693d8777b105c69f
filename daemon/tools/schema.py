"""What tool input models share: lax integers, and the one tidy JSON Schema a model is shown.

Models sometimes send numbers and booleans as strings ("10", "true"); pydantic's lax mode accepts
those already. What it also accepts, and we do not, is a boolean where an integer is expected
(`True` would silently become 1). The advertised schema drops what only costs the model tokens:
pydantic's generated titles, the `null` branch and `default: null` of optional fields, so it stays
as small as Claude Code's.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema


def _reject_bool(value: Any) -> Any:
    # bool is a subclass of int, so lax mode would turn `true` into 1 without a word.
    if isinstance(value, bool):
        raise ValueError("expected an integer, got a boolean")  # noqa: TRY004 (pydantic wants ValueError)
    return value


LaxInt = Annotated[int, BeforeValidator(_reject_bool)]
"""An integer that may arrive as a string ("10") but never as a boolean."""


# pydantic writes a constraint that reaches an int through a validator wrapper (`LaxInt | None =
# Field(gt=0)`) under its own keyword; the advertised schema must use JSON Schema's.
_CONSTRAINT_KEYWORDS = {
    "gt": "exclusiveMinimum",
    "ge": "minimum",
    "lt": "exclusiveMaximum",
    "le": "maximum",
}


def _standard_keywords(schema: dict[str, Any]) -> None:
    if schema.get("type") not in ("integer", "number"):
        return
    for ours, standard in _CONSTRAINT_KEYWORDS.items():
        if ours in schema:
            schema[standard] = schema.pop(ours)


def _tidy_property(prop: dict[str, Any]) -> None:
    _standard_keywords(prop)
    branches = prop.get("anyOf")
    if isinstance(branches, list):
        for branch in branches:
            if isinstance(branch, dict):
                _standard_keywords(branch)
        kept = [b for b in branches if b != {"type": "null"}]
        if len(kept) == 1 and len(kept) < len(branches):
            del prop["anyOf"]
            prop.update(kept[0])
    if "default" in prop and prop["default"] is None:
        del prop["default"]


def tidy_schema(schema: Any) -> Any:
    """Titles out at every depth; every object's properties without `null` branches, without
    `default: null` and with standard keywords."""
    if isinstance(schema, list):
        return [tidy_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    tidied = {
        key: tidy_schema(value)
        for key, value in schema.items()
        if not (key == "title" and isinstance(value, str))
    }
    properties = tidied.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                _tidy_property(prop)
    return tidied


class ToolInputSchema(GenerateJsonSchema):
    """pydantic's schema generator with the tidying above: `Model.model_json_schema(
    schema_generator=ToolInputSchema)` is what ListTools advertises."""

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> JsonSchemaValue:
        tidied: JsonSchemaValue = tidy_schema(super().generate(schema, mode))
        tidied.setdefault("type", "object")
        return tidied
