"""Write: create, overwrite after Read, refuse blind or stale overwrites; writes run sandboxed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from daemon.tools.contract import CallContext
from daemon.tools.files.write import WriteTool
from sandbox.backend import SandboxResult, WriteFileRequest
from tests.unit.fake_sandbox import (
    FakeSandbox,
    make_context,
    read_file,
    run_summarized,
    run_tool,
    text_of,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


@pytest.fixture
def ctx(workspace: Path) -> CallContext:
    return make_context(workspace)


def fake(ctx: CallContext) -> FakeSandbox:
    assert isinstance(ctx.sandbox, FakeSandbox)
    return ctx.sandbox


async def test_new_file_is_created_with_its_parents(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "src" / "pkg" / "mod.py"
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "x = 1\n"}, ctx)
    assert not output.is_error
    assert text_of(output) == f"File created successfully at: {target}"
    assert target.read_text() == "x = 1\n"
    request = fake(ctx).requests[-1]
    assert isinstance(request, WriteFileRequest)
    assert request.expected_sha256 is None
    assert output.sandbox_id == "fake-1"


async def test_overwrite_without_read_is_refused(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "notes.txt"
    target.write_text("original\n")
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "new\n"}, ctx)
    assert output.is_error
    assert text_of(output) == (
        f"{target} exists but has not been read in this session. Use the Read tool on it first, "
        "then retry the Write."
    )
    assert target.read_text() == "original\n"
    assert fake(ctx).calls == []


async def test_overwrite_after_read_replaces_the_content(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "notes.txt"
    target.write_text("original\n")
    await read_file(ctx, target)
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "new\n"}, ctx)
    assert not output.is_error
    assert text_of(output) == f"The file {target} has been updated."
    assert target.read_text() == "new\n"
    # A second write needs no new Read: the session knows what it wrote.
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "newer\n"}, ctx)
    assert not output.is_error, text_of(output)
    assert target.read_text() == "newer\n"


async def test_overwrite_after_an_external_change_is_refused(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "notes.txt"
    target.write_text("original\n")
    await read_file(ctx, target)
    target.write_text("changed by the user\n")
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "new\n"}, ctx)
    assert output.is_error
    assert text_of(output) == (
        f"{target} has been modified since it was last read (by the user, a command or another "
        "tool). Read it again, then retry the Write."
    )
    assert target.read_text() == "changed by the user\n"
    assert fake(ctx).calls == []


async def test_a_change_between_check_and_rename_is_caught_by_the_runner(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "notes.txt"
    target.write_text("original\n")
    await read_file(ctx, target)
    fake(ctx).before_write = lambda _request: target.write_text("raced\n")
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "new\n"}, ctx)
    assert output.is_error
    assert text_of(output).startswith(f"Could not write {target}: the file changed after it")
    assert target.read_text() == "raced\n"
    request = fake(ctx).requests[-1]
    assert isinstance(request, WriteFileRequest)
    assert request.expected_sha256 is not None


async def test_sandbox_error_becomes_an_error_result(ctx: CallContext, workspace: Path) -> None:
    fake(ctx).canned.append(SandboxResult(sandbox_id="c1", error="disk quota exceeded"))
    target = workspace / "a.txt"
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "x"}, ctx)
    assert output.is_error
    assert text_of(output) == f"Could not write {target}: disk quota exceeded"
    assert output.sandbox_id == "c1"
    assert not target.exists()


async def test_a_directory_path_is_refused(ctx: CallContext, workspace: Path) -> None:
    (workspace / "src").mkdir()
    output = await run_tool(WriteTool(), {"file_path": str(workspace / "src"), "content": "x"}, ctx)
    assert output.is_error
    assert "is a directory, not a file" in text_of(output)
    assert fake(ctx).calls == []


async def test_a_file_cannot_be_created_below_a_file(ctx: CallContext, workspace: Path) -> None:
    (workspace / "plain").write_text("x")
    target = workspace / "plain" / "child.txt"
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "x"}, ctx)
    assert output.is_error
    assert text_of(output).startswith(f"Cannot create {target}: {workspace / 'plain'} is a file")


async def test_relative_paths_are_refused(ctx: CallContext) -> None:
    output = await run_tool(WriteTool(), {"file_path": "notes.txt", "content": "x"}, ctx)
    assert output.is_error
    assert "must be an absolute path" in text_of(output)


async def test_paths_outside_the_workspace_are_refused(ctx: CallContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    output = await run_tool(WriteTool(), {"file_path": str(outside), "content": "x"}, ctx)
    assert output.is_error
    assert "is outside the workspace" in text_of(output)
    assert not outside.exists()
    assert fake(ctx).calls == []


async def test_a_symlink_leading_outside_is_refused(
    ctx: CallContext, workspace: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("keep\n")
    (workspace / "link.txt").symlink_to(secret)
    output = await run_tool(
        WriteTool(), {"file_path": str(workspace / "link.txt"), "content": "x"}, ctx
    )
    assert output.is_error
    assert f"(it resolves to {secret})" in text_of(output)
    assert secret.read_text() == "keep\n"


async def test_without_a_sandbox_nothing_is_written(workspace: Path) -> None:
    ctx = make_context(workspace)
    ctx.sandbox = None
    target = workspace / "a.txt"
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "x"}, ctx)
    assert output.is_error
    assert text_of(output).startswith("The sandbox is not available")
    assert not target.exists()


async def test_extra_fields_are_rejected(ctx: CallContext, workspace: Path) -> None:
    output = await run_tool(
        WriteTool(), {"file_path": str(workspace / "a"), "content": "x", "mode": "0755"}, ctx
    )
    assert output.is_error
    assert "`mode`: unexpected field" in text_of(output)
    assert not (workspace / "a").exists()


def test_schema_is_a_strict_object_with_both_fields_required() -> None:
    schema = WriteTool().input_schema()
    assert schema["additionalProperties"] is False
    assert sorted(schema["required"]) == ["content", "file_path"]


async def write_summary(ctx: CallContext, path: Path, content: str) -> str:
    raw = {"file_path": str(path), "content": content}
    _, summary = await run_summarized(WriteTool(), raw, ctx)
    return summary


async def test_summary_counts_lines_and_names_the_relative_path(
    ctx: CallContext, workspace: Path
) -> None:
    target = workspace / "a.py"
    content = "".join(f"x{n} = {n}\n" for n in range(30))
    assert await write_summary(ctx, target, content) == "Wrote 30 lines to a.py (new file)"
    assert await write_summary(ctx, target, "one line, no newline") == "Wrote 1 line to a.py"
    assert await write_summary(ctx, workspace / "sub" / "b.txt", "") == (
        "Wrote 0 lines to sub/b.txt (new file)"
    )


async def test_summary_of_a_refused_or_failed_write(ctx: CallContext, workspace: Path) -> None:
    target = workspace / "notes.txt"
    target.write_text("original\n")
    assert await write_summary(ctx, target, "new\n") == "Write failed: file not Read first"
    await read_file(ctx, target)
    target.write_text("changed behind its back\n")
    assert await write_summary(ctx, target, "new\n") == (
        "Write failed: file changed since it was Read"
    )
    await read_file(ctx, target)
    fake(ctx).canned.append(SandboxResult(sandbox_id="c1", error="disk quota exceeded"))
    why = f"Could not write {target}: disk quota exceeded"
    # The reason is cut to 120 characters (the temporary folder's path may be long).
    shown = why if len(why) <= 120 else why[:119] + "…"
    assert await write_summary(ctx, target, "new\n") == f"Write failed: {shown}"


def _threads_hashing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads the file tools hash contents in, from now on."""
    from daemon.tools.files import change

    threads: list[int] = []
    real = change.file_sha256

    def spying(data: bytes) -> str:
        threads.append(threading.get_ident())
        return real(data)

    monkeypatch.setattr(change, "file_sha256", spying)
    return threads


async def test_a_large_file_written_is_hashed_off_the_event_loop(
    ctx: CallContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Megabytes hashed on the event loop hold up every other call (attacker round 53).
    loop_thread = threading.get_ident()
    hashed_in = _threads_hashing(monkeypatch)
    target = workspace / "big.txt"
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "x" * 300_000}, ctx)
    assert not output.is_error
    assert hashed_in and loop_thread not in hashed_in
    assert target in ctx.session.reads


async def test_a_large_file_changed_is_checked_fresh_off_the_event_loop(
    ctx: CallContext, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.tools.read import ReadTool

    target = workspace / "big.txt"
    target.write_text("x" * 300_000 + "\n")
    assert not (await run_tool(ReadTool(), {"file_path": str(target), "limit": 1}, ctx)).is_error
    loop_thread = threading.get_ident()
    hashed_in = _threads_hashing(monkeypatch)
    output = await run_tool(WriteTool(), {"file_path": str(target), "content": "short\n"}, ctx)
    assert not output.is_error, text_of(output)
    assert hashed_in and loop_thread not in hashed_in
