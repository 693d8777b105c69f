"""Operator tools: definitions checked at load (file, field, why), inputs checked by a real JSON
Schema validator, argv fields as whole arguments, output shapes mapped; the program itself runs
through the FakeSandbox here (tests/integration/test_operator_tools.py runs it in Docker)."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import pytest

from daemon.models import ImageContent
from daemon.tools.contract import ToolOrigin
from daemon.tools.operator.definition import ToolDefinitionError, load_specs
from daemon.tools.operator.tool import operator_tool
from daemon.tools.toolset import tool_registry
from sandbox.backend import ExecRequest
from tests.unit.fake_sandbox import FakeSandbox, make_context, run_tool, text_of

GREP_LIKE = """
name = "CountLines"
description = "Counts lines matching a word in one file of the workspace."
read_only = true
concurrency_safe = true

[input_schema]
type = "object"
required = ["word", "file"]
additionalProperties = false
[input_schema.properties.word]
type = "string"
minLength = 1
pattern = "^.+$"
[input_schema.properties.file]
type = "string"
pattern = "^[A-Za-z0-9_.][A-Za-z0-9_./-]*$"
[input_schema.properties.flags]
type = "array"
items = { type = "string", pattern = "^-[a-z]$" }

[run]
argv = ["grep", "-c", "{flags}", "--", "{word}", "{file}"]
stdin = "none"
"""


def _folder(tmp_path: Path, files: dict[str, str]) -> Path:
    tools = tmp_path / "policies" / "tools"
    tools.mkdir(parents=True)
    for name, text in files.items():
        (tools / name).write_text(textwrap.dedent(text))
    return tmp_path / "policies"


def _refusal(tmp_path: Path, text: str) -> str:
    """The load error of one bad file (asserted to name it)."""
    with pytest.raises(ToolDefinitionError) as caught:
        load_specs(_folder(tmp_path, {"bad.toml": text}), frozenset({"Read"}))
    return str(caught.value)


def test_a_folder_without_tools_gives_the_builtins_only(tmp_path: Path) -> None:
    registry = tool_registry(tmp_path)
    assert "Read" in registry.names() and registry.definition("Read").origin == ToolOrigin()


def test_a_good_definition_becomes_a_tool_with_its_schema_traits_and_origin(
    tmp_path: Path,
) -> None:
    registry = tool_registry(_folder(tmp_path, {"count.toml": GREP_LIKE}))
    definition = registry.definition("CountLines")
    assert definition.origin == ToolOrigin(kind="operator")
    assert definition.traits.read_only and definition.traits.concurrency_safe
    assert definition.traits.sandboxed and not definition.traits.destructive
    assert definition.input_schema["required"] == ["word", "file"]
    assert registry.names()[-1] == "CountLines"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name = 'x'\n", "bad.toml: description: Field required"),
        (GREP_LIKE.replace('name = "CountLines"', 'name = "Read"'), "built-in tool's name"),
        (GREP_LIKE.replace('name = "CountLines"', 'name = "mcp__a__b"'), "belong to MCP"),
        (GREP_LIKE.replace('name = "CountLines"', 'name = "two words"'), "bad.toml: name:"),
        (GREP_LIKE.replace('"{word}"', '"--word={word}"'), "must be a whole argument"),
        ("allow_dash_values = 'maybe'\n" + GREP_LIKE, "bad.toml: allow_dash_values: Input should"),
        (GREP_LIKE.replace('"{file}"', '"{fiel}"'), "{fiel}, which is not an input property"),
        (GREP_LIKE.replace('argv = ["grep"', 'argv = ["{word}"'), "must be a fixed name"),
        (GREP_LIKE.replace('type = "object"', 'type = "array"'), 'say "type": "object"'),
        (GREP_LIKE.replace("minLength = 1", 'minLength = "one"'), "not a valid JSON Schema"),
        (GREP_LIKE.replace("minLength = 1", '"$ref" = "http://127.0.0.1:9/s.json"'), "only #"),
        (GREP_LIKE + 'cwd = "../elsewhere"\n', "run.cwd: "),
        (GREP_LIKE + 'image = "Not An Image"\n', "run.image: "),
        (GREP_LIKE + "colour = 1\n", "run.colour: Extra inputs are not permitted"),
        ("name = [unclosed", "cannot be read as TOML"),
    ],
)
def test_bad_definitions_are_refused_with_the_file_field_and_why(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in _refusal(tmp_path, text)


def test_the_same_name_twice_is_refused_naming_both_files(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"a.toml": GREP_LIKE, "b.toml": GREP_LIKE})
    with pytest.raises(ToolDefinitionError, match=r"b.toml: name: CountLines is also defined in"):
        load_specs(folder, frozenset())


async def test_input_is_checked_by_the_schema_and_fields_become_whole_arguments(
    tmp_path: Path,
) -> None:
    [spec] = load_specs(_folder(tmp_path, {"count.toml": GREP_LIKE}), frozenset())
    tool = operator_tool(spec)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta alpha\ngamma\n")
    sandbox = FakeSandbox(workspace)
    ctx = make_context(workspace, sandbox=sandbox)
    ok = await run_tool(tool, {"word": "alpha", "file": "notes.txt"}, ctx)
    missing = await run_tool(tool, {"word": "alpha"}, ctx)
    extra = await run_tool(tool, {"word": "a", "file": "f", "more": 1}, ctx)
    option = await run_tool(tool, {"word": "-r", "file": "notes.txt"}, ctx)
    spaced = await run_tool(tool, {"word": "beta alpha", "file": "notes.txt"}, ctx)
    flagged = await run_tool(tool, {"word": "ALPHA", "file": "notes.txt", "flags": ["-i"]}, ctx)
    assert not ok.is_error and text_of(ok).strip() == "2"
    assert missing.is_error and "'file' is a required property" in text_of(missing)
    assert extra.is_error and "Additional properties are not allowed" in text_of(extra)
    assert option.is_error and "may not start with '-'" in text_of(option)
    # A value with a space is one argument (no shell); an absent list gives no argument.
    assert text_of(spaced).strip() == "1"
    assert flagged.is_error and "`flags` may not start with '-'" in text_of(flagged)
    # `$` of Python's re matches before a final newline: "notes.txt\n" passes the pattern.
    broken = await run_tool(tool, {"word": "alpha", "file": "notes.txt\n"}, ctx)
    assert broken.is_error and "`file` goes on the command line" in text_of(broken)
    for sneaky in ("alpha\r", "al\tpha", "a\x00b", "alpha\x7f"):  # `word` allows ^.+$
        broken = await run_tool(tool, {"word": sneaky, "file": "notes.txt"}, ctx)
        assert broken.is_error and "control characters" in text_of(broken), sneaky
    requests = [r for r in sandbox.requests if isinstance(r, ExecRequest)]
    assert requests[-1].argv == ("grep", "-c", "--", "beta alpha", "notes.txt")
    assert requests[0].stdin == ""  # stdin = "none"
    assert sandbox.placements[0] == ("", True)  # read-only: the workspace is mounted read-only


CONTENT_TOOL = """
name = "Chart"
description = "Draws a chart."
[input_schema]
type = "object"
properties.title = { type = "string" }
[run]
argv = ["python3", "-c", "import json,sys; print(json.dumps(ANSWER))"]
output = "content"
"""


async def _content(tmp_path: Path, answer: object) -> tuple[object, str, bool]:
    text = CONTENT_TOOL.replace("ANSWER", repr(answer).replace('"', '\\"'))
    [spec] = load_specs(_folder(tmp_path, {"chart.toml": text}), frozenset())
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    output = await run_tool(operator_tool(spec), {"title": "t"}, make_context(workspace))
    return output.content, text_of(output), output.is_error


async def test_a_content_answer_maps_to_blocks_and_a_bad_one_is_an_error(tmp_path: Path) -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    good = {"content": [{"type": "text", "text": "see"}, {"type": "image",
            "media_type": "image/png", "data": png}], "is_error": False}  # fmt: skip
    blocks, text, is_error = await _content(tmp_path / "a", good)
    assert not is_error and text == "see"
    assert isinstance(blocks, list) and isinstance(blocks[1], ImageContent)
    assert blocks[1].data == b"\x89PNG fake"
    _, text, is_error = await _content(tmp_path / "b", {"content": [{"type": "video"}]})
    assert is_error and "content[0]: a block is" in text
    _, text, is_error = await _content(tmp_path / "c", {"content": [], "is_error": True})
    assert is_error


async def test_a_non_zero_exit_is_an_error_with_what_it_printed(tmp_path: Path) -> None:
    text = CONTENT_TOOL.replace('output = "content"', 'output = "text"').replace(
        "print(json.dumps(ANSWER))",
        "d=json.load(sys.stdin); print('got', d['title']); print('bad', file=sys.stderr); "
        "sys.exit(4)",
    )
    [spec] = load_specs(_folder(tmp_path, {"t.toml": text}), frozenset())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    output = await run_tool(operator_tool(spec), {"title": "x y"}, make_context(workspace))
    assert output.is_error and output.exit_code == 4
    assert "exit code 4" in text_of(output)
    assert "got x y" in text_of(output) and "stderr:\nbad" in text_of(output)
    assert json.loads('{"title": "x y"}') == {"title": "x y"}


# --- found by the attacker round on operator tools ---------------------------------------------

BRACES = """
name = "Braces"
description = "A literal in braces must stay a literal."
[input_schema]
type = "object"
additionalProperties = false
properties.target = { type = "string", enum = ["a.txt", "b.txt"] }
properties.n = { type = "integer" }
[run]
argv = ["sh", "-c", "{ echo literal; }", "{target}", "{}", "{n}"]
stdin = "none"
"""


def test_only_whole_identifier_placeholders_take_input(tmp_path: Path) -> None:
    """A bash brace group or find's {} is a literal: it never takes (or loses) an input value."""
    [spec] = load_specs(_folder(tmp_path, {"b.toml": BRACES}), frozenset())
    tool = operator_tool(spec)
    # JSON numbers arrive as floats: an integer field gives "3", not "3.0".
    argv = tool._argv({"target": "a.txt", "n": 3.0})
    assert argv == ["sh", "-c", "{ echo literal; }", "a.txt", "{}", "3"]


