"""Schema validation of tool input with errors a model can act on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from daemon.errors import ToolInputError
from daemon.tools.contract import AnyTool, ToolInput

#: Keep error texts short even for huge invalid inputs.
_MAX_SHOWN_VALUE = 80


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_VALUE else text[: _MAX_SHOWN_VALUE - 3] + "..."


MAX_PROBLEMS = 20
"""Problems listed for one input; an input with more (thousands of unknown fields) gets a count."""
MAX_LOCATION_CHARS = 100


def describe_validation_error(tool: AnyTool, exc: ValidationError) -> str:
    """One line per problem (the first MAX_PROBLEMS): which field, what was wrong, what is
    allowed."""
    allowed = ", ".join(
        field.alias or name for name, field in tool.input_model.model_fields.items()
    )
    problems: list[str] = []
    errors = exc.errors(include_url=False)
    for error in errors[:MAX_PROBLEMS]:
        location = ".".join(str(part) for part in error["loc"]) or "(input)"
        if len(location) > MAX_LOCATION_CHARS:
            location = location[:MAX_LOCATION_CHARS] + "…"
        kind = error["type"]
        if kind == "extra_forbidden":
            problems.append(f"- `{location}`: unexpected field; the allowed fields are {allowed}.")
        elif kind == "missing":
            problems.append(f"- `{location}`: required field is missing.")
        else:
            got = "" if kind == "model_type" else f" (got {_shown(error.get('input'))})"
            problems.append(f"- `{location}`: {error['msg']}{got}.")
    if len(errors) > MAX_PROBLEMS:
        problems.append(f"- ... and {len(errors) - MAX_PROBLEMS} more problems.")
    return (
        f"Invalid input for the {tool.name} tool:\n"
        + "\n".join(problems)
        + f"\nFix the input to match the {tool.name} input schema and call it again."
    )


def parse_input(tool: AnyTool, raw: dict[str, Any]) -> ToolInput:
    """Validate raw input against the tool's model (numbers and booleans may come as strings)."""
    try:
        return tool.input_model.model_validate(raw)
    except ValidationError as exc:
        raise ToolInputError(describe_validation_error(tool, exc)) from exc
