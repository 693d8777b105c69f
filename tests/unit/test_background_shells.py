"""Background commands: Bash run_in_background, BashOutput, KillShell, moving at the timeout,
the caps, and a closed session taking its commands along (the fake sandbox runs bash on the
host, killing it when cancelled as the real executor removes the container)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
from pathlib import Path
from typing import Any

import pytest

from daemon.sessions.session import Session
from daemon.tools import background
from daemon.tools import shells as shell_tools
from daemon.tools.background import BackgroundShells
from daemon.tools.bash import BashTool
from daemon.tools.contract import BackgroundGrant, CallContext, ToolOutput
from daemon.tools.shells import BashOutputTool, KillShellTool
from sandbox.backend import BashRequest, SandboxLimits, SandboxResult
from tests.unit.fake_sandbox import FakeSandbox, listen, make_context, run_tool, text_of

GRANT = BackgroundGrant(shells=2, timeout_ms=60_000)
#: Runs until killed; short sleeps, so that a shell killed before the fake's process group
#: existed leaves nothing behind for long.
FOREVER = "while :; do sleep 0.1; done"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


@pytest.fixture
async def shells() -> Any:
    registry = BackgroundShells(max_total=8, per_principal=4, max_timeout_ms=3_600_000)
    yield registry
    await registry.close()


def context(
    workspace: Path,
    shells: BackgroundShells,
    grant: BackgroundGrant = GRANT,
    *,
    session: str = "s1",
    owner: str = "alice",
    timeout_ms: int = 600_000,
) -> CallContext:
    ctx = make_context(
        workspace,
        limits=SandboxLimits(timeout_ms=timeout_ms),
        session=Session(id=session, workspace=workspace, owner=owner),
    )
    return dataclasses.replace(ctx, shells=shells, background=grant)


async def start(ctx: CallContext, command: str) -> str:
    output = await run_tool(BashTool(), {"command": command, "run_in_background": True}, ctx)
    assert not output.is_error, text_of(output)
    found = re.search(r"with ID: (bash_[0-9a-f]{8})", text_of(output))
    assert found, text_of(output)
    return found.group(1)


async def read(ctx: CallContext, shell_id: str, **more: Any) -> ToolOutput:
    return await run_tool(BashOutputTool(), {"bash_id": shell_id, **more}, ctx)


async def read_until(ctx: CallContext, shell_id: str, status: str) -> str:
    """Everything read until the status shows up (the text of every read joined)."""
    texts = []
    for _ in range(200):
        text = text_of(await read(ctx, shell_id))
        texts.append(text)
        if f"<status>{status}</status>" in text:
            return "\n".join(texts)
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {status}: {texts[-1]}")


async def test_a_background_command_answers_at_once_and_is_read_later(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells)
    gate = workspace / "go"
    shell_id = await start(
        ctx, f"echo first; while [ ! -e {gate} ]; do sleep 0.05; done; echo last"
    )
    text = await read_until(ctx, shell_id, "running")
    assert "<exit_code>" not in text
    gate.touch()
    text = await read_until(ctx, shell_id, "completed")
    assert "first" in text and "last" in text
    assert "<exit_code>0</exit_code>" in text
    assert re.search(r"<timestamp>\d{4}-\d\d-\d\dT", text)
    request = fake(ctx).requests[0]
    assert isinstance(request, BashRequest)
    assert request.timeout_ms == GRANT.timeout_ms  # its lifetime, not the foreground timeout


async def test_each_read_returns_only_new_output(workspace: Path, shells: BackgroundShells) -> None:
    ctx = context(workspace, shells)
    shell_id = await start(ctx, "echo one; echo two; exit 3")
    text = await read_until(ctx, shell_id, "completed")
    assert text.count("one") == 1 and "<exit_code>3</exit_code>" in text
    again = text_of(await read(ctx, shell_id))
    assert "one" not in again and "<stdout>" not in again
    assert "<status>completed</status>" in again


async def test_the_filter_keeps_matching_lines_and_a_bad_one_consumes_nothing(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells)
    shell_id = await start(ctx, "printf 'ok 1\\nerror: disk\\nok 2\\nerror: net\\n'")
    shell = shells.find("s1", shell_id)
    assert await shell.wait(120)
    bad = await read(ctx, shell_id, filter="error(")
    assert bad.is_error
    assert "not a valid regular expression" in text_of(bad)
    text = text_of(await read(ctx, shell_id, filter="^error"))
    assert "error: disk\nerror: net" in text
    assert "ok 1" not in text
    assert "[2 new lines did not match the filter.]" in text
    # Filtered-out lines are gone for good, as in the reference.
    assert "ok 1" not in text_of(await read(ctx, shell_id))


async def test_kill_shell_stops_the_command(workspace: Path, shells: BackgroundShells) -> None:
    ctx = context(workspace, shells)
    marker = workspace / "still-running"
    shell_id = await start(ctx, f"echo up; sleep 0.5; touch {marker}")
    killed = await run_tool(KillShellTool(), {"shell_id": shell_id}, ctx)
    assert not killed.is_error
    assert (
        text_of(killed)
        == f"Successfully killed shell: {shell_id} (echo up; sleep 0.5; touch {marker})"
    )
    text = text_of(await read(ctx, shell_id))
    assert "<status>killed</status>" in text and "<killed_by>KillShell</killed_by>" in text
    await asyncio.sleep(1.0)
    assert not marker.exists()
    again = await run_tool(KillShellTool(), {"shell_id": shell_id}, ctx)
    assert again.is_error and "already ended (killed)" in text_of(again)


async def test_the_policy_grant_limits_the_session(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells, BackgroundGrant(shells=1, timeout_ms=60_000))
    await start(ctx, FOREVER)
    refused = await run_tool(BashTool(), {"command": FOREVER, "run_in_background": True}, ctx)
    assert refused.is_error
    assert "already runs 1 background commands, as many as the policy allows" in text_of(refused)
    none = context(workspace, shells, BackgroundGrant(), session="s2")
    refused = await run_tool(BashTool(), {"command": "true", "run_in_background": True}, none)
    assert "the policy does not allow background commands" in text_of(refused)


async def test_the_daemon_caps_apply_per_principal_and_in_all(workspace: Path) -> None:
    shells = BackgroundShells(max_total=3, per_principal=2, max_timeout_ms=60_000)
    try:
        alice = [context(workspace, shells, session=f"a{i}") for i in range(3)]
        await start(alice[0], FOREVER)
        await start(alice[1], FOREVER)
        refused = await run_tool(
            BashTool(), {"command": FOREVER, "run_in_background": True}, alice[2]
        )
        assert "this principal's sessions already run 2" in text_of(refused)
        await start(context(workspace, shells, session="b0", owner="bob"), FOREVER)
        refused = await run_tool(
            BashTool(),
            {"command": FOREVER, "run_in_background": True},
            context(workspace, shells, session="c0", owner="carol"),
        )
        assert "the daemon already runs 3 background commands" in text_of(refused)
    finally:
        await shells.close()
    assert shells.running() == 0


async def test_the_lifetime_is_the_smaller_of_the_grant_and_the_daemons_ceiling(
    workspace: Path,
) -> None:
    shells = BackgroundShells(max_total=3, per_principal=2, max_timeout_ms=300)
    try:
        ctx = context(workspace, shells)
        shell_id = await start(ctx, f"echo begun; {FOREVER}")
        text = await read_until(ctx, shell_id, "timed_out")
        assert "begun" in text
        assert "reached its lifetime of 300 ms" in text
    finally:
        await shells.close()


async def test_a_closed_session_takes_its_commands_along(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells)
    marker = workspace / "after-close"
    shell_id = await start(ctx, f"sleep 0.5; touch {marker}")
    shell = shells.find("s1", shell_id)
    assert await shells.remove_session("s1") == 1
    assert shell.done and shell.killed_by == "session closed"
    await asyncio.sleep(1.0)
    assert not marker.exists()
    missing = await read(ctx, shell_id)
    assert missing.is_error and "has no background commands" in text_of(missing)


async def test_another_session_cannot_see_or_kill_a_command(
    workspace: Path, shells: BackgroundShells
) -> None:
    mine = context(workspace, shells)
    theirs = context(workspace, shells, session="s2", owner="mallory")
    shell_id = await start(mine, FOREVER)
    for output in (
        await read(theirs, shell_id),
        await run_tool(KillShellTool(), {"shell_id": shell_id}, theirs),
    ):
        assert output.is_error
        assert f"No background command with ID {shell_id!r} in this session" in text_of(output)
    assert not shells.find("s1", shell_id).done


async def test_unknown_ids_name_the_sessions_commands(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells)
    shell_id = await start(ctx, FOREVER)
    output = await read(ctx, "bash_nope")
    assert f"This session's background commands: {shell_id} (running)." in text_of(output)


async def test_unread_output_is_bounded_oldest_first(
    workspace: Path, shells: BackgroundShells, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(background, "UNREAD_CAP_CHARS", 1000)
    ctx = context(workspace, shells)
    shell_id = await start(ctx, "for i in $(seq 1 500); do echo line-$i; done")
    await shells.find("s1", shell_id).wait(10)
    text = text_of(await read(ctx, shell_id))
    dropped = re.search(r"\[(\d+) characters of earlier output were dropped unread", text)
    assert dropped and int(dropped.group(1)) > 3000
    assert "line-500" in text and "line-1\n" not in text
    body = text.split("<stdout>\n", 1)[1].split("\n</stdout>", 1)[0]
    assert len(body.split("\n", 1)[1]) <= 1000  # after the note: at most the cap


async def test_a_foreground_command_moves_to_the_background_at_its_timeout(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells, dataclasses.replace(GRANT, on_timeout=True))
    seen = listen(ctx)
    gate = workspace / "go"
    command = f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo finished"
    output = await run_tool(BashTool(), {"command": command, "timeout": 300}, ctx)
    assert not output.is_error
    text = text_of(output)
    assert text.startswith(
        "Command was still running after 300 ms, so it was moved to the background"
    )
    assert "Output so far:\nstarted" in text
    assert any("started" in update.output for update in seen)
    shell_id = re.search(r"ID: (bash_[0-9a-f]{8})", text)
    assert shell_id
    gate.touch()
    later = await read_until(ctx, shell_id.group(1), "completed")
    assert "finished" in later and "started" not in later


async def test_the_timeout_before_moving_counts_from_the_commands_start_not_its_containers(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells, dataclasses.replace(GRANT, on_timeout=True))
    fake(ctx).start_delay_s = 0.6  # a cold container start, longer than the timeout
    output = await run_tool(
        BashTool(), {"command": "echo started; sleep 0.05; echo finished", "timeout": 400}, ctx
    )
    assert not output.is_error, text_of(output)
    assert text_of(output) == "started\nfinished\n"
    assert shells.running() == 0


async def test_a_quick_foreground_command_is_not_kept_when_moving_is_allowed(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells, dataclasses.replace(GRANT, on_timeout=True))
    # A timeout under the grant's lifetime: only such a command may move.
    output = await run_tool(BashTool(), {"command": "echo quick; exit 1", "timeout": 5000}, ctx)
    assert output.is_error and text_of(output) == "Exit code 1\nquick\n"
    assert shells.running() == 0
    missing = await read(ctx, "bash_00000000")
    assert "has no background commands" in text_of(missing)


async def test_without_room_a_command_at_its_timeout_is_killed_and_told_why(
    workspace: Path, shells: BackgroundShells
) -> None:
    ctx = context(workspace, shells, BackgroundGrant(shells=1, timeout_ms=60_000, on_timeout=True))
    await start(ctx, FOREVER)
    marker = workspace / "survived"
    output = await run_tool(
        BashTool(), {"command": f"echo hi; sleep 2; touch {marker}", "timeout": 1500}, ctx
    )
    assert output.is_error
    text = text_of(output)
    assert text.startswith("Command timed out: it was killed after 1500 ms.")
    assert "It was not moved to the background: this session already runs 1" in text
    assert "hi" in text
    await asyncio.sleep(1.5)
    assert not marker.exists()


def fake(ctx: CallContext) -> FakeSandbox:
    assert isinstance(ctx.sandbox, FakeSandbox)
    return ctx.sandbox


async def test_output_that_came_only_with_the_result_is_not_lost(
    workspace: Path, shells: BackgroundShells
) -> None:
    # A command that ends before its first progress is due sends its output in the result only.
    ctx = context(workspace, shells)
    fake(ctx).canned.append(SandboxResult(exit_code=0, output="quick\n"))
    shell_id = await start(ctx, "echo quick")
    text = await read_until(ctx, shell_id, "completed")
    assert "<stdout>\nquick\n</stdout>" in text


async def test_a_close_cancelled_halfway_still_stops_every_command(
    workspace: Path, shells: BackgroundShells
) -> None:
    """Attack: a CloseSession cut short by its deadline left commands running, uncounted."""
    ctx = context(workspace, shells)
    ids = [await start(ctx, FOREVER), await start(ctx, FOREVER)]
    await asyncio.sleep(0.3)
    closing = asyncio.create_task(shells.remove_session("s1"))
    await asyncio.sleep(0)
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
    for shell_id in ids:
        shell = shells.find("s1", shell_id) if "s1" in shells._shells else None
        if shell is not None:
            await shell.wait(120)
            assert shell.done and shell.killed_by == "session closed"
    assert shells.running(owner="alice") == 0


async def test_finished_shells_are_bounded_per_principal_and_keep_no_second_copy(
    workspace: Path, shells: BackgroundShells, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attack: finished shells kept their output twice, without a bound over sessions."""
    monkeypatch.setattr(background, "FINISHED_KEPT_PER_OWNER", 3)
    for n in range(3):
        ctx = context(workspace, shells, session=f"s{n}")
        for _ in range(2):
            shell = shells.find(f"s{n}", await start(ctx, "echo out"))
            assert await shell.wait(120)
            assert shell.result is not None and shell.result.output == ""
    kept = [s for mine in shells._shells.values() for s in mine.values() if s.done]
    assert len(kept) == 3