@pytest.mark.parametrize(
    "schema",
    [
        '{ type = "string" }',
        '{ type = "array", items = { type = "string" } }',
        "{ }",
        # a loose prefixItems entry passed beside constrained items (re-check round)
        '{ type = "array", prefixItems = [{ type = "string" }], '
        'items = { type = "string", enum = ["a"] } }',
    ],
)
def test_a_free_string_cannot_go_on_the_command_line(tmp_path: Path, schema: str) -> None:
    """`find {dir} -delete` with dir = "!" deleted the workspace: a string placeholder must be
    held to a pattern or an enum by its schema, so no value can act as an option or operator."""
    text = BRACES.replace('{ type = "string", enum = ["a.txt", "b.txt"] }', schema)
    assert "an unconstrained string" in _refusal(tmp_path, text)


def test_constrained_strings_and_numbers_may_go_on_the_command_line(tmp_path: Path) -> None:
    text = BRACES.replace(
        '{ type = "string", enum = ["a.txt", "b.txt"] }',
        '{ type = "array", items = { type = "string", pattern = "^[a-z]+$" } }',
    )
    [spec] = load_specs(_folder(tmp_path, {"b.toml": text}), frozenset())
    assert spec.run.placeholders() == ["target", "n"]


def test_a_deeply_nested_definition_is_refused_not_crashed(tmp_path: Path) -> None:
    nested = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    assert "cannot be read as TOML" in _refusal(tmp_path, nested + GREP_LIKE)


