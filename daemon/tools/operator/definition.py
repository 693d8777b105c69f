"""An operator's tool, as written in git: one TOML file per tool in the policy folder's `tools/`.

The file says what the model sees (name, description, input JSON Schema), the traits (the same
conservative defaults as every tool: not read-only, destructive, not concurrency-safe) and how
it runs: a program with arguments inside the sandbox, given the input as JSON on stdin and, where
the argv says `{field}`, single input fields as whole arguments. Everything is checked when the
folder is loaded; a bad file is refused with its name, the field and why, and the tools in force
stay as they were.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from daemon.errors import TooljailError
from daemon.tools.json_schema import input_validator
from sandbox.backend import ImageReference

TOOLS_FOLDER = "tools"
"""Where operator tools live, inside the policy folder (reloaded with it)."""
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""An argv element that takes an input field: exactly {identifier}; anything else is literal."""
MAX_RESULT_CHARS = 1_000_000
MAX_TOOLS = 256
MAX_FILE_BYTES = 256 * 1024


class ToolDefinitionError(TooljailError):
    """A tool definition that cannot be used: each line names the file, the field and why."""


class RunSpec(BaseModel):
    """How an operator's tool runs: a program in a disposable container (no shell)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argv: tuple[str, ...] = Field(
        min_length=1,
        description="The program (looked up on the image's PATH) and its arguments; an argument "
        "that is exactly {field} is that input field's value (a list: one argument per item; "
        "absent: no argument).",
    )
    stdin: Literal["json", "none"] = Field(
        default="json", description="json: the validated input as one JSON object on stdin."
    )
    output: Literal["text", "content"] = Field(
        default="text",
        description="text: stdout is the result. content: stdout is one JSON object "
        '{"content": [blocks], "is_error": bool}, blocks being {"type": "text", "text": ...} or '
        '{"type": "image", "media_type": ..., "data": base64}.',
    )
    image: ImageReference = Field(
        default="",
        description="A local image to run in instead of the sandbox image (it needs bash and "
        "python3, which the runner uses); images are never pulled.",
    )
    cwd: str = Field(
        default=".", description="Where the program starts, relative to the workspace."
    )
    timeout_ms: int = Field(
        default=120_000, gt=0, description="At most this long; the policy's limit may be lower."
    )

    @field_validator("argv")
    @classmethod
    def _whole_placeholders(cls, argv: tuple[str, ...]) -> tuple[str, ...]:
        if not argv[0] or PLACEHOLDER.search(argv[0]):
            raise ValueError("the program (the first element) must be a fixed name")
        for index, arg in enumerate(argv):
            if PLACEHOLDER.search(arg) and not PLACEHOLDER.fullmatch(arg):
                raise ValueError(
                    f"element {index} ({arg!r}): a placeholder must be a whole argument, "
                    "exactly {field}"
                )
        return argv

    @field_validator("cwd")
    @classmethod
    def _relative(cls, cwd: str) -> str:
        parts = Path(cwd).parts
        if Path(cwd).is_absolute() or ".." in parts:
            raise ValueError("a path relative to the workspace, without '..'")
        return cwd

    def placeholders(self) -> list[str]:
        """The input fields the argv names."""
        return [m.group(1) for arg in self.argv if (m := PLACEHOLDER.fullmatch(arg))]


class OperatorToolSpec(BaseModel):
    """One operator tool, as its file says."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The name the model calls it by (^[a-zA-Z0-9_-]{1,64}$).")
    description: str = Field(min_length=1, description="For the model: what, when, limits.")
    input_schema: dict[str, Any] = Field(
        description="A JSON Schema (2020-12) of an object; calls are validated against it."
    )
    read_only: bool = False
    destructive: bool = True
    concurrency_safe: bool = False
    max_result_chars: int = Field(default=30_000, gt=0, le=MAX_RESULT_CHARS)
    search_hint: str = ""
    defer_loading: bool = Field(default=False, description="Found through ToolSearch only.")
    allow_dash_values: bool = Field(
        default=False,
        description="Let argv fields start with '-' (off: a value cannot turn into an option).",
    )
    run: RunSpec

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError("letters, digits, '_' and '-' only, 1 to 64 of them")
        if name.startswith("mcp__"):
            raise ValueError("names starting with mcp__ belong to MCP servers' tools")
        return name

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, schema: dict[str, Any]) -> dict[str, Any]:
        input_validator(schema)  # SchemaProblem is a ValueError: reported with the field
        return schema

    @model_validator(mode="after")
    def _placeholders_are_properties(self) -> OperatorToolSpec:
        properties = self.input_schema.get("properties", {})
        for field in self.run.placeholders():
            if field not in properties:
                known = ", ".join(sorted(properties)) or "none"
                raise ValueError(
                    f"run.argv names {{{field}}}, which is not an input property (they are: "
                    f"{known})"
                )
            if not _constrained(properties[field]):
                raise ValueError(
                    f"run.argv puts {{{field}}} on the command line as an unconstrained string: "
                    f"give input_schema.properties.{field} a pattern or an enum that no option "
                    "or operator of the program matches (a value like '!' or 'X=1' is read as "
                    "one by some programs), or pass it on stdin instead"
                )
        return self


