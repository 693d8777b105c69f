"""The call lifecycle with a fake policy engine and small test tools."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from daemon.calls import pipeline as pipeline_module
from daemon.calls.audit import AuditLog
from daemon.calls.kept_outputs import KeptOutputs
from daemon.calls.pipeline import CallRequest, Pipeline, PipelineLimits
from daemon.errors import ToolError, ToolInputError, Unavailable
from daemon.json_values import LARGE_VALUE_CHARS, canonical_input_hash
from daemon.models import Caller, Outcome, ToolUse
from daemon.ops.logs import JsonFormatter
from daemon.policy.document_body import LargeDocument
from daemon.policy.engine import PolicyEngine
from daemon.policy.mask import AuditMask
from daemon.policy.verdict import Verdict, parse_verdict
from daemon.sessions.session import Session
from daemon.sessions.store import SessionStore
from daemon.tools import call as call_module
from daemon.tools.contract import CallContext, Tool, ToolInput, ToolOutput, ToolTraits
from daemon.tools.glob.tool import GlobTool
from daemon.tools.registry import ToolRegistry
from sandbox.backend import SandboxLimits
from sandbox.limits import SandboxCeilings


class EchoInput(ToolInput):
    text: str = Field(description="what to echo")
    times: int = Field(default=1, gt=0, le=100_000)


class EchoTool(Tool[EchoInput, str]):
    name: ClassVar[str] = "Echo"
    description: ClassVar[str] = "Echoes text."
    input_model = EchoInput
    traits = ToolTraits(read_only=True, destructive=False, sandboxed=False, max_result_chars=2_000)
    seen_limits: ClassVar[list[SandboxLimits]] = []

    def validate(self, args: EchoInput, session: Session) -> EchoInput:
        if args.text == "forbidden":
            raise ToolInputError("text may not be 'forbidden'")
        if args.text == "too deep":
            # As a tool's own check can fail on a hostile input (Glob's braces did).
            raise RecursionError("maximum recursion depth exceeded")
        return args

    async def call(self, args: EchoInput, ctx: CallContext) -> str:
        self.seen_limits.append(ctx.limits)
        if args.text == "fail":
            raise ToolError("it failed, as asked")
        if args.text == "crash":
            raise RuntimeError("boom")
        return args.text * args.times

    def render(self, result: str) -> ToolOutput:
        return ToolOutput.text(result)

    def summarize(self, args: EchoInput, result: str | None, output: ToolOutput) -> str:
        if args.text == "bad summary":
            raise ValueError("the summary itself failed")
        return super().summarize(args, result, output)


class ChangeTool(EchoTool):
    """Like Echo, but declared as changing something."""

    name: ClassVar[str] = "Change"
    traits = ToolTraits(read_only=False, destructive=False, sandboxed=False, max_result_chars=2_000)


class DisabledTool(EchoTool):
    name: ClassVar[str] = "Disabled"
    enabled: ClassVar[bool] = False


@dataclass
class FakeEngine(PolicyEngine):
    verdict: Verdict
    visible: frozenset[str] | None = frozenset({"Echo"})
    documents: list[dict[str, Any]] | None = None

    async def decide(self, document: dict[str, Any]) -> Verdict:
        if self.documents is not None:
            self.documents.append(document)
        return self.verdict

    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        return self.visible

    @property
    def revision(self) -> str:
        return "abc1234"


def allow(**limits: Any) -> Verdict:
    return Verdict(Outcome.ALLOW, (), SandboxLimits(**limits), None)


_AUDITS: list[AuditLog] = []


@pytest.fixture(autouse=True)
def _close_audit_logs() -> Iterator[None]:
    yield
    while _AUDITS:
        _AUDITS.pop().close()


def make_pipeline(
    tmp_path: Path,
    engine: FakeEngine,
    kept: KeptOutputs | None = None,
    tools: list[Tool[Any, Any]] | None = None,
) -> Pipeline:
    audit = AuditLog(str(tmp_path / "audit.jsonl"))
    _AUDITS.append(audit)
    return Pipeline(
        registry=ToolRegistry(tools or [EchoTool(), ChangeTool(), DisabledTool()]),
        policy=engine,
        sessions=SessionStore(tmp_path / "ws"),
        limits=PipelineLimits(
            result_budget_chars=50_000,
            default_sandbox=SandboxLimits(),
            ceilings=SandboxCeilings(timeout_ms=10_000, memory_mb=1024),
        ),
        audit=audit,
        kept=kept,
    )


async def run(pipeline: Pipeline, name: str, tool_input: dict[str, Any]) -> Any:
    request = CallRequest(tool_use=ToolUse(id="toolu_1", name=name, input=tool_input))
    return await pipeline.execute(request, Caller(principal="tester", transport="inproc"))


async def test_allowed_call_runs_and_is_audited(tmp_path: Path) -> None:
    documents: list[dict[str, Any]] = []
    pipeline = make_pipeline(tmp_path, FakeEngine(allow(), documents=documents))
    outcome = await run(pipeline, "Echo", {"text": "hi", "times": "3"})
    assert outcome.result.text() == "hihihi"
    assert not outcome.result.is_error
    assert outcome.decision.outcome is Outcome.ALLOW
    assert outcome.decision.policy_revision == "abc1234"
    document = documents[0]
    assert document["version"] == 1
    assert document["tool"]["name"] == "Echo" and document["tool"]["read_only"] is True
    assert document["input"] == {"text": "hi", "times": 3}
    assert document["caller"] == {"principal": "tester", "transport": "inproc"}
    audit = _audit_records(tmp_path)
    assert [(r["event"], r["outcome"], r["tool"]) for r in audit] == [("answered", "allow", "Echo")]
    assert audit[0]["decision_id"] == outcome.decision.decision_id


async def test_a_call_that_can_change_something_is_on_file_before_it_runs(tmp_path: Path) -> None:
    outcome = await run(make_pipeline(tmp_path, FakeEngine(allow())), "Change", {"text": "x"})
    assert outcome.result.text() == "x"
    audit = _audit_records(tmp_path)
    assert [(r["event"], r["outcome"], r["tool"]) for r in audit] == [
        ("decided", "allow", "Change"),
        ("answered", "allow", "Change"),
    ]
    assert {r["decision_id"] for r in audit} == {outcome.decision.decision_id}
    assert "is_error" not in audit[0] and audit[1]["is_error"] is False


@dataclass
class MaskingEngine(FakeEngine):
    """Hides `sk-` keys in the audit, as the shipped mask_patterns do."""

    @property
    def audit_mask(self) -> AuditMask:
        return AuditMask.parse([], [r"(?P<secret>sk-[a-z]+)"])


async def test_the_files_a_glob_lists_are_never_masked(tmp_path: Path) -> None:
    """Glob's `pattern` names the files it lists, like a path: a masked one hid which files a
    Glob listed (left open by round 146, where Grep's `pattern`, a regular expression that may
    hold a secret, kept its masking)."""
    engine = MaskingEngine(allow(), visible=frozenset({"Glob", "Echo"}))
    pipeline = make_pipeline(tmp_path, engine, tools=[GlobTool(), EchoTool()])
    outcome = await run(pipeline, "Glob", {"pattern": "sk-abc/**/*.py"})
    assert not outcome.result.is_error, outcome.result.text()
    await run(pipeline, "Echo", {"text": "sk-abc"})
    glob, echo = _audit_records(tmp_path)
    assert glob["input"] == {"pattern": "sk-abc/**/*.py"}
    assert echo["input"] == {"text": "***masked***"}


class CommandInput(ToolInput):
    command: str


class CommandTool(EchoTool):
    """Takes a Bash command and is prepared off the event loop, as Bash is."""

    name: ClassVar[str] = "Command"
    input_model = CommandInput  # type: ignore[assignment]
    traits = ToolTraits(read_only=False, destructive=True, sandboxed=False)
    prepares_off_loop: ClassVar[bool] = True

    def validate(self, args: Any, session: Session) -> Any:
        return args

    def summarize(self, args: Any, result: Any, output: ToolOutput) -> str:
        return "a command"

    async def call(self, args: Any, ctx: CallContext) -> str:
        return "ran"


async def test_a_long_command_is_masked_with_the_bounded_parser_in_a_worker_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 148: masking parsed commands on the event loop, for as long as the
    parser took (15 s for one 32 KB pipeline). A call prepared in a worker thread has its
    command masked there with the bounded parser, once for all its audit records."""
    from daemon.shell.bounded import parse_bounded

    owners: list[str] = []

    def bounded(raw: str, owner: str) -> Any:
        owners.append(owner)
        return parse_bounded(raw, owner)

    monkeypatch.setattr(pipeline_module, "parse_bounded", bounded)
    engine = MaskingEngine(allow(), visible=frozenset({"Command"}))
    pipeline = make_pipeline(tmp_path, engine, tools=[CommandTool()])
    command = "curl -H 'Authorization: Bearer sk-abc' https://h/" + "p" * 400
    outcome = await run(pipeline, "Command", {"command": command})
    assert outcome.result.text() == "ran"
    records = _audit_records(tmp_path)
    assert [r["event"] for r in records] == ["decided", "answered"]
    assert all(
        r["input"]["command"] == command.replace("sk-abc", "***masked***") for r in records
    ), records
    assert owners == ["tester", "tester"], "the command and its masked form, once"


