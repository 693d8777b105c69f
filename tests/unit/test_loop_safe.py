"""What the event loop asks of a filesystem (daemon.host.loop_safe): the same answers as the
blocking calls where the kernel's caches can give them, NeedsThread where they cannot, and never
a wait on a filesystem that hangs."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.errors import ToolError
from daemon.host.confine import open_confined, resolve_path
from daemon.host.loop_safe import NeedsThread, descriptor_identity
from daemon.host.pinned import PinnedDirectory, WorkspaceMoved
from daemon.sessions.session import Session
from tests.hung_mount import HungMount
from tests.unit.conftest import CallTool, links_unreadable_below

WATCHDOG_S = 30.0


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[PinnedDirectory, Path]]:
    """A workspace with links of every kind, and a folder outside it."""
    ws = tmp_path.resolve() / "ws"
    outside = tmp_path.resolve() / "outside"
    (ws / "src" / "pkg").mkdir(parents=True)
    outside.mkdir()
    (ws / "src" / "pkg" / "mod.py").write_text("x\n")
    (outside / "secret").write_text("s\n")
    (ws / "rel").symlink_to("src/pkg")
    (ws / "src" / "up").symlink_to("../src")
    (ws / "abs").symlink_to(ws / "src")
    (ws / "out").symlink_to(outside)
    (ws / "dangling").symlink_to("nowhere/file")
    (ws / "loop").symlink_to("loop")
    (ws / "chain").symlink_to("rel/mod.py")
    root = PinnedDirectory.pin(ws)
    yield root, outside
    root.close()


CASES = [
    "",
    "/src",
    "/src/pkg/mod.py",
    "/rel/mod.py",
    "/src/up/pkg/mod.py",
    "/abs/pkg/mod.py",
    "/out/secret",
    "/out/missing",
    "/dangling",
    "/loop",
    "/chain",
    "/missing.py",
    "/src/missing/deeper/file",
    "/rel/missing.py",
    "/src/pkg/mod.py/below",
    "/src/../rel/mod.py",
    "/./src//pkg/",
]


async def test_paths_resolve_on_the_event_loop_as_realpath_resolves_them(
    tree: tuple[PinnedDirectory, Path],
) -> None:
    root, _ = tree
    answered_on_loop = 0
    for case in CASES:
        raw = f"{root.path}{case}"
        expected = Path(os.path.realpath(raw))
        try:
            found = resolve_path(raw, "file_path", root)
            answered_on_loop += 1
        except NeedsThread:
            found = await asyncio.to_thread(resolve_path, raw, "file_path", root)
        assert found == expected, case
    # Most of them never leave the event loop (the caches are warm: realpath just looked).
    assert answered_on_loop >= 8


async def test_without_a_pinned_workspace_nothing_is_looked_up_on_the_event_loop(
    tree: tuple[PinnedDirectory, Path],
) -> None:
    root, _ = tree
    with pytest.raises(NeedsThread):
        resolve_path(f"{root.path}/src", "file_path")
    # Off the loop (no event loop in the thread), the path is resolved as it always was.
    assert await asyncio.to_thread(resolve_path, f"{root.path}/rel") == root.path / "src" / "pkg"


def test_verify_on_loop_answers_as_verify(tmp_path: Path) -> None:
    ws = tmp_path.resolve() / "ws"
    ws.mkdir()
    root = PinnedDirectory.pin(ws)
    root.verify_on_loop()
    root.verify()
    ws.rename(tmp_path / "moved")
    ws.mkdir()  # another directory at the same path
    for check in (root.verify_on_loop, root.verify):
        with pytest.raises(WorkspaceMoved):
            check()
    root.close()
    with pytest.raises(WorkspaceMoved, match="released"):
        root.verify_on_loop()


def test_a_descriptor_is_identified_by_the_kernel(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_PATH)
    try:
        mount_id, inode = descriptor_identity(fd)
        assert inode == os.stat(tmp_path).st_ino and mount_id > 0
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        descriptor_identity(fd)


def _mount(*argv: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting needs root")
    if subprocess.run(["mount", *argv], check=False, capture_output=True).returncode:
        pytest.skip(f"mount {' '.join(argv)} is not possible here")


def test_the_same_directory_bound_again_over_its_path_is_another_workspace(
    tmp_path: Path,
) -> None:
    """A bind mount shows the same inode, and may show it without what was mounted below it in
    the original: the pinned mount is part of what was pinned."""
    ws = tmp_path.resolve() / "ws"
    ws.mkdir()
    root = PinnedDirectory.pin(ws)
    _mount("--bind", str(ws), str(ws))
    try:
        for check in (root.verify_on_loop, root.verify):
            with pytest.raises(WorkspaceMoved, match="another directory"):
                check()
    finally:
        subprocess.run(["umount", "-l", str(ws)], check=False)
        root.close()


def test_opens_on_the_event_loop_stay_on_the_workspaces_own_local_mount(tmp_path: Path) -> None:
    ws = tmp_path.resolve() / "ws"
    (ws / "mnt").mkdir(parents=True)
    (ws / "here.txt").write_text("here\n")
    root = PinnedDirectory.pin(ws)
    _mount("-t", "tmpfs", "tjloop", str(ws / "mnt"))
    try:
        (ws / "mnt" / "there.txt").write_text("there\n")
        assert root.local
        os.close(open_confined(root, ws / "here.txt", on_loop=True))
        with pytest.raises(NeedsThread):
            open_confined(root, ws / "mnt" / "there.txt", on_loop=True)
        os.close(open_confined(root, ws / "mnt" / "there.txt"))  # a thread may
        remote = PinnedDirectory(root.path, root.fd, *root.identity, 0, 0, 0, root.mount_id)
        with pytest.raises(NeedsThread):  # not known to be local: nothing is read on the loop
            open_confined(remote, ws / "here.txt", on_loop=True)
    finally:
        subprocess.run(["umount", "-l", str(ws / "mnt")], check=False)
        root.close()


async def test_a_hung_mount_over_the_workspace_is_refused_without_asking_it(
    tmp_path: Path, hung_mount: type[HungMount]
) -> None:
    ws = tmp_path.resolve() / "ws"
    ws.mkdir()
    root = PinnedDirectory.pin(ws)
    session = Session(id="s", workspace=ws, owner="p", root=root)
    mount = hung_mount(ws)
    with mount.watchdog(WATCHDOG_S):
        with pytest.raises(WorkspaceMoved):
            root.verify_on_loop()
        with pytest.raises(ToolError, match="no longer the directory"):
            await session.verify_workspace()
        with pytest.raises(ToolError, match="no longer the directory"):
            session.check_workspace_on_loop()
    assert not mount.released_by_watchdog, "the check waited for the hung mount"
    root.close()


async def test_a_path_into_a_hung_mount_is_never_looked_up_on_the_event_loop(
    tmp_path: Path, hung_mount: type[HungMount]
) -> None:
    ws = tmp_path.resolve() / "ws"
    (ws / "hung").mkdir(parents=True)
    root = PinnedDirectory.pin(ws)
    mount = hung_mount(ws / "hung")
    with mount.watchdog(WATCHDOG_S):
        for path in (ws / "hung", ws / "hung" / "file", ws / "hung" / "a" / "b"):
            with pytest.raises(NeedsThread):
                resolve_path(str(path), "file_path", root)
            with pytest.raises(NeedsThread):
                open_confined(root, path, on_loop=True)
    assert not mount.released_by_watchdog, "the event loop waited for the hung mount"
    root.close()


async def test_a_directory_inside_is_told_without_waiting_on_a_hung_mount(
    tree: tuple[PinnedDirectory, Path], hung_mount: type[HungMount]
) -> None:
    root, outside = tree
    ws = root.path
    session = Session(id="s", workspace=ws, owner="p", root=root)
    assert await session.directory_inside(str(ws / "rel")) == ws / "src" / "pkg"
    assert await session.directory_inside(str(ws / "abs")) == ws / "src"
    for raw in (str(ws / "out"), str(outside), str(ws / "src/pkg/mod.py"), "relative", "/\x00"):
        assert await session.directory_inside(raw) is None, raw
    (ws / "hung").mkdir()
    mount = hung_mount(ws / "hung")
    with mount.watchdog(WATCHDOG_S):
        looking = asyncio.create_task(session.directory_inside(str(ws / "hung" / "deep")))
        # The event loop goes on while a thread waits on the mount.
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert not looking.done()
        assert await session.directory_inside(str(ws / "src")) == ws / "src"
        mount.release()
        assert await looking is None
    assert not mount.released_by_watchdog


async def test_ripgrep_enters_its_search_root_itself(
    call_tool: CallTool, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon starts ripgrep in "/" and the wrapper enters the search root: a directory
    entered before exec (Popen's cwd) holds the daemon until the exec, and a FUSE mount can
    take its time to answer the permission check of entering it."""
    from daemon.host import child
    from daemon.tools.grep.tool import GrepTool

    started: list[tuple[list[str], object]] = []
    real = child.Child.__init__

    def spying(self: child.Child, argv: Any, *args: Any, **kwargs: Any) -> None:
        started.append((list(argv), kwargs.get("cwd")))
        real(self, argv, *args, **kwargs)

    monkeypatch.setattr(child.Child, "__init__", spying)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "a.txt").write_text("needle\n")
    output = await call_tool(GrepTool(), {"pattern": "needle", "path": str(workspace / "sub")})
    assert "a.txt" in "".join(getattr(block, "text", "") for block in output.content)
    searches = [(argv, cwd) for argv, cwd in started if "--chdir-fd" in argv]
    assert searches and all(cwd == "/" for _, cwd in searches), started


