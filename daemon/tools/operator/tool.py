"""An operator's tool as a Tool: its own JSON Schema validated by a real validator, its declared
traits, and a program run in a disposable container (see definition.py for the file format).

The program gets the validated input as JSON on stdin and, where the argv says so, single fields
as whole arguments (never through a shell: no quoting to get wrong). A tool declared read-only
gets the workspace mounted read-only, so the kernel holds it to its word. What it prints maps to
the tool_result: its text, or (output = "content") content blocks it chose, checked here; a
non-zero exit is an error showing what it printed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict

from daemon.errors import ToolError, ToolInputError
from daemon.host.confine import is_inside
from daemon.host.mounts import mounts_below
from daemon.models import ContentBlock, ImageContent, TextContent
from daemon.sessions.session import Session
from daemon.tools.contract import (
    CallContext,
    CallFacts,
    ProgressUpdate,
    Tool,
    ToolInput,
    ToolOrigin,
    ToolOutput,
    ToolTraits,
    TouchedPath,
)
from daemon.tools.json_schema import isolated_checks
from daemon.tools.operator.definition import PLACEHOLDER, OperatorToolSpec
from daemon.tools.summaries import failed, seconds
from sandbox.backend import ExecRequest, SandboxResult

#: stdout kept of a content answer (images travel in it, base64): past it the JSON is cut.
CONTENT_OUTPUT_BYTES = 16 << 20
MAX_BLOCKS = 64
"""Content blocks one answer may have (each costs memory before any budget applies)."""
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class OperatorInput(ToolInput):
    """Any object: the operator's JSON Schema is checked in `validate` (a real validator)."""

    model_config = ConfigDict(extra="allow", frozen=True)


@dataclass(frozen=True)
class OperatorRun:
    """A finished run, and the timeout it had."""

    result: SandboxResult
    timeout_ms: int


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class OperatorTool(Tool[OperatorInput, OperatorRun]):
    """Base of the classes `operator_tool` makes, one per definition."""

    spec: ClassVar[OperatorToolSpec]
    input_model = OperatorInput
    origin = ToolOrigin(kind="operator")
    prepares_off_loop = True

    def input_schema(self) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(self.spec.input_schema))
        return copy  # nobody can change the definition through it

    def validate(self, args: OperatorInput, session: Session) -> OperatorInput:
        document = args.model_dump(mode="json")
        errors = isolated_checks().errors(
            self.spec.input_schema, document, run_regexes=True, who=session.owner
        )
        if errors:
            raise ToolInputError(
                f"Invalid input for the {self.name} tool:\n"
                + "\n".join(errors)
                + f"\nFix the input to match the {self.name} input schema and call it again."
            )
        self._argv(document)  # a value that cannot become an argument is an input error
        return args

    def analyse(self, args: OperatorInput, session: Session) -> CallFacts:
        try:
            start = (session.workspace / self.spec.run.cwd).resolve()
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symbolic link loop (3.11)
            raise ToolInputError(
                f"The {self.name} tool starts in {self.spec.run.cwd} of the workspace, which "
                f"cannot be resolved ({exc}); fix or remove it."
            ) from exc
        access: Literal["read", "write"] = "read" if self.spec.read_only else "write"
        return self.facts(paths=[TouchedPath.of(session.workspace, start, access)])

    def _argv(self, document: dict[str, Any]) -> list[str]:
        argv: list[str] = []
        for arg in self.spec.run.argv:
            placeholder = PLACEHOLDER.fullmatch(arg)  # the very test the definition passed
            if placeholder is None:
                argv.append(arg)
                continue
            field = placeholder.group(1)
            value = document.get(field)
            values = value if isinstance(value, list) else [] if value is None else [value]
            for item in values:
                argv.append(self._argument(field, item))
        return argv

    def _argument(self, field: str, value: Any) -> str:
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))  # JSON numbers arrive as floats: 3, not 3.0
        elif isinstance(value, int | float | str):
            text = str(value)
        else:
            raise ToolInputError(
                f"Invalid input for the {self.name} tool: `{field}` goes on the command line, "
                "so it must be a string, a number, a boolean or a list of those."
            )
        if text.startswith("-") and not self.spec.allow_dash_values:
            raise ToolInputError(
                f"Invalid input for the {self.name} tool: `{field}` may not start with '-' "
                "(it would be read as an option)."
            )
        if _CONTROL.search(text):
            # A line break slips past a pattern such as ^[a-z]+$ (Python's $ also matches
            # before a final newline), and no command-line value needs one.
            raise ToolInputError(
                f"Invalid input for the {self.name} tool: `{field}` goes on the command line, "
                "so it may not hold control characters (line breaks, tabs, NUL...)."
            )
        return text

    async def call(self, args: OperatorInput, ctx: CallContext) -> OperatorRun:
        runner = ctx.require_sandbox()
        run = self.spec.run
        start = ctx.facts.paths[0].path
        if (
            not is_inside(ctx.workspace, start)
            or await ctx.session.directory_inside(str(start)) != start
        ):
            raise ToolError(
                f"The {self.name} tool starts in {run.cwd} of the workspace, which is not a "
                "directory there; create it or ask the operator to fix the tool."
            )
        if self.spec.read_only and (inside := mounts_below(ctx.workspace)):
            raise ToolError(
                f"The {self.name} tool is read-only, but the workspace has filesystems mounted "
                f"inside it ({', '.join(inside[:3])}) that a read-only mount of the workspace "
                "does not cover on this Docker engine, so it was not run. Ask the operator."
            )
        document = args.model_dump(mode="json")
        timeout_ms = min(run.timeout_ms, ctx.limits.timeout_ms)
        text_limit = 4 * self.traits.max_result_chars
        limit = CONTENT_OUTPUT_BYTES if run.output == "content" else text_limit
        request = ExecRequest(
            argv=tuple(self._argv(document)),
            stdin=json.dumps(document, ensure_ascii=False) if run.stdin == "json" else "",
            cwd=str(start),
            timeout_ms=timeout_ms,
            output_limit_bytes=max(limit, 1 << 16),
        )

        def report(chunk: str) -> None:
            ctx.report(ProgressUpdate(output=chunk))

        result = await runner.run(
            request,
            ctx.limits,
            report if ctx.progress is not None else None,
            image=run.image,
            read_only_workspace=self.spec.read_only,
        )
        return OperatorRun(result, timeout_ms)

    def render(self, result: OperatorRun) -> ToolOutput:
        run = result.result
        if run.error:
            return self._output([TextContent(text=f"{self.name} could not run: {run.error}")], run)
        if run.timed_out:
            text = f"{self.name} timed out: it was killed after {result.timeout_ms} ms."
            return self._output([TextContent(text=self._with_output(text, run))], run)
        if run.oom_killed:
            text = f"{self.name} ran out of memory and was killed."
            return self._output([TextContent(text=self._with_output(text, run))], run)
        if run.exit_code != 0:
            text = f"{self.name} failed with exit code {run.exit_code}."
            return self._output([TextContent(text=self._with_output(text, run))], run)
        if self.spec.run.output == "content":
            return self._content(run)
        text = run.output or "(no output)"
        if run.output_truncated:
            text += f"\n\n[Output truncated: {run.output_bytes} bytes in all.]"
        return self._output([TextContent(text=text)], run, is_error=False)

    def _content(self, run: SandboxResult) -> ToolOutput:
        try:
            if run.output_truncated:
                raise ValueError(f"it is larger than {CONTENT_OUTPUT_BYTES} bytes")
            blocks, is_error = _blocks(json.loads(run.output))
        except (ValueError, TypeError, RecursionError) as exc:
            text = (
                f"{self.name} printed an answer that is not the JSON its definition promises "
                f"({exc}); this is a problem of the tool, tell the operator."
            )
            return self._output([TextContent(text=self._with_output(text, run))], run)
        return self._output(blocks, run, is_error=is_error)

    @staticmethod
    def _with_output(text: str, run: SandboxResult) -> str:
        parts = [text]
        if run.output:
            parts.append(f"stdout:\n{run.output}")
        if run.stderr:
            parts.append(f"stderr:\n{run.stderr}")
        return "\n".join(parts)

    @staticmethod
    def _output(
        content: list[ContentBlock], run: SandboxResult, *, is_error: bool = True
    ) -> ToolOutput:
        return ToolOutput(
            content=content,
            is_error=is_error,
            exit_code=run.exit_code,
            timed_out=run.timed_out,
            oom_killed=run.oom_killed,
            sandbox_id=run.sandbox_id,
        )

    def summarize(self, args: OperatorInput, result: OperatorRun | None, output: ToolOutput) -> str:
        if result is None or result.result.error:
            return failed(self.name, output)
        run = result.result
        return f"{self.name}: exit {run.exit_code} after {seconds(run.duration_ms)}"