def _constrained(schema: Any) -> bool:
    """Whether every value `schema` allows is held to a shape its author chose: numbers and
    booleans, enums and consts, strings with a pattern (lists: of such items)."""
    if not isinstance(schema, dict):
        return False
    if "enum" in schema or "const" in schema:
        return True
    kind = schema.get("type")
    if kind in ("integer", "number", "boolean"):
        return True
    if kind == "array":
        # Every item a list may hold, wherever it sits: `items` and each of `prefixItems`.
        prefix = schema.get("prefixItems", [])
        return (
            _constrained(schema.get("items"))
            and isinstance(prefix, list)
            and all(_constrained(item) for item in prefix)
            and "contains" not in schema
        )
    return kind == "string" and isinstance(schema.get("pattern"), str)


def _problems(file: str, exc: ValidationError) -> list[str]:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(file)"
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{file}: {where}: {message}")
    return lines


def load_specs(policy_folder: Path, reserved: frozenset[str]) -> list[OperatorToolSpec]:
    """Every tool in `policy_folder`/tools/*.toml (sorted by file name); none when there is no
    such folder. `reserved`: names taken (the built-in tools). Raises ToolDefinitionError
    naming every problem found."""
    folder = policy_folder / TOOLS_FOLDER
    if not folder.is_dir():
        return []
    problems: list[str] = []
    specs: list[OperatorToolSpec] = []
    seen: dict[str, str] = {}
    files = sorted(folder.glob("*.toml"))
    if len(files) > MAX_TOOLS:
        raise ToolDefinitionError(f"{TOOLS_FOLDER}/: more than {MAX_TOOLS} tool files")
    for path in files:
        file = f"{TOOLS_FOLDER}/{path.name}"
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                problems.append(f"{file}: larger than {MAX_FILE_BYTES} bytes")
                continue
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
            problems.append(f"{file}: cannot be read as TOML: {exc}")
            continue
        try:
            spec = OperatorToolSpec.model_validate(document)
        except ValidationError as exc:
            problems += _problems(file, exc)
            continue
        if spec.name in reserved:
            problems.append(f"{file}: name: {spec.name} is a built-in tool's name")
        elif spec.name in seen:
            problems.append(f"{file}: name: {spec.name} is also defined in {seen[spec.name]}")
        else:
            seen[spec.name] = file
            specs.append(spec)
    if problems:
        raise ToolDefinitionError(
            "operator tools refused (the tools in force stay as they were):\n"
            + "\n".join(f"- {line}" for line in problems)
        )
    return specs