async def test_bash_in_a_directory_of_a_hung_mount_holds_only_its_own_call(
    tmp_path: Path, hung_mount: type[HungMount]
) -> None:
    """Attacker round 75: Bash checked the session's working directory (`cd` into the owner's
    FUSE mount by an earlier command) with a stat on the event loop."""
    from daemon.tools.bash import BashTool
    from tests.unit.fake_sandbox import make_context, run_tool

    ws = tmp_path.resolve() / "ws"
    (ws / "hung").mkdir(parents=True)
    root = PinnedDirectory.pin(ws)
    session = Session(id="s", workspace=ws, owner="p", root=root)
    session.cwd = ws / "hung" / "deeper"
    ctx = make_context(ws, session=session)
    mount = hung_mount(ws / "hung")
    with mount.watchdog(WATCHDOG_S):
        running = asyncio.create_task(run_tool(BashTool(), {"command": "pwd"}, ctx))
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert not running.done()
        mount.release()
        output = await running
    assert not mount.released_by_watchdog, "the event loop waited for the hung mount"
    text = "".join(getattr(block, "text", "") for block in output.content)
    assert str(ws) in text and "no longer a directory inside the workspace" in text, text
    root.close()


async def test_nothing_outside_the_workspace_is_resolved(
    tree: tuple[PinnedDirectory, Path], tmp_path: Path
) -> None:
    """Attacker round 77: off the event loop, realpath (as root) followed links out of the
    workspace, and the refusal named where they led: the target of a link in a folder the
    caller may not read, and through /proc/self/fd the files the daemon holds open."""
    root, outside = tree
    ws = root.path
    hidden = tmp_path.resolve() / "hidden"
    hidden.mkdir(mode=0o700)
    (hidden / "lnk").symlink_to("/very/secret/target")
    (ws / "peek").symlink_to(hidden / "lnk")
    (ws / "fd").symlink_to(f"/proc/self/fd/{root.fd}")
    (ws / "back").symlink_to(outside / "to-ws")
    (outside / "to-ws").symlink_to(ws / "src")
    expected = {
        "/peek": hidden / "lnk",  # the link's own text, which the workspace holds
        "/fd": Path(f"/proc/self/fd/{root.fd}"),
        "/back/pkg": outside / "to-ws" / "pkg",  # it left: refused, whatever it leads to
    }
    for case, wanted in expected.items():
        found = await asyncio.to_thread(resolve_path, f"{ws}{case}", "file_path", root)
        assert found == wanted, case
        assert await session_directory(root, f"{ws}{case}") is None
    # Back up (`..`) once outside: where that leads is not known without following the link.
    with pytest.raises(ToolError, match="goes back up"):
        await asyncio.to_thread(resolve_path, f"{ws}/peek/x/../y", "file_path", root)
    assert await session_directory(root, f"{ws}/peek/x/..") is None
    # A path outside is taken as written.
    proc = f"/proc/self/fd/{root.fd}"
    assert await asyncio.to_thread(resolve_path, proc, "file_path", root) == Path(proc)
    # Inside, as realpath: the cases of test_paths_resolve_on_the_event_loop_as_realpath...
    for case in ("/rel/mod.py", "/abs/pkg/mod.py", "/src/up/pkg/mod.py", "/missing/../src"):
        raw = f"{ws}{case}"
        found = await asyncio.to_thread(resolve_path, raw, "file_path", root)
        assert found == Path(os.path.realpath(raw)), case


async def session_directory(root: PinnedDirectory, raw: str) -> Path | None:
    return await Session(id="d", workspace=root.path, root=root).directory_inside(raw)


async def test_a_name_that_may_be_an_unreadable_link_is_refused_not_taken_as_written(
    tree: tuple[PinnedDirectory, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name in the workspace whose link the daemon may not read (a folder its owner closed,
    with a non-root daemon) was taken as a plain name: where the path leads is not known, so
    the call is refused with what to do."""
    root, _ = tree
    ws = root.path
    (ws / "locked").mkdir()
    links_unreadable_below(monkeypatch, ws / "locked")
    with pytest.raises(ToolError, match="cannot be resolved: a name on its way may be"):
        await asyncio.to_thread(resolve_path, f"{ws}/locked/L/x", "file_path", root)
    assert await session_directory(root, f"{ws}/locked/L") is None
    assert await asyncio.to_thread(resolve_path, f"{ws}/src", "file_path", root) == ws / "src"
