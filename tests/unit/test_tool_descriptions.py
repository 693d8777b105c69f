"""The built-in tools' descriptions and field descriptions, reviewed as one set.

They are written for a model: every tool and every field is described, briefly; every description
names its limits with the numbers the code enforces; paths are worded the same way everywhere; and
the names and schemas stay those of Claude Code, which models are trained on.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from daemon.tools import bash, ls, read
from daemon.tools.builtin import builtin_registry
from daemon.tools.contract import AnyTool
from daemon.tools.files import change as write
from daemon.tools.glob import engine as glob
from daemon.tools.grep import input as grep

REGISTRY = builtin_registry()
ALL_TOOLS = [REGISTRY.get(name) for name in REGISTRY.names()]
CORE = ("Read", "Write", "Edit", "MultiEdit", "Bash", "Glob", "Grep", "LS")

GREP_FIELDS = {"pattern", "path", "glob", "type", "output_mode", "head_limit", "offset"} | {
    "-A", "-B", "-C", "context", "-n", "-i", "-o", "multiline"
}  # fmt: skip

#: Claude Code's field names and required fields, which must not drift.
SCHEMAS: dict[str, tuple[set[str], set[str]]] = {
    "Read": ({"file_path", "offset", "limit", "pages"}, {"file_path"}),
    "Write": ({"file_path", "content"}, {"file_path", "content"}),
    "Edit": (
        {"file_path", "old_string", "new_string", "replace_all"},
        {"file_path", "old_string", "new_string"},
    ),
    "MultiEdit": ({"file_path", "edits"}, {"file_path", "edits"}),
    "Bash": ({"command", "timeout", "description", "run_in_background"}, {"command"}),
    "Glob": ({"pattern", "path"}, {"pattern"}),
    "Grep": (GREP_FIELDS, {"pattern"}),
    "LS": ({"path", "ignore"}, {"path"}),
    "NotebookEdit": (
        {"notebook_path", "cell_id", "new_source", "cell_type", "edit_mode"},
        {"notebook_path", "new_source"},
    ),
    "BashOutput": ({"bash_id", "filter"}, {"bash_id"}),
    "KillShell": ({"shell_id"}, {"shell_id"}),
}


def budget(name: str) -> str:
    tool = REGISTRY.get(name)
    assert tool is not None
    return f"{tool.traits.max_result_chars} characters"


#: What each description must say about its limits, in the numbers the code enforces.
LIMITS: dict[str, list[str]] = {
    "Read": [
        f"{read.DEFAULT_LIMIT} lines",
        f"longer than {read.MAX_LINE_CHARS} characters",
        f"{read.MAX_WHOLE_FILE_BYTES // 1024} KB",
        f"{read.MAX_FILE_BYTES >> 20} MB",
        budget("Read"),
    ],
    "Write": [f"{write.MAX_FILE_MB} MB"],
    "Edit": [f"{write.MAX_FILE_MB} MB"],
    "MultiEdit": [f"{write.MAX_FILE_MB} MB"],
    "Bash": [
        f"default {bash.DEFAULT_TIMEOUT_MS}",
        f"max {bash.MAX_TIMEOUT_MS}",
        "milliseconds",
        budget("Bash"),
    ],
    "Glob": [f"at most {glob.MAX_RESULTS} files", f"{glob.MAX_SCANNED} directory entries"],
    "Grep": [
        f"default {grep.DEFAULT_HEAD_LIMIT}",
        budget("Grep"),
        f"longer than {grep.MAX_COLUMNS} characters",
        "time limit",
    ],
    "LS": [f"{ls.MAX_ENTRIES} entries"],
}

PATH_FIELDS = {"file_path", "path"}
PATH_WORDING = "an absolute path inside the workspace"


def fields_of(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every property of the schema, nested models ($defs) included, by dotted name."""
    found = {name: spec for name, spec in schema.get("properties", {}).items()}
    for model, definition in schema.get("$defs", {}).items():
        for name, spec in definition.get("properties", {}).items():
            found[f"{model}.{name}"] = spec
    return found


def tool(name: str) -> AnyTool:
    found = REGISTRY.get(name)
    assert found is not None, name
    return found


def test_every_core_tool_is_registered_under_its_claude_code_name() -> None:
    assert set(CORE) <= set(REGISTRY.names())


@pytest.mark.parametrize("subject", ALL_TOOLS, ids=lambda t: t.name)
def test_every_tool_has_a_short_description(subject: AnyTool) -> None:
    description = subject.description
    assert 150 <= len(description) <= 1800, len(description)
    assert description == description.strip()
    assert "  " not in description, "double space"


@pytest.mark.parametrize("subject", ALL_TOOLS, ids=lambda t: t.name)
def test_every_field_has_a_short_description(subject: AnyTool) -> None:
    fields = fields_of(subject.input_schema())
    assert fields
    for name, spec in fields.items():
        text = spec.get("description", "")
        assert 15 <= len(text) <= 300, f"{subject.name}.{name}: {text!r}"
        assert text[0].isupper() or text[0] in "\"'", f"{subject.name}.{name}: {text!r}"
        assert text.endswith((".", ")")), f"{subject.name}.{name}: {text!r}"


@pytest.mark.parametrize("name", CORE)
def test_names_and_schemas_stay_those_of_claude_code(name: str) -> None:
    schema = tool(name).input_schema()
    properties, required = SCHEMAS[name]
    assert set(schema["properties"]) == properties
    assert set(schema.get("required", [])) == required
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("name", CORE)
def test_each_description_names_its_limits(name: str) -> None:
    description = tool(name).description
    missing = [limit for limit in LIMITS[name] if limit not in description]
    assert not missing, f"{name} does not say: {missing}"


@pytest.mark.parametrize("name", CORE)
def test_each_description_says_when_another_tool_is_better(name: str) -> None:
    others = [other for other in CORE if other != name]
    named = [other for other in others if re.search(rf"\b{other}\b", tool(name).description)]
    assert named, f"{name} never points to another tool"


@pytest.mark.parametrize("name", CORE)
def test_the_set_is_worded_consistently(name: str) -> None:
    description = tool(name).description
    first_word = description.split()[0]
    assert first_word[0].isupper() and first_word.endswith("s"), "starts like 'Reads ...'"
    assert not re.search(r"\d,\d{3}", description), "numbers are written without separators"
    for field, spec in fields_of(tool(name).input_schema()).items():
        if field in PATH_FIELDS:
            assert PATH_WORDING in spec["description"], f"{name}.{field}"
    if PATH_FIELDS & set(tool(name).input_schema()["required"]):
        assert f"must be {PATH_WORDING}" in description


def test_read_explains_the_line_prefix_and_the_edit_tools_leave_it_out() -> None:
    assert "right-aligned in 6 columns followed by a tab" in tool("Read").description
    assert "not part of the file" in tool("Read").description
    assert "not part of the file" in tool("Edit").description
    assert "6 columns" in tool("Edit").description
    assert "without Read's line-number prefix" in tool("MultiEdit").description
    old_string = fields_of(tool("Edit").input_schema())["old_string"]["description"]
    assert "not part of the file" in old_string
    edit_op = fields_of(tool("MultiEdit").input_schema())["EditOperation.old_string"]
    assert edit_op["description"] == old_string