@pytest.mark.parametrize(
    ("tool", "extra"), [("Command", {"timeout": -5}), ("Comand", {})], ids=["invalid", "unknown"]
)
async def test_a_rejected_calls_long_command_has_its_secrets_masked(
    tmp_path: Path, tool: str, extra: dict[str, Any]
) -> None:
    """Attacker round 154: a long Bash line sent with an invalid input or to a misspelt tool
    was logged whole, its token in clear (only a call that runs had its command masked with
    the parser). Nothing of a rejected call runs: its texts are masked as any text is."""
    engine = MaskingEngine(allow(), visible=frozenset({"Command"}))
    pipeline = make_pipeline(tmp_path, engine, tools=[CommandTool()])
    command = "curl -H 'Authorization: Bearer sk-abc' https://h/ # " + "p" * 400
    outcome = await run(pipeline, tool, {"command": command, **extra})
    assert outcome.result.is_error
    (record,) = _audit_records(tmp_path)
    assert record["outcome"] == "not_evaluated"
    assert record["input"]["command"] == command.replace("sk-abc", "***masked***"), record


async def test_an_unknown_tools_name_has_its_secrets_masked(tmp_path: Path) -> None:
    """Attacker round 158: a name no tool has was logged as sent, a secret in it in clear."""
    engine = MaskingEngine(allow(), visible=frozenset({"Command"}))
    pipeline = make_pipeline(tmp_path, engine, tools=[CommandTool()])
    outcome = await run(pipeline, "TOKEN=sk-abc", {"command": "x"})
    assert outcome.result.is_error
    (record,) = _audit_records(tmp_path)
    assert record["tool"] == "TOKEN=***masked***"