async def test_a_filter_runs_confined_and_in_its_principals_turn(
    workspace: Path, shells: BackgroundShells, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 143: BashOutput's filter ran ripgrep as the daemon (root often), with no
    confinement or memory limit, two at once for all principals together, so one tenant's
    filters could hold both again and again. It runs in the Landlock wrapper (reading nothing
    but its input), one at a time per principal."""
    from daemon.host.landlock import HELPER_NAME
    from daemon.tools import shells as shells_module

    started: list[tuple[str, ...]] = []
    real_run = shells_module.run_child

    async def recording(argv: list[str], **options: Any) -> Any:
        started.append(tuple(argv))
        return await real_run(argv, **options)

    taken: list[str] = []
    turns = shells_module.PrincipalTurns(shells_module.FILTERS_AT_ONCE)
    real_turn = turns.turn

    def turn(who: str) -> Any:
        taken.append(who)
        return real_turn(who)

    monkeypatch.setattr(turns, "turn", turn)
    monkeypatch.setitem(shells_module._FILTERING, asyncio.get_running_loop(), turns)
    monkeypatch.setattr(shells_module, "run_child", recording)
    ctx = context(workspace, shells)
    ctx.session.owner = "mallory"
    shell_id = await start(ctx, "printf 'ok 1\\nerror: disk\\n'")
    assert await shells.find("s1", shell_id).wait(120)
    text = text_of(await read(ctx, shell_id, filter="^error"))
    assert "error: disk" in text and "ok 1" not in text
    assert taken == ["mallory"]
    assert [argv for argv in started if HELPER_NAME in argv[0]], started
    rg = next(argv for argv in started if HELPER_NAME in argv[0])
    assert "--no-sockets" in rg and "--memory-mb" in rg and "--read-fd" not in rg


def test_the_filters_process_inherits_no_descriptor_of_the_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attacker round 164: while the daemon ran on uvloop's loop, asyncio's subprocess API
    ignored close_fds, so the filter, which reads bytes a sandbox wrote, got every inheritable
    descriptor of the daemon."""

    async def listing_its_descriptors(program: str, *, memory_mb: int) -> tuple[str, ...]:
        return ("/bin/sh", "-c", "cat >/dev/null; ls /proc/self/fd", "sh")

    monkeypatch.setattr(shell_tools, "confined_to_its_input", listing_its_descriptors)
    leaked = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leaked, True)
    try:
        listing = asyncio.run(shell_tools._filtered("a line\n", "a"))
    finally:
        os.close(leaked)
    descriptors = {int(word) for word in listing.split()}
    assert leaked not in descriptors
    assert descriptors <= {0, 1, 2, 3}, listing  # 3: ls's own look at the folder


def test_the_daemon_starts_host_programs_only_through_its_child_runner() -> None:
    """Every host program goes through daemon/host/child.py (subprocess.Popen, close_fds),
    never asyncio's subprocess API, whose closing of descriptors depends on the loop (round
    164) and which costs more daemon CPU per process."""
    root = Path(__file__).resolve().parents[2]
    users = [
        str(path.relative_to(root))
        for folder in ("daemon", "sandbox")
        for path in (root / folder).rglob("*.py")
        if "create_subprocess_" in path.read_text()
    ]
    assert users == []
