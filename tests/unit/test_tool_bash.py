"""Bash: output and exit codes, timeouts (clamped, policy ceiling), cwd carry-over, report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from daemon.tools.bash import BashInput, BashTool
from daemon.tools.contract import CallContext, ToolOutput
from sandbox.backend import BashRequest, SandboxLimits, SandboxResult
from tests.unit.fake_sandbox import (
    FakeSandbox,
    listen,
    make_context,
    run_summarized,
    run_tool,
    text_of,
)

#: A policy that allows the maximum, so only the tool's own rules shape the timeout.
GENEROUS = SandboxLimits(timeout_ms=600_000)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> CallContext:
    return make_context(workspace, limits=GENEROUS)


def fake(ctx: CallContext) -> FakeSandbox:
    assert isinstance(ctx.sandbox, FakeSandbox)
    return ctx.sandbox


def last_request(ctx: CallContext) -> BashRequest:
    request = fake(ctx).requests[-1]
    assert isinstance(request, BashRequest)
    return request


async def bash(ctx: CallContext, command: str, **more: Any) -> ToolOutput:
    return await run_tool(BashTool(), {"command": command, **more}, ctx)


async def test_output_of_a_successful_command(ctx: CallContext, workspace: Path) -> None:
    output = await bash(ctx, "echo hello; echo oops >&2")
    assert not output.is_error
    assert text_of(output) == "hello\noops\n"
    assert output.exit_code == 0
    assert output.sandbox_id == "fake-1"
    assert last_request(ctx).cwd == str(workspace)
    assert last_request(ctx).output_limit_bytes == 1 << 20


async def test_a_command_without_output_says_so(ctx: CallContext, workspace: Path) -> None:
    output = await bash(ctx, "touch made-here")
    assert not output.is_error
    assert text_of(output) == "(no output)"
    assert (workspace / "made-here").exists()


async def test_non_zero_exit_is_an_error_starting_with_the_code(ctx: CallContext) -> None:
    output = await bash(ctx, "echo partial; exit 3")
    assert output.is_error
    assert text_of(output) == "Exit code 3\npartial\n"
    assert output.exit_code == 3


async def test_non_zero_exit_without_output(ctx: CallContext) -> None:
    output = await bash(ctx, "false")
    assert output.is_error
    assert text_of(output) == "Exit code 1\n(no output)"


async def test_default_timeout_is_two_minutes(ctx: CallContext) -> None:
    await bash(ctx, "true")
    assert last_request(ctx).timeout_ms == 120_000


async def test_too_large_timeout_is_clamped_not_refused(workspace: Path) -> None:
    # A policy ceiling above the tool's maximum, so only the clamp can bring it down to 600000.
    ctx = make_context(workspace, limits=SandboxLimits(timeout_ms=1_000_000))
    output = await bash(ctx, "true", timeout=900_000)
    assert not output.is_error, text_of(output)
    assert last_request(ctx).timeout_ms == 600_000


async def test_timeout_sent_as_a_string_is_accepted(ctx: CallContext) -> None:
    output = await bash(ctx, "true", timeout="5000")
    assert not output.is_error, text_of(output)
    assert last_request(ctx).timeout_ms == 5000


async def test_the_policy_limit_is_a_ceiling(workspace: Path) -> None:
    ctx = make_context(workspace, limits=SandboxLimits(timeout_ms=2_000))
    await bash(ctx, "true", timeout=10_000)
    assert last_request(ctx).timeout_ms == 2_000
    await bash(ctx, "true", timeout=1_000)
    assert last_request(ctx).timeout_ms == 1_000


@pytest.mark.parametrize("timeout", [0, -5, True, "soon"])
async def test_invalid_timeouts_are_rejected(ctx: CallContext, timeout: object) -> None:
    output = await bash(ctx, "true", timeout=timeout)
    assert output.is_error
    assert "`timeout`" in text_of(output)
    assert fake(ctx).calls == []


async def test_a_command_past_its_timeout_is_killed_and_shows_output_so_far(
    ctx: CallContext,
) -> None:
    output = await bash(ctx, "echo started; sleep 30; echo never", timeout=500)
    assert output.is_error
    assert output.timed_out
    text = text_of(output)
    assert text.startswith("Command timed out: it was killed after 500 ms.")
    assert "pass a larger timeout" in text
    assert text.endswith("Output before it was killed:\nstarted\n")
    assert "never" not in text


async def test_a_timeout_set_by_the_policy_says_so(workspace: Path) -> None:
    ctx = make_context(workspace, limits=SandboxLimits(timeout_ms=300))
    output = await bash(ctx, "sleep 30", timeout=60_000)
    assert output.is_error and output.timed_out
    text = text_of(output)
    assert text.startswith("Command timed out: it was killed after 300 ms.")
    assert "The policy allows at most 300 ms per command" in text
    assert text.endswith("Output before it was killed:\n(no output)")


async def test_out_of_memory_names_the_limit(workspace: Path) -> None:
    ctx = make_context(workspace, limits=SandboxLimits(memory_mb=256))
    fake(ctx).canned.append(
        SandboxResult(sandbox_id="c9", exit_code=137, oom_killed=True, output="allocating\n")
    )
    output = await bash(ctx, "python3 -c 'x = bytearray(10**10)'")
    assert output.is_error
    assert output.oom_killed and output.exit_code == 137 and output.sandbox_id == "c9"
    text = text_of(output)
    assert text.startswith("Command ran out of memory and was killed (limit 256 MB).")
    assert text.endswith("Output before it was killed:\nallocating\n")


async def test_truncated_output_carries_a_note_with_the_total(ctx: CallContext) -> None:
    fake(ctx).canned.append(
        SandboxResult(output="head\n...\ntail\n", output_bytes=5_000_000, output_truncated=True)
    )
    output = await bash(ctx, "yes | head -c 5000000")
    assert not output.is_error
    text = text_of(output)
    assert text.startswith("head\n...\ntail\n")
    assert "the command produced 5000000 bytes" in text


async def test_real_truncation_by_the_runner_is_reported(ctx: CallContext) -> None:
    output = await bash(ctx, "head -c 3000000 /dev/zero | tr '\\0' x")
    assert not output.is_error
    assert "[Output truncated: the command produced 3000000 bytes" in text_of(output)
    assert len(text_of(output)) < 1_100_000


async def test_a_sandbox_error_becomes_an_error_result(ctx: CallContext) -> None:
    fake(ctx).canned.append(SandboxResult(sandbox_id="c2", error="the runner crashed"))
    output = await bash(ctx, "echo hi")
    assert output.is_error
    assert text_of(output) == "the runner crashed"
    assert output.sandbox_id == "c2"


async def test_cwd_carries_over_between_calls(ctx: CallContext, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    output = await bash(ctx, "cd sub")
    assert not output.is_error
    assert ctx.session.cwd == workspace / "sub"
    output = await bash(ctx, "pwd")
    assert text_of(output) == f"{workspace / 'sub'}\n"
    assert last_request(ctx).cwd == str(workspace / "sub")


async def test_leaving_the_workspace_resets_the_cwd(
    ctx: CallContext, workspace: Path, tmp_path: Path
) -> None:
    output = await bash(ctx, f"cd {tmp_path}")
    assert not output.is_error
    assert text_of(output) == (
        f"(no output)\n\nShell cwd was reset to {workspace}: the command ended in {tmp_path}, "
        "which is outside the workspace."
    )
    assert ctx.session.cwd == workspace
    output = await bash(ctx, "pwd")
    assert text_of(output) == f"{workspace}\n"


async def test_a_vanished_cwd_runs_nothing_then_the_next_command_starts_at_the_root(
    ctx: CallContext, workspace: Path
) -> None:
    """Attacker round 112: run at the root instead, a command ran where the policy had not
    judged it (`rm -rf ../<workspace>`, allowed from a subfolder, emptied the workspace)."""
    (workspace / "gone").mkdir()
    await bash(ctx, "cd gone")
    (workspace / "gone").rmdir()
    calls = len(fake(ctx).calls)
    output = await bash(ctx, "pwd")
    assert output.is_error
    assert text_of(output).startswith(f"Shell cwd was reset to {workspace}")
    assert "Nothing ran" in text_of(output)
    assert len(fake(ctx).calls) == calls  # no container was asked to run it
    output = await bash(ctx, "pwd")
    assert not output.is_error and text_of(output) == f"{workspace}\n"


async def test_background_execution_without_background_commands_is_refused(
    ctx: CallContext,
) -> None:
    output = await bash(ctx, "sleep 100", run_in_background=True)
    assert output.is_error
    assert text_of(output).startswith("Cannot run this command in the background:")
    assert "without run_in_background" in text_of(output)
    assert fake(ctx).calls == []
    output = await bash(ctx, "echo fg", run_in_background="false", description="Say fg")
    assert not output.is_error
    assert text_of(output) == "fg\n"


async def test_blank_command_is_refused(ctx: CallContext) -> None:
    output = await bash(ctx, "   ")
    assert output.is_error
    assert text_of(output) == "command is blank: give the shell command to run."


async def test_extra_fields_are_rejected(ctx: CallContext) -> None:
    output = await bash(ctx, "echo hi", shell="zsh")
    assert output.is_error
    assert "`shell`: unexpected field" in text_of(output)
    assert fake(ctx).calls == []


async def test_without_a_sandbox_nothing_runs(workspace: Path) -> None:
    ctx = make_context(workspace)
    ctx.sandbox = None
    output = await bash(ctx, "touch should-not-exist")
    assert output.is_error
    assert text_of(output).startswith("The sandbox is not available")
    assert not (workspace / "should-not-exist").exists()


def test_touched_path_is_the_session_cwd(workspace: Path) -> None:
    ctx = make_context(workspace)
    tool = BashTool()
    args = BashInput.model_validate({"command": "ls"})
    [touched] = tool.analyse(args, ctx.session).paths
    assert touched.path == workspace and touched.access == "write" and touched.inside_workspace
    ctx.session.cwd = workspace / "sub"
    [touched] = tool.analyse(args, ctx.session).paths
    assert touched.path == workspace / "sub"


def test_schema_advertises_the_fields_without_a_hard_maximum() -> None:
    schema = BashTool().input_schema()
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["command"]
    assert set(schema["properties"]) == {"command", "timeout", "description", "run_in_background"}
    assert "maximum" not in schema["properties"]["timeout"]
    assert "600000" in schema["properties"]["timeout"]["description"]


# --- progress and summaries ---------------------------------------------------------------------


async def summarized(ctx: CallContext, command: str, **more: Any) -> tuple[ToolOutput, str]:
    return await run_summarized(BashTool(), {"command": command, **more}, ctx)


async def test_output_is_reported_live_as_it_is_produced(ctx: CallContext) -> None:
    updates = listen(ctx)
    output = await bash(ctx, "echo one; sleep 0.3; echo two")
    assert text_of(output) == "one\ntwo\n"
    assert len(updates) >= 2, "each line came as it was written, not at the end"
    assert "".join(update.output for update in updates) == "one\ntwo\n"
    assert all(update.files_scanned == 0 for update in updates)


async def test_without_a_listener_nothing_is_reported(ctx: CallContext) -> None:
    assert ctx.progress is None
    output = await bash(ctx, "echo quiet")
    assert text_of(output) == "quiet\n"


async def test_summary_names_the_command_its_exit_and_duration(ctx: CallContext) -> None:
    ok, summary = await summarized(ctx, "echo hi")
    assert not ok.is_error
    assert re.fullmatch(r"Ran `echo hi`: exit 0 after \d+\.\d s", summary), summary
    failed, summary = await summarized(ctx, "echo   boom;\n exit 3")
    assert failed.is_error
    assert re.fullmatch(r"Ran `echo boom; exit 3`: exit 3 after \d+\.\d s", summary), summary


@pytest.mark.parametrize(
    ("canned", "expected"),
    [
        (SandboxResult(exit_code=1, duration_ms=4_200), "Ran `pytest -q`: exit 1 after 4.2 s"),
        (
            SandboxResult(exit_code=0, duration_ms=75_000),
            "Ran `pytest -q`: exit 0 after 1 min 15 s",
        ),
        (
            SandboxResult(exit_code=137, oom_killed=True, duration_ms=900),
            "Ran `pytest -q`: out of memory after 0.9 s",
        ),
        (
            SandboxResult(exit_code=-1, cancelled=True, duration_ms=12_400),
            "Ran `pytest -q`: cancelled after 12 s",
        ),
        (
            SandboxResult(exit_code=137, timed_out=True, duration_ms=120_300),
            "Ran `pytest -q`: timed out after 2 min",
        ),
        (
            SandboxResult(
                exit_code=-1, error="the sandbox failed: its runner ended without answering"
            ),
            "Bash failed: the sandbox failed: its runner ended without answering",
        ),
    ],
)
async def test_summary_of_each_outcome(
    ctx: CallContext, canned: SandboxResult, expected: str
) -> None:
    fake(ctx).canned.append(canned)
    _, summary = await summarized(ctx, "pytest -q")
    assert summary == expected


async def test_summary_cuts_a_long_command_and_says_when_the_cwd_was_reset(
    ctx: CallContext, tmp_path: Path
) -> None:
    long = "echo " + "x" * 200
    _, summary = await summarized(ctx, long)
    assert summary.startswith("Ran `echo xxx") and "…`: exit 0 after" in summary
    assert len(summary) < 100
    _, summary = await summarized(ctx, f"cd {tmp_path}")
    assert summary.endswith("(working directory reset)")
    _, summary = await summarized(ctx, "true")
    assert not summary.endswith("(working directory reset)")


async def test_summary_of_a_refused_call_gives_the_reason(workspace: Path) -> None:
    ctx = make_context(workspace)
    ctx.sandbox = None
    _, summary = await summarized(ctx, "ls")
    assert summary == "Bash failed: no sandbox available"