def _audit_records(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "audit.jsonl").read_text().splitlines()]


async def test_unknown_tool_lists_the_available_ones(tmp_path: Path) -> None:
    outcome = await run(make_pipeline(tmp_path, FakeEngine(allow())), "Nope", {})
    assert outcome.result.is_error
    assert "Unknown tool 'Nope'" in outcome.result.text()
    assert "Echo" in outcome.result.text() and "Disabled" not in outcome.result.text()
    assert "Change" not in outcome.result.text(), "a tool the policy hides was offered"
    assert outcome.decision.outcome is None


async def test_disabled_tool_is_unknown(tmp_path: Path) -> None:
    outcome = await run(make_pipeline(tmp_path, FakeEngine(allow())), "Disabled", {"text": "x"})
    assert outcome.result.is_error and "Unknown tool" in outcome.result.text()


async def test_schema_errors_name_the_field(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()))
    outcome = await run(pipeline, "Echo", {"times": -2, "colour": "red"})
    text = outcome.result.text()
    assert outcome.result.is_error
    assert "`text`: required field is missing" in text
    assert "`times`" in text and "greater than 0" in text
    assert "`colour`: unexpected field; the allowed fields are text, times" in text


async def test_semantic_validation_error(tmp_path: Path) -> None:
    outcome = await run(make_pipeline(tmp_path, FakeEngine(allow())), "Echo", {"text": "forbidden"})
    assert outcome.result.is_error and "may not be 'forbidden'" in outcome.result.text()


