"""Shared pieces of the built-in tools' input models: lax scalars and a tidy advertised schema.

Models sometimes send numbers and booleans as strings ("10", "true"); pydantic's lax mode accepts
those already. What it also accepts, and we do not, is a boolean where an integer is expected
(`True` would silently become 1). Optional fields are advertised without their `null` branch and
without pydantic's generated titles, so the schema the model reads stays as small as Claude Code's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, PrivateAttr

from daemon.tools.contract import ToolInput
from daemon.workspace import resolve_path


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
    prop.pop("title", None)
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


def tidy_schema(schema: dict[str, Any]) -> None:
    """Drop `null` branches, `default: null` and per-property titles; use standard keywords."""
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                _tidy_property(prop)


def _tidy_hook(schema: dict[str, Any], _cls: type) -> None:
    tidy_schema(schema)


class LaxToolInput(ToolInput):
    """Base of the read-only tools' inputs: strict object, lax scalars, tidy advertised schema."""

    model_config = ConfigDict(json_schema_extra=_tidy_hook)
    _resolved: dict[str, tuple[str, Path]] = PrivateAttr(default_factory=dict)

    def resolved(self, field: str) -> Path:
        """The path in `field`, resolved (resolve_path); computed once per call: validation,
        the policy's touched paths and the call itself share it. Kept only while the field holds
        the same text, as a copy of the input carries it along."""
        raw = getattr(self, field)
        memo = self._resolved.get(field)
        if memo is not None and memo[0] == raw:
            return memo[1]
        path = resolve_path(raw, field)
        self._resolved[field] = (raw, path)
        return path