def _blocks(answer: Any) -> tuple[list[ContentBlock], bool]:
    """The content blocks of a tool's JSON answer, checked."""
    if not isinstance(answer, dict) or not isinstance(answer.get("content"), list):
        raise TypeError('expected an object with a "content" list')
    is_error = answer.get("is_error", False)
    if not isinstance(is_error, bool):
        raise TypeError('"is_error" must be true or false')
    if len(answer["content"]) > MAX_BLOCKS:
        raise ValueError(f"more than {MAX_BLOCKS} content blocks")
    blocks: list[ContentBlock] = []
    for index, block in enumerate(answer["content"]):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            blocks.append(TextContent(text=block["text"]))
        elif kind == "image" and block.get("media_type") in _IMAGE_TYPES:
            try:
                data = base64.b64decode(str(block.get("data", "")), validate=True)
            except binascii.Error as exc:
                raise ValueError(f"content[{index}]: the image data is not base64") from exc
            blocks.append(ImageContent(media_type=block["media_type"], data=data))
        else:
            raise ValueError(
                f"content[{index}]: a block is {{type: text, text}} or {{type: image, "
                f"media_type ({', '.join(sorted(_IMAGE_TYPES))}), data (base64)}}"
            )
    return blocks, is_error


def operator_tool(spec: OperatorToolSpec) -> OperatorTool:
    """The tool one definition describes."""
    traits = ToolTraits(
        read_only=spec.read_only,
        destructive=spec.destructive and not spec.read_only,
        concurrency_safe=spec.concurrency_safe,
        sandboxed=True,
        max_result_chars=spec.max_result_chars,
    )
    cls = type(
        f"OperatorTool_{spec.name.replace('-', '_')}",
        (OperatorTool,),
        {
            "name": spec.name,
            "description": spec.description,
            "traits": traits,
            "search_hint": spec.search_hint,
            "spec": spec,
        },
    )
    tool: OperatorTool = cls()
    return tool