async def test_deny_and_ask_do_not_run(tmp_path: Path) -> None:
    EchoTool.seen_limits.clear()
    deny = Verdict(Outcome.DENY, ("no reading today",), None, None)
    outcome = await run(make_pipeline(tmp_path, FakeEngine(deny)), "Echo", {"text": "x"})
    assert outcome.result.is_error and "no reading today" in outcome.result.text()
    assert outcome.decision.outcome is Outcome.DENY
    ask = Verdict(Outcome.ASK, ("a human must look",), None, None)
    outcome = await run(make_pipeline(tmp_path, FakeEngine(ask)), "Echo", {"text": "x"})
    assert outcome.result.is_error and "approval" in outcome.result.text()
    assert EchoTool.seen_limits == []
    audit = _audit_records(tmp_path)
    assert [(r["event"], r["outcome"]) for r in audit] == [
        ("answered", "deny"),
        ("answered", "ask"),
    ]
    assert all(r["decision_id"] for r in audit), "a daemon-made verdict still gets a decision id"


async def test_tool_errors_and_crashes_become_error_results(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()))
    failed = await run(pipeline, "Echo", {"text": "fail"})
    assert failed.result.is_error and failed.result.text() == "it failed, as asked"
    crashed = await run(pipeline, "Echo", {"text": "crash"})
    assert crashed.result.is_error and "internal error" in crashed.result.text()


async def test_policy_limits_are_clamped_to_the_ceilings(tmp_path: Path) -> None:
    EchoTool.seen_limits.clear()
    pipeline = make_pipeline(tmp_path, FakeEngine(allow(timeout_ms=999_999, memory_mb=64)))
    await run(pipeline, "Echo", {"text": "x"})
    assert EchoTool.seen_limits[-1].timeout_ms == 10_000
    assert EchoTool.seen_limits[-1].memory_mb == 64


async def test_result_budget_is_the_smallest_of_tool_config_and_policy(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()))
    outcome = await run(pipeline, "Echo", {"text": "abcdefghij\n", "times": 1000})
    assert len(outcome.result.text()) <= 2_000 and outcome.report.truncated
    assert outcome.report.original_chars == 11_000
    verdict = Verdict(Outcome.ALLOW, (), SandboxLimits(), 500)
    outcome = await run(make_pipeline(tmp_path, FakeEngine(verdict)), "Echo", {"text": "y" * 900})
    assert len(outcome.result.text()) <= 500 and outcome.report.truncated


async def test_an_over_budget_result_is_kept_whole_and_previewed(tmp_path: Path) -> None:
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=30_000)
    kept.prepare()
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()), kept)
    line = "abcdefghij\n"
    outcome = await run(pipeline, "Echo", {"text": line, "times": 1000})
    text = outcome.result.text()
    assert len(text) <= 2_000 and outcome.report.truncated
    path = Path(outcome.report.kept_output)
    assert path.read_text() == line * 1000 and f"Full output saved to: {path}" in text
    assert text.startswith("<persisted-output>") and "11,000 characters" in text
    assert "Preview (first " in text and "Last " in text and line * 3 in text
    session = pipeline._sessions.get("default", "tester")
    assert session.kept_outputs == path.parent

    # The session's share (30,000 bytes) is used up after two: the third is cut as before.
    second = await run(pipeline, "Echo", {"text": line, "times": 1000})
    third = await run(pipeline, "Echo", {"text": line, "times": 2000})
    assert second.report.kept_output and not third.report.kept_output
    assert third.report.truncated and "cut here to fit" in third.result.text()