async def test_a_symlink_loop_at_the_start_directory_is_an_input_error(tmp_path: Path) -> None:
    text = GREP_LIKE + 'cwd = "loop"\n'
    [spec] = load_specs(_folder(tmp_path, {"c.toml": text}), frozenset())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "loop").symlink_to(workspace / "loop")
    output = await run_tool(
        operator_tool(spec), {"word": "a", "file": "f"}, make_context(workspace)
    )
    assert output.is_error and "loop" in text_of(output)


async def test_deeply_nested_json_output_is_an_error_not_a_crash(tmp_path: Path) -> None:
    text = CONTENT_TOOL.replace("print(json.dumps(ANSWER))", "print('[' * 100000)")
    [spec] = load_specs(_folder(tmp_path, {"d.toml": text}), frozenset())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    output = await run_tool(operator_tool(spec), {"title": "t"}, make_context(workspace))
    assert output.is_error and "not the JSON its definition promises" in text_of(output)


def test_mount_points_inside_a_directory_are_found() -> None:
    from daemon.host.mounts import mounts_below

    table = (
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
        "90 22 0:50 / /srv/ws/data rw - tmpfs tmpfs rw\n"
        "91 22 0:51 / /srv/ws\\040two/x rw - tmpfs tmpfs rw\n"
        "92 22 0:52 / /srv/wsother rw - tmpfs tmpfs rw\n"
    )
    assert mounts_below(Path("/srv/ws"), table) == ["/srv/ws/data"]
    assert mounts_below(Path("/srv/ws two"), table) == ["/srv/ws two/x"]
