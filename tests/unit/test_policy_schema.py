"""The policy input schema agrees with the example inputs the Rego tests use.

`opa test` proves the policy; this test keeps policies/input.schema.json honest: the example
documents in authz_test.rego must satisfy it, and it must reject documents that break it. jsonschema
is not a dependency, so a small checker covers exactly the keywords the schema uses and fails on any
other keyword instead of ignoring it.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

POLICIES = Path(__file__).resolve().parents[2] / "policies"
SCHEMA_PATH = POLICIES / "input.schema.json"
REGO_TEST_PATH = POLICIES / "tooljail" / "authz" / "authz_test.rego"
DATA_PATH = POLICIES / "data.json"
DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"

ANNOTATIONS = {"$schema", "$id", "$defs", "title", "description"}
TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}

# A top-level `name := {` ... `}` rule whose name ends in _input; opa fmt puts the closing brace
# alone at column 0, and the body must be plain JSON apart from the trailing commas opa fmt adds.
EXAMPLE_RULE = re.compile(r"^(\w+_input) := (\{\n.*?^\})$", re.MULTILINE | re.DOTALL)
TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def rego_examples() -> dict[str, dict[str, Any]]:
    """The example input documents defined in authz_test.rego, by rule name."""
    text = REGO_TEST_PATH.read_text(encoding="utf-8")
    examples = {}
    for name, body in EXAMPLE_RULE.findall(text):
        examples[name] = json.loads(TRAILING_COMMA.sub(r"\1", body))
    return examples


def violations(
    doc: Any, schema: dict[str, Any], root: dict[str, Any], where: str = "$"
) -> list[str]:
    """Every way `doc` breaks `schema` (the subset of draft 2020-12 the policy schema uses)."""
    unknown = set(schema) - ANNOTATIONS - set(CHECKS)
    if unknown:
        raise AssertionError(f"{where}: the checker does not know keywords {sorted(unknown)}")
    found: list[str] = []
    for keyword, value in schema.items():
        if keyword in CHECKS:
            found.extend(CHECKS[keyword](doc, value, schema, root, where))
    return found


def _ref(doc: Any, ref: str, _s: dict[str, Any], root: dict[str, Any], where: str) -> list[str]:
    assert ref.startswith("#/$defs/"), f"{where}: only local $defs references are supported"
    return violations(doc, root["$defs"][ref.removeprefix("#/$defs/")], root, where)


def _type(doc: Any, name: str, _s: dict[str, Any], _r: dict[str, Any], where: str) -> list[str]:
    ok = isinstance(doc, TYPES[name]) and not (
        name in {"integer", "number"} and isinstance(doc, bool)
    )
    return [] if ok else [f"{where}: expected {name}, got {type(doc).__name__}"]


def _required(
    doc: Any, keys: list[str], _s: dict[str, Any], _r: dict[str, Any], where: str
) -> list[str]:
    if not isinstance(doc, dict):
        return []
    return [f"{where}: missing {key!r}" for key in keys if key not in doc]


def _properties(
    doc: Any, props: dict[str, Any], _s: dict[str, Any], root: dict[str, Any], where: str
) -> list[str]:
    if not isinstance(doc, dict):
        return []
    found: list[str] = []
    for key, sub in props.items():
        if key in doc:
            found.extend(violations(doc[key], sub, root, f"{where}.{key}"))
    return found


def _additional(
    doc: Any, allowed: bool, schema: dict[str, Any], _r: dict[str, Any], where: str
) -> list[str]:
    assert allowed is False, f"{where}: only additionalProperties: false is supported"
    if not isinstance(doc, dict):
        return []
    extra = sorted(set(doc) - set(schema.get("properties", {})))
    return [f"{where}: unexpected {key!r}" for key in extra]


def _items(
    doc: Any, sub: dict[str, Any], _s: dict[str, Any], root: dict[str, Any], where: str
) -> list[str]:
    if not isinstance(doc, list):
        return []
    return [v for i, item in enumerate(doc) for v in violations(item, sub, root, f"{where}[{i}]")]


def _const(doc: Any, value: Any, _s: dict[str, Any], _r: dict[str, Any], where: str) -> list[str]:
    return [] if doc == value and type(doc) is type(value) else [f"{where}: must be {value!r}"]


def _enum(
    doc: Any, values: list[Any], _s: dict[str, Any], _r: dict[str, Any], where: str
) -> list[str]:
    return [] if doc in values else [f"{where}: {doc!r} is not one of {values}"]


def _pattern(
    doc: Any, pattern: str, _s: dict[str, Any], _r: dict[str, Any], where: str
) -> list[str]:
    if not isinstance(doc, str) or re.search(pattern, doc):
        return []
    return [f"{where}: {doc!r} does not match {pattern}"]


def _min_length(
    doc: Any, size: int, _s: dict[str, Any], _r: dict[str, Any], where: str
) -> list[str]:
    return [f"{where}: shorter than {size}"] if isinstance(doc, str) and len(doc) < size else []


# keyword -> check(document, keyword value, enclosing schema, root schema, location)
Check = Callable[[Any, Any, dict[str, Any], dict[str, Any], str], list[str]]
CHECKS: dict[str, Check] = {
    "$ref": _ref,
    "type": _type,
    "required": _required,
    "properties": _properties,
    "additionalProperties": _additional,
    "items": _items,
    "const": _const,
    "enum": _enum,
    "pattern": _pattern,
    "minLength": _min_length,
}


def test_schema_declares_draft_2020_12() -> None:
    schema = load_schema()
    assert schema["$schema"] == DRAFT_2020_12
    assert schema["type"] == "object"
    assert schema["properties"]["version"]["const"] == 1


def test_rego_tests_define_the_example_documents() -> None:
    assert set(rego_examples()) == {"read_input", "write_input", "bash_input", "list_tools_input"}


@pytest.mark.parametrize("name", ["read_input", "write_input", "bash_input"])
def test_required_keys_match_the_decision_examples(name: str) -> None:
    schema = load_schema()
    assert set(rego_examples()[name]) == set(schema["required"]) == set(schema["properties"])


@pytest.mark.parametrize("name", ["read_input", "write_input", "bash_input"])
def test_decision_examples_satisfy_the_schema(name: str) -> None:
    schema = load_schema()
    assert violations(rego_examples()[name], schema, schema) == []


def test_list_tools_example_satisfies_its_schema() -> None:
    schema = load_schema()
    list_schema = schema["$defs"]["list_tools_input"]
    assert violations(rego_examples()["list_tools_input"], list_schema, schema) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("version",), 2, "$.version: must be 1"),
        (("tool", "read_only"), "yes", "$.tool.read_only: expected boolean, got str"),
        (("paths", 0, "access"), "execute", "$.paths[0].access: 'execute' is not one of"),
        (("session", "workspace"), "srv/ws", "$.session.workspace: 'srv/ws' does not match ^/"),
        (("caller", "transport"), "carrier-pigeon", "$.caller.transport: 'carrier-pigeon' is not"),
        (("tool", "name"), "read file", "$.tool.name: 'read file' does not match"),
    ],
)
def test_schema_rejects_a_broken_document(path: tuple[Any, ...], value: Any, expected: str) -> None:
    schema = load_schema()
    doc = copy.deepcopy(rego_examples()["read_input"])
    target = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    found = violations(doc, schema, schema)
    assert len(found) == 1
    assert found[0].startswith(expected)


def test_schema_rejects_missing_and_unknown_keys() -> None:
    schema = load_schema()
    doc = copy.deepcopy(rego_examples()["read_input"])
    del doc["caller"]
    doc["approval_token"] = "t"
    assert violations(doc, schema, schema) == [
        "$: missing 'caller'",
        "$: unexpected 'approval_token'",
    ]


def test_data_names_the_readonly_bot() -> None:
    data = json.loads(DATA_PATH.read_text(encoding="utf-8"))
    principals = data["tooljail"]["principals"]
    bot = principals["readonly-bot"]
    assert bot["read_only_only"] is True
    assert set(bot["hidden_tools"]) == {"Write", "Edit", "MultiEdit", "Bash"}
    known = {"read_only_only", "hidden_tools", "ask_tools"}
    for name, settings in principals.items():
        assert set(settings) <= known, f"{name} has settings the policy does not read"