@pytest.mark.parametrize("tool", ["Echo", "Change"])
async def test_a_call_cancelled_after_its_run_still_has_its_answered_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    """Attacker round 98: a client cancelling while an over-budget result was being kept (the
    command had run to its end) left the call with its decided record alone."""
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=300_000)
    kept.prepare()
    keeping = asyncio.Event()

    async def slow_keep(*_: Any) -> None:
        keeping.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(kept, "keep", slow_keep)
    pipeline = make_pipeline(tmp_path, FakeEngine(allow(), visible=None), kept)
    task = asyncio.create_task(run(pipeline, tool, {"text": "abcdefghij\n", "times": 1000}))
    await keeping.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    audit = _audit_records(tmp_path)
    events = [r["event"] for r in audit]
    assert events == (["decided", "answered"] if tool == "Change" else ["answered"])
    end = audit[-1]
    assert end["cancelled"] is True and end["is_error"] is True and end["tool"] == tool
    assert end["cancelled_while"] == "answering"


async def test_a_call_whose_answer_failed_after_its_run_still_has_its_answered_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 99's lead: only a cancellation was caught between a call's run and its
    answered record; any other failure there left the call with its decided record alone."""
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=300_000)
    kept.prepare()

    async def broken_keep(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kept, "keep", broken_keep)
    pipeline = make_pipeline(tmp_path, FakeEngine(allow(), visible=None), kept)
    with pytest.raises(OSError):
        await run(pipeline, "Change", {"text": "abcdefghij\n", "times": 1000})
    audit = _audit_records(tmp_path)
    assert [r["event"] for r in audit] == ["decided", "answered"]
    assert audit[-1]["is_error"] is True and audit[-1]["failed_while"] == "answering"
    assert audit[-1]["error"] == "OSError"


async def test_a_rejected_call_is_held_to_the_budget_however_large_its_input(
    tmp_path: Path,
) -> None:
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()))
    unknown = await run(pipeline, "X" * 2_000_000, {})
    assert unknown.result.is_error and len(unknown.result.text()) < 2_000
    assert "(2000000 characters)" in unknown.result.text() and len(unknown.summary) <= 200
    keys = {f"k{n}_{'z' * 300}": 1 for n in range(5_000)}
    invalid = await run(pipeline, "Echo", {"text": "a", **keys})
    text = invalid.result.text()
    assert invalid.result.is_error and len(text) <= 50_000
    assert "and 4980 more problems" in text


async def test_the_rest_of_a_closed_sessions_batch_does_not_run(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()))
    request = CallRequest(tool_use=ToolUse(id="toolu_x", name="Nope", input={}))
    prepared = await pipeline.prepare_off_loop(
        request, Caller(principal="tester", transport="inproc")
    )
    prepared.session.closed = True
    answered = await pipeline.run(prepared, Caller(principal="tester", transport="inproc"))
    assert answered.result.is_error and "closed before the call could run" in answered.result.text()


async def test_list_tools_is_filtered_by_policy(tmp_path: Path) -> None:
    pipeline = make_pipeline(tmp_path, FakeEngine(allow(), visible=frozenset()))
    assert await pipeline.list_tools("", Caller()) == []
    pipeline = make_pipeline(tmp_path, FakeEngine(allow()))
    assert [d.name for d in await pipeline.list_tools("", Caller())] == ["Echo"]
    pipeline = make_pipeline(tmp_path, FakeEngine(allow(), visible=None))
    with pytest.raises(Unavailable):
        await pipeline.list_tools("", Caller())


async def test_lines_logged_while_a_call_runs_carry_its_ids(tmp_path: Path) -> None:
    # A tool crashing logs an incident from inside the call; that line names the call.
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("daemon.tools.call")
    logger.addHandler(handler)
    try:
        outcome = await run(make_pipeline(tmp_path, FakeEngine(allow())), "Echo", {"text": "crash"})
    finally:
        logger.removeHandler(handler)
    [line] = [json.loads(text) for text in stream.getvalue().splitlines()]
    assert "failed unexpectedly" in line["message"]
    assert line["session"].startswith("default-")  # the caller's own default session
    assert (line["tool_use_id"], line["decision_id"]) == (
        "toolu_1",
        outcome.decision.decision_id,
    )


async def test_a_crash_while_the_input_is_checked_is_an_audited_error_naming_the_tool(
    tmp_path: Path,
) -> None:
    outcome = await run(make_pipeline(tmp_path, FakeEngine(allow())), "Echo", {"text": "too deep"})
    assert outcome.result.is_error
    text = outcome.result.text()
    assert text.startswith("The Echo tool failed with an internal error while checking its input")
    assert "not a problem with your input" in text
    assert outcome.decision.outcome is None
    audit = _audit_records(tmp_path)
    assert [(r["event"], r["outcome"], r["tool"], r["is_error"]) for r in audit] == [
        ("answered", "not_evaluated", "Echo", True)
    ]


async def test_a_summary_that_fails_does_not_lose_the_result(tmp_path: Path) -> None:
    outcome = await run(
        make_pipeline(tmp_path, FakeEngine(allow())), "Echo", {"text": "bad summary"}
    )
    assert not outcome.result.is_error and outcome.result.text() == "bad summary"
    assert outcome.summary == "Echo done"
    assert _audit_records(tmp_path)[-1]["is_error"] is False


async def test_a_policy_refusal_without_an_opa_decision_id_still_counts(tmp_path: Path) -> None:
    # An OPA without decision logging gives no decision_id: its refusals are the policy's all
    # the same, and the policy's repeated-refusal rules read them back (refused_before).
    answer = {
        "result": {
            "outcome": "deny",
            "reasons": ["not this"],
            "sandbox": {
                "timeout_ms": 1000,
                "memory_mb": 64,
                "cpus": 1,
                "pids": 8,
                "network": "none",
            },
            "result_budget_chars": 1000,
        }
    }
    documents: list[dict[str, Any]] = []
    engine = FakeEngine(parse_verdict(answer, SandboxLimits()), documents=documents)
    pipeline = make_pipeline(tmp_path, engine)
    for _ in range(2):
        outcome = await run(pipeline, "Echo", {"text": "x"})
        assert outcome.decision.outcome is Outcome.DENY
    assert documents[-1]["refused_before"] == {"deny": 1, "ask": 0}


async def test_an_undefined_or_malformed_decision_is_not_counted_as_the_policys_refusal(
    tmp_path: Path,
) -> None:
    # The daemon refuses those itself (fail closed): nothing the policy's repeated-refusal rules
    # should read back, whatever id the answer came with.
    for answer in ({"decision_id": "opa-1"}, {"decision_id": "opa-2", "result": {"outcome": 1}}):
        documents: list[dict[str, Any]] = []
        engine = FakeEngine(parse_verdict(answer, SandboxLimits()), documents=documents)
        pipeline = make_pipeline(tmp_path / str(len(answer)), engine)
        for _ in range(2):
            outcome = await run(pipeline, "Echo", {"text": "x"})
            assert outcome.decision.outcome is Outcome.DENY
            assert outcome.decision.decision_id
        assert documents[-1]["refused_before"] == {"deny": 0, "ask": 0}


async def test_a_large_inputs_hashes_and_policy_document_are_made_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[int] = []

    def spying(tool_input: dict[str, Any], *, large: bool | None = None) -> str:
        threads.append(threading.get_ident())
        return canonical_input_hash(tool_input, large=large)

    for module in (pipeline_module, call_module):
        monkeypatch.setattr(module, "canonical_input_hash", spying)
    documents: list[dict[str, Any]] = []
    deny = Verdict(Outcome.DENY, ("not this",), None, None, by_policy=True)
    pipeline = make_pipeline(tmp_path, FakeEngine(deny, documents=documents))
    caller = Caller(principal="tester", transport="inproc")
    for tool_use_id, text in (("toolu_small", "x"), ("toolu_large", "x" * LARGE_VALUE_CHARS)):
        request = CallRequest(tool_use=ToolUse(id=tool_use_id, name="Echo", input={"text": text}))
        prepared = await pipeline.prepare_off_loop(request, caller)
        outcome = await pipeline.run(prepared, caller)
        assert outcome.decision.outcome is Outcome.DENY
    loop_thread = threading.get_ident()
    # The small call: its input and its refusal hashed on the loop (cheaper than a thread).
    # The large one: both again, and its refusal count looked up, none of it on the loop.
    assert threads[:2] == [loop_thread, loop_thread]
    assert len(threads) == 4 and loop_thread not in threads[2:]
    assert not isinstance(documents[0], LargeDocument)
    assert isinstance(documents[1], LargeDocument)
    assert documents[1]["refused_before"] == {"deny": 0, "ask": 0}
