"""The workspace's repository kept read-only in the sandbox: which paths the daemon pins, the
mounts the container gets, and the runner refusing a request unless each pinned path is the
object recorded, mounted over itself and (the repository's own) read-only. The mounts themselves
are tested against the real engine in tests/integration."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from daemon.errors import ToolError
from daemon.host import git_pins as git_pins_module
from daemon.host.git_index import UnreadableIndex, read_index
from daemon.host.git_pins import RepositoryLook, git_pins, repository_look
from daemon.host.pinned import PinnedDirectory
from sandbox.backend import PathPin, SandboxSpec
from sandbox.executor import pool_key
from sandbox.hardening import container_recipe
from sandbox.runner import runner as runner_module


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


def pin(path: Path, *, read_only: bool = True) -> PathPin:
    info = path.lstat()
    return PathPin(path=str(path), identity=(info.st_dev, info.st_ino), read_only=read_only)


def pins_of(workspace: Path) -> tuple[PathPin, ...]:
    root = PinnedDirectory.pin(workspace)
    try:
        return git_pins(root)
    finally:
        root.close()


def held(workspace: Path) -> dict[str, bool]:
    """What `pins_of` holds, by path relative to the workspace: whether read-only."""
    return {Path(p.path).relative_to(workspace).as_posix(): p.read_only for p in pins_of(workspace)}


def test_a_git_directory_is_pinned_read_only_and_no_git_pins_nothing(workspace: Path) -> None:
    assert pins_of(workspace) == ()
    (workspace / ".git").mkdir()
    assert pins_of(workspace) == (pin(workspace / ".git"),)


def test_a_git_file_naming_anything_outside_but_this_work_trees_own_is_refused_alike(
    workspace: Path, tmp_path: Path
) -> None:
    """Attacker round 66: a `.git` file the model wrote naming a host path answered with that
    path's errno (missing, not a directory, a link): an oracle on what exists on the host. A git
    directory outside is followed only when it names this work tree back; anything else is
    refused in the same words, which say nothing of what is there."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "plain")
    (tmp_path / "file").write_text("x")
    named = ["/etc/shadow", "/etc", "/proc/1", "/nonexistent/x", *(
        f"{tmp_path}/{name}" for name in ("plain", "link", "file", "missing")
    ), "../plain"]  # fmt: skip
    messages = set()
    for path in named:
        (workspace / ".git").write_text(f"gitdir: {path}\n")
        with pytest.raises(ToolError) as refused:
            pins_of(workspace)
        messages.add(str(refused.value))
    (message,) = messages
    assert message.startswith("The workspace's .git names a git directory outside the workspace")
    assert "/etc" not in message and "/proc" not in message and str(tmp_path) not in message


def test_a_common_directory_outside_is_taken_only_around_a_git_directory_outside(
    workspace: Path, tmp_path: Path
) -> None:
    """A git directory inside the workspace could be the model's: its `commondir` naming a host
    path would be the same oracle (a linked worktree's git directory lies in its common one)."""
    (workspace / "repo").mkdir()
    (workspace / ".git").write_text("gitdir: repo\n")
    for common in ("/etc", f"{tmp_path}/missing"):
        (workspace / "repo" / "commondir").write_text(f"{common}\n")
        with pytest.raises(ToolError, match="repo/commondir names a git directory outside") as no:
            pins_of(workspace)
        assert common not in str(no.value)


def test_a_git_directory_of_the_models_outside_names_no_common_directory_above_it(
    workspace: Path, tmp_path: Path
) -> None:
    """Attacker round 67: a git directory outside that the model can write (in another of its
    sessions' workspaces) names this work tree back, and its `commondir` named a folder above
    it, whose `config` the daemon then opened: its errno and owner came back. A common
    directory outside must be the one a linked worktree's git directory lies in
    (`<common>/worktrees/<name>`), and nothing outside is told apart in refusals."""
    other = tmp_path / "other"
    (other / "g").mkdir(parents=True)
    (other / "g" / "gitdir").write_text(f"{workspace}/.git\n")
    (workspace / ".git").write_text(f"gitdir: {other}/g\n")
    (tmp_path / "config").write_text("[core]\n")
    os.chown(tmp_path / "config", 4321, 4321)
    for common in ("../..", "..", "../../..", ".."):
        (other / "g" / "commondir").write_text(f"{common}\n")
        with pytest.raises(ToolError, match="names a git directory outside") as refused:
            pins_of(workspace)
        assert str(tmp_path) not in str(refused.value)
    (other / "g" / "commondir").unlink()
    (other / "g" / "index").write_bytes(b"DIRC\0\0\0\2\0\0\0\0" + bytes(20))
    assert pins_of(workspace) == (pin(workspace / ".git"),)
    os.chown(other / "g" / "index", 4321, 4321)
    with pytest.raises(ToolError) as refused:
        pins_of(workspace)
    assert str(tmp_path) not in str(refused.value) and "owner" in str(refused.value)


def test_another_work_trees_git_directory_is_not_read(workspace: Path, tmp_path: Path) -> None:
    """Attacker round 66: a `.git` file naming another tenant's linked worktree (the same owner
    uid) had the victim's index read, its submodule paths named in refusals and held in the
    attacker's workspace."""
    victim = empty_repository(tmp_path / "victim")
    run_git(victim, "worktree", "add", "-q", str(tmp_path / "victim-wt"))
    (workspace / ".git").write_text(f"gitdir: {victim}/.git/worktrees/victim-wt\n")
    with pytest.raises(ToolError, match="does not name this work tree back"):
        pins_of(workspace)


def test_a_separate_git_directory_outside_is_followed_once_it_names_the_work_tree(
    workspace: Path, tmp_path: Path
) -> None:
    """`git init --separate-git-dir` elsewhere leaves no way back from the git directory to the
    work tree; `core.worktree` gives one (git reads it too)."""
    run_git(workspace, "init", "-q", f"--separate-git-dir={tmp_path}/sep.git")
    with pytest.raises(ToolError, match=r"core\.worktree"):
        pins_of(workspace)
    run_git(workspace, "config", "core.worktree", str(workspace))
    assert pins_of(workspace) == (pin(workspace / ".git"),)


def test_a_git_directory_named_inside_the_workspace_is_pinned_with_its_way_there(
    workspace: Path,
) -> None:
    """Attacker round 64: with `git init --separate-git-dir=.repo`, only the `.git` file was
    read-only, and a line appending core.fsmonitor to .repo/config ran on the host."""
    (workspace / "a" / "b" / "repo").mkdir(parents=True)
    (workspace / "common").mkdir()
    (workspace / "a" / "b" / "repo" / "commondir").write_text("../../../common\n")
    (workspace / ".git").write_text("gitdir: a/b/repo\n")
    assert pins_of(workspace) == (
        pin(workspace / ".git"),
        pin(workspace / "a", read_only=False),
        pin(workspace / "a" / "b", read_only=False),
        pin(workspace / "a" / "b" / "repo"),
        pin(workspace / "common"),
    )
    (workspace / ".git").write_text(f"gitdir: {workspace}/a/b/repo\n")  # absolute: the same
    assert len(pins_of(workspace)) == 5


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda ws, out: (ws / ".git").symlink_to(out), "symbolic link"),
        (lambda ws, out: os.mkfifo(ws / ".git"), "neither a directory nor a file"),
        (lambda ws, out: (ws / ".git").write_text("gitdir: missing\n"), "missing"),
        (
            lambda ws, out: ((ws / "l").symlink_to(out), (ws / ".git").write_text("gitdir: l\n")),
            "l is a symbolic link",
        ),
        (
            lambda ws, out: ((ws / "f").write_text(""), (ws / ".git").write_text("gitdir: f\n")),
            "not a directory",
        ),
        (lambda ws, out: (ws / ".git").write_text("gitdir: x\n" * 500), "larger than"),
    ],
)
def test_what_cannot_be_held_read_only_is_refused_not_followed(
    workspace: Path, tmp_path: Path, make: object, why: str
) -> None:
    (tmp_path / "out").mkdir()
    make(workspace, tmp_path / "out")  # type: ignore[operator]
    with pytest.raises(ToolError, match=why) as refused:
        pins_of(workspace)
    assert "nothing ran" in str(refused.value)


def test_the_container_gets_each_pin_over_itself_and_the_pool_keeps_them_apart(
    workspace: Path,
) -> None:
    def mounts(spec: SandboxSpec) -> list[tuple[str, str, bool]]:
        recipe = container_recipe(spec, image="img", runner_source=Path("/opt/r"), instance_id="i")
        return [
            (m["Target"], m["Source"], m["ReadOnly"]) for m in recipe.host_config_kwargs["mounts"]
        ]

    git = str(workspace / ".git")
    plain = SandboxSpec(workspace=workspace, run_as=(1001, 1001))
    pinned = plain.model_copy(
        update={"git_pins": (PathPin(path=git, identity=(1, 2), read_only=True),)}
    )
    assert (git, git, True) in mounts(pinned)
    assert not any(target == git for target, _, _ in mounts(plain))
    other = plain.model_copy(
        update={"git_pins": (PathPin(path=git, identity=(1, 3), read_only=True),)}
    )
    assert len({pool_key(plain), pool_key(pinned), pool_key(other)}) == 3


def test_the_runner_refuses_unless_each_pin_is_there_mounted_and_read_only(
    workspace: Path,
) -> None:
    check = runner_module.pins_mismatch
    ws = str(workspace)
    assert check(ws, []) == ""
    assert "does not name" in check(ws, None)
    outside = {"path": "/etc", "identity": [1, 2], "read_only": True}
    assert "wrongly" in check(ws, [outside])
    missing = {"path": f"{ws}/.git", "identity": [1, 2], "read_only": True}
    assert "not mounted here" in check(ws, [missing])
    (workspace / ".git").mkdir()
    right = pin(workspace / ".git").model_dump(mode="json")
    moved = {**right, "identity": [right["identity"][0], right["identity"][1] + 1]}
    assert "is not the repository's" in check(ws, [moved])
    # The right object, seen through the workspace's own (writable) mount: refused.
    assert "not read-only here" in check(ws, [right])
    assert "not mounted over itself" in check(ws, [{**right, "read_only": False}])


def test_the_runner_checks_the_pins_before_any_request_runs(workspace: Path) -> None:
    info = workspace.stat()
    request = {
        "kind": "bash",
        "command": "touch ran",
        "cwd": str(workspace),
        "timeout_ms": 5000,
        "workspace": str(workspace),
        "workspace_id": [info.st_dev, info.st_ino],
        "pins": [{"path": f"{workspace}/.git", "identity": [0, 0], "read_only": True}],
    }
    result = runner_module.handle(request, None)
    assert result["exit_code"] == -1 and "not mounted here" in result["error"]
    assert not (workspace / "ran").exists()


def run_git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
         "-c", "protocol.file.allow=always", *args],
        capture_output=True, check=True,
    )  # fmt: skip


def empty_repository(path: Path) -> Path:
    """A repository at `path` with one empty commit."""
    path.mkdir()
    run_git(path, "init", "-q")
    run_git(path, "commit", "-q", "--allow-empty", "-m", path.name)
    return path


@pytest.fixture
def with_submodules(workspace: Path, tmp_path: Path) -> Path:
    """The workspace: a repository with a checked-out submodule `vendor/lib` (which has one of
    its own, `inner`) and one never checked out, `empty`."""
    inner = empty_repository(tmp_path / "inner")
    lib = tmp_path / "lib"
    lib.mkdir()
    run_git(lib, "init", "-q")
    run_git(lib, "submodule", "add", "-q", str(inner), "inner")
    run_git(lib, "commit", "-qm", "lib")
    run_git(workspace, "init", "-q")
    run_git(workspace, "submodule", "add", "-q", str(lib), "vendor/lib")
    run_git(workspace, "submodule", "add", "-q", str(inner), "empty")
    run_git(workspace, "commit", "-qm", "main")
    run_git(workspace, "submodule", "update", "-q", "--init", "--recursive")
    run_git(workspace, "submodule", "deinit", "-q", "empty")
    return workspace


def test_submodules_are_held_so_that_the_roots_git_status_runs_nothing_of_the_models(
    with_submodules: Path,
) -> None:
    """Attacker round 64: `git status` at the root runs git in each submodule that has a .git;
    a submodule's .git (or an empty submodule given one) pointed at a repository of the model's
    own ran its core.fsmonitor on the host."""
    ws = with_submodules
    pins = {Path(p.path).relative_to(ws).as_posix(): p.read_only for p in pins_of(ws)}
    assert pins == {
        ".git": True,
        "vendor": False,
        "vendor/lib": False,
        "vendor/lib/.git": True,  # names .git/modules/vendor/lib, held with .git
        "vendor/lib/inner": False,
        "vendor/lib/inner/.git": True,
        "empty": True,  # no .git may appear there
    }


def test_a_submodule_whose_directory_is_missing_is_refused(with_submodules: Path) -> None:
    (with_submodules / "empty").rmdir()
    with pytest.raises(ToolError, match="empty is missing"):
        pins_of(with_submodules)


def test_a_submodule_reached_through_a_link_is_refused(
    with_submodules: Path, tmp_path: Path
) -> None:
    (with_submodules / "vendor").rename(tmp_path / "vendor-real")
    (with_submodules / "vendor").symlink_to(tmp_path / "vendor-real")
    with pytest.raises(ToolError, match="symbolic link"):
        pins_of(with_submodules)


def test_an_index_that_does_not_parse_is_refused(with_submodules: Path) -> None:
    (with_submodules / ".git" / "index").write_bytes(b"DIRC\0\0\0\2\0\0\0\7")
    with pytest.raises(ToolError, match="cannot be read as an index"):
        pins_of(with_submodules)


def test_a_linked_worktrees_submodules_are_held_though_its_git_directory_is_elsewhere(
    tmp_path: Path,
) -> None:
    """Attacker round 65: with the git directory outside the workspace (a linked worktree),
    its index was never read, so no submodule was held; a script gave one a repository of its
    own whose core.fsmonitor ran on the host."""
    lib = empty_repository(tmp_path / "lib")
    main = tmp_path / "main"
    main.mkdir()
    run_git(main, "init", "-q")
    run_git(main, "submodule", "add", "-q", str(lib), "vendor/lib")
    run_git(main, "commit", "-qm", "main")
    run_git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    workspace = (tmp_path / "wt").resolve()
    run_git(workspace, "submodule", "update", "-q", "--init")
    pins = held(workspace)
    assert pins == {".git": True, "vendor": False, "vendor/lib": False, "vendor/lib/.git": True}
    # What lies outside is only read when it is the workspace owner's.
    os.chown(main / ".git" / "worktrees" / "wt" / "index", 4321, 4321)
    with pytest.raises(ToolError, match=r"cannot be read \(only the workspace owner's") as no:
        pins_of(workspace)
    assert str(tmp_path) not in str(no.value)


async def _audit_after_a_change(
    workspace: Path, change: Callable[[], object]
) -> list[dict[str, object]]:
    """The audit records of a runner's repository check: none before `change`, then those
    after it."""
    from daemon.app.sandbox import _SessionRunner
    from daemon.sessions.session import Session

    root = PinnedDirectory.pin(workspace)
    session = Session(id="s1", workspace=workspace, owner="alice", root=root)
    records: list[dict[str, object]] = []

    class Audit:
        def write(self, record: dict[str, object]) -> None:
            records.append(record)

    runner = _SessionRunner(None, None, session, "toolu_1", None, Audit())  # type: ignore[arg-type]
    before = repository_look(root)
    spec = SandboxSpec(workspace=workspace, git_pins=before.pins)
    try:
        await runner._audit_if_changed(spec, before, root)
        assert records == []
        change()
        await runner._audit_if_changed(spec, before, root)
    finally:
        root.close()
    return records


async def test_a_repository_that_changed_under_a_container_is_audited_and_one_that_did_not_is_not(
    workspace: Path,
) -> None:
    (workspace / ".git").mkdir()

    def made_again() -> None:
        (workspace / ".git").rename(workspace / "old")
        (workspace / ".git").mkdir()

    records = await _audit_after_a_change(workspace, made_again)
    assert [(r["event"], r["tool_use_id"], r["session"]) for r in records] == [
        ("repository_changed", "toolu_1", "s1")
    ]


async def test_a_repository_a_container_made_where_there_was_none_is_audited(
    workspace: Path,
) -> None:
    """Attacker round 91: in a workspace without a repository, `git init` and code writing
    .git/config in one call left a configuration git on the host runs. Nothing held it (there
    was nothing to pin); the owner is told in the audit, as for a repository that changed."""
    before = time.time()
    records = await _audit_after_a_change(workspace, (workspace / ".git").mkdir)
    assert [(r["event"], r["tool_use_id"]) for r in records] == [("repository_created", "toolu_1")]
    # When it was seen (attacker round 98: the record had no time of its own).
    assert before <= records[0]["time"] <= time.time()
    assert "A repository appeared in the workspace, which had none" in str(records[0]["note"])


def _lay_out_as_a_git_directory(directory: Path) -> None:
    (directory / "HEAD").write_text("ref: refs/heads/main\n")
    (directory / "objects").mkdir()
    (directory / "refs").mkdir()


def _lay_out_with_a_common_directory(directory: Path) -> None:
    (directory / "HEAD").write_text("ref: refs/heads/main\n")
    (directory / "commondir").write_text("x\n")
    (directory / "x" / "objects").mkdir(parents=True)
    (directory / "x" / "refs").mkdir()


@pytest.mark.parametrize("lay_out", [_lay_out_as_a_git_directory, _lay_out_with_a_common_directory])
def test_a_workspace_laid_out_as_a_git_directory_is_refused(
    workspace: Path, lay_out: Callable[[Path], None]
) -> None:
    """Attacker round 92: HEAD, objects/ and refs/ at the root make the workspace itself a bare
    repository, whose config and hooks git run there takes; no `.git` was there to pin. Round
    93: git looks for objects/ and refs/ where a `commondir` file points."""
    lay_out(workspace)
    with pytest.raises(ToolError, match="laid out as a git directory"):
        pins_of(workspace)


SANDBOX_UIDS = range(2_000_000_000, 2_000_001_000)


@pytest.mark.parametrize("lay_out", [_lay_out_as_a_git_directory, _lay_out_with_a_common_directory])
def test_a_layout_made_by_sandboxes_alone_is_theirs_and_refuses_nothing(
    workspace: Path, lay_out: Callable[[Path], None]
) -> None:
    """Attacker round 128: a tenant laid out the shared default workspace as a git directory,
    and every sandboxed call of every tenant there was refused, its own `rm HEAD` too. What only
    sandbox identities made there is the model's, as a `.git` it makes: nothing of an owner's
    to hold, and its making is audited (the check after the call)."""
    lay_out(workspace)
    for entry in workspace.rglob("*"):
        os.lchown(entry, SANDBOX_UIDS[3], SANDBOX_UIDS[3])
    root = PinnedDirectory.pin(workspace)
    try:
        assert git_pins(root, made_by_sandboxes=SANDBOX_UIDS.__contains__) == ()
        os.lchown(workspace / "HEAD", 1000, 1000)  # an owner's: held as before, so refused
        with pytest.raises(ToolError, match="laid out as a git directory"):
            git_pins(root, made_by_sandboxes=SANDBOX_UIDS.__contains__)
    finally:
        root.close()


def test_a_repository_sandboxes_alone_made_at_the_root_holds_nothing_it_names(
    workspace: Path,
) -> None:
    """Attacker round 128: a tenant's `git init` at the root of the shared default workspace,
    whose index named another tenant's folder as a submodule, had that folder held read-only
    (an empty submodule) and the repository itself too, for every tenant and for good."""
    (workspace / "alice-proj").mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run(
        ["git", "-C", str(workspace), "update-index", "--add", "--cacheinfo",
         f"160000,{'1' * 40},alice-proj"],
        check=True,
    )  # fmt: skip
    assert held(workspace) == {".git": True, "alice-proj": True}  # an owner's: held
    for entry in [workspace / ".git", *(workspace / ".git").rglob("*")]:
        os.lchown(entry, SANDBOX_UIDS[5], SANDBOX_UIDS[5])
    root = PinnedDirectory.pin(workspace)
    try:
        look = repository_look(root, SANDBOX_UIDS.__contains__)
    finally:
        root.close()
    assert look.pins == ()
    git = (workspace / ".git").stat()
    assert [model[:3] for model in look.models] == [(".git", git.st_dev, git.st_ino)]


async def test_a_bare_repository_a_container_made_at_the_root_is_audited(workspace: Path) -> None:
    records = await _audit_after_a_change(workspace, lambda: _lay_out_as_a_git_directory(workspace))
    assert [r["event"] for r in records] == ["repository_created"]


async def test_the_check_of_a_call_whose_session_closed_meanwhile_still_runs(
    workspace: Path,
) -> None:
    """Attacker round 92: a background command ran `git init` and its session was closed before
    it ended; the check looked for the session's workspace, found it released, and wrote
    nothing. It holds the workspace from the call's start now."""
    from daemon.app.sandbox import _checks, _SessionRunner
    from daemon.sessions.session import Session

    session = Session(id="s1", workspace=workspace, owner="alice")
    records: list[dict[str, object]] = []

    class Audit:
        def write(self, record: dict[str, object]) -> None:
            records.append(record)

    runner = _SessionRunner(None, None, session, "toolu_1", None, Audit())  # type: ignore[arg-type]
    before = repository_look(session.pinned_root())
    spec = SandboxSpec(workspace=workspace, git_pins=before.pins)
    held = runner._held_root(spec)
    assert held is not None
    session.closed = True
    assert session.root is not None
    session.root.close()
    (workspace / ".git").mkdir()
    runner._check_repository(spec, before, held)
    await asyncio.gather(*_checks)
    assert [r["event"] for r in records] == ["repository_created"]
    assert held.fd == -1  # released once looked at


def test_a_hooks_directory_reached_through_a_link_made_meanwhile_is_refused(
    workspace: Path,
) -> None:
    """`.git` found a directory and then swapped for a link while its hooks were listed (the
    warm-up's look raced a test that did so): a refusal, not an OSError that escaped as an
    internal error and failed the daemon's stop."""
    from daemon.host.git_pins import _linked_entries

    (workspace / "real").mkdir()
    (workspace / "real" / "hooks").mkdir()
    (workspace / ".git").symlink_to("real")
    root = PinnedDirectory.pin(workspace)
    try:
        with pytest.raises(ToolError, match="nothing ran"):
            _linked_entries(root, ".git/hooks")
    finally:
        root.close()


def test_a_submodule_path_no_mount_can_name_is_refused(workspace: Path) -> None:
    run_git(workspace, "init", "-q")
    odd = os.fsdecode(b"sub\xff")
    subprocess.run(
        ["git", "-C", str(workspace), "update-index", "--add", "--cacheinfo",
         os.fsencode(f"160000,{'1' * 40},") + os.fsencode(odd)],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.raises(ToolError, match="records a submodule at"):
        pins_of(workspace)


def test_one_index_is_parsed_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Attacker round 66: sessions rewriting large indexes had them parsed by several threads at
    once, each holding the interpreter, and every other tenant's call slowed to a crawl."""
    import threading
    import time

    from daemon.host.git_index import read_index as real

    parsing = 0
    most = 0
    parsed = 0
    count = threading.Lock()

    def read_index(data: bytes, hash_bytes: int = 20) -> object:
        nonlocal parsing, most, parsed
        with count:
            parsing += 1
            most = max(most, parsing)
        time.sleep(0.05)
        with count:
            parsing -= 1
            parsed += 1
        return real(data, hash_bytes)

    monkeypatch.setattr("daemon.host.git_pins.read_index", read_index)
    workspaces = []
    for n in range(3):
        ws = tmp_path / f"ws{n}"
        (ws / ".git").mkdir(parents=True)
        (ws / ".git" / "index").write_bytes(b"DIRC\0\0\0\2\0\0\0\0" + bytes([n]) * 20)
        workspaces.append(ws)
    threads = [threading.Thread(target=pins_of, args=(ws,)) for ws in workspaces]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (parsed, most) == (3, 1)


async def test_the_repository_is_looked_at_on_threads_of_its_own(workspace: Path) -> None:
    """Attacker round 66: repository checks took the default worker threads, which file edits
    and request decoding share; a session re-parsing large indexes starved them."""
    import threading

    from daemon.app import sandbox as module
    from daemon.sessions.session import Session
    from sandbox.backend import SandboxLimits

    (workspace / ".git").mkdir()
    root = PinnedDirectory.pin(workspace)
    session = Session(id="s1", workspace=workspace, owner="alice", root=root)
    names: list[str] = []

    def recorded(pinned: PinnedDirectory, *_: object) -> RepositoryLook:
        names.append(threading.current_thread().name)
        return repository_look(pinned)

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("daemon.app.sandbox.repository_look", recorded)
            spec = await module._spec(session, SandboxLimits())
    finally:
        root.close()
    assert spec.git_pins == (pin(workspace / ".git"),)
    assert len(names) == 1 and names[0].startswith("git-pins")


async def test_a_principal_takes_one_repository_thread_however_many_sessions_it_has(
    tmp_path: Path,
) -> None:
    """Attacker round 67: eight sessions of one principal, their indexes re-parsed on every
    call, held both repository threads, and another tenant's call over a small repository waited
    behind them for seconds. A principal's looks now run one at a time."""
    import asyncio
    import threading

    from daemon.app import sandbox as module
    from daemon.sessions.session import Session
    from sandbox.backend import SandboxLimits

    release = threading.Event()
    running: dict[str, int] = {"mallory": 0}
    most = 0

    def slow_for_mallory(pinned: PinnedDirectory, *_: object) -> RepositoryLook:
        nonlocal most
        if pinned.path.name.startswith("mallory"):
            running["mallory"] += 1
            most = max(most, running["mallory"])
            release.wait(60)
            running["mallory"] -= 1
        return repository_look(pinned)

    sessions = []
    for name in ("mallory1", "mallory2", "mallory3", "alice"):
        ws = tmp_path / name
        (ws / ".git").mkdir(parents=True)
        owner = name.rstrip("123")
        sessions.append(Session(id=name, workspace=ws, owner=owner, root=PinnedDirectory.pin(ws)))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("daemon.app.sandbox.repository_look", slow_for_mallory)
            mallory = [asyncio.create_task(module._spec(s, SandboxLimits())) for s in sessions[:3]]
            await asyncio.sleep(0.2)
            alice = await asyncio.wait_for(module._spec(sessions[3], SandboxLimits()), 30)
            assert alice.git_pins == (pin(tmp_path / "alice" / ".git"),)
            assert not any(task.done() for task in mallory)
            release.set()
            done = await asyncio.wait_for(asyncio.gather(*mallory), 30)
    finally:
        release.set()
        for session in sessions:
            assert session.root is not None
            session.root.close()
    assert [len(spec.git_pins) for spec in done] == [1, 1, 1]
    assert most == 1


def configured(workspace: Path, *settings: tuple[str, str]) -> None:
    run_git(workspace, "init", "-q")
    for key, value in settings:
        run_git(workspace, "config", key, value)


def test_what_the_configuration_names_in_the_work_tree_is_held_too(workspace: Path) -> None:
    """Attacker round 67: `core.hooksPath = .githooks` (husky's way) and `include.path =
    ../.gitconfig` keep what git runs in the work tree, outside `.git`: a Write of the model's
    there ran on the host at the owner's next commit or status."""
    (workspace / ".githooks").mkdir()
    (workspace / ".githooks" / "pre-commit").write_text("#!/bin/sh\n")
    (workspace / "conf").mkdir()
    (workspace / "conf" / "more").write_text("[diff]\n\tnoprefix\n")
    (workspace / ".gitconfig").write_text("[include]\n\tpath = conf/more\n")
    (workspace / "tools").mkdir()
    (workspace / "tools" / "clean.sh").write_text("#!/bin/sh\n")
    configured(
        workspace,
        ("core.hooksPath", ".githooks"),
        ("include.path", "../.gitconfig"),
        ("filter.x.clean", "sh tools/clean.sh %f"),
        ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*"),  # no such path: left
        ("core.hooksPath", "/elsewhere/hooks"),  # outside: in no container (the last one wins)
        ("core.hooksPath", ".githooks"),
    )
    pins = held(workspace)
    assert pins == {
        ".git": True,
        ".githooks": True,
        ".gitconfig": True,
        "conf": False,
        "conf/more": True,
        "tools": False,
        "tools/clean.sh": True,
    }


@pytest.mark.parametrize(
    ("key", "value", "missing"),
    [
        ("core.hooksPath", ".githooks", ".githooks"),
        ("include.path", "../.gitconfig", ".gitconfig"),
        ("includeIf.gitdir:/.path", "../conf/x", "conf"),
        ("core.fsmonitor", "./fsmon", "fsmon"),
        ("alias.t", "!tools/t", "tools"),
    ],
)
def test_a_path_the_configuration_runs_or_reads_that_is_missing_is_refused(
    workspace: Path, key: str, value: str, missing: str
) -> None:
    """Missing, the model could make it (git skips an include that is not there)."""
    configured(workspace, (key, value))
    with pytest.raises(ToolError, match=missing):
        pins_of(workspace)


def test_a_configuration_git_cannot_read_is_refused(workspace: Path) -> None:
    run_git(workspace, "init", "-q")
    with (workspace / ".git" / "config").open("a") as config:
        config.write('[core]\n\thooksPath = "open\n')
    with pytest.raises(ToolError, match="configuration"):
        pins_of(workspace)


def test_includes_are_read_once_each_however_often_they_are_included(workspace: Path) -> None:
    """Attacker round 68: each of nine files including the next twenty times had the daemon
    parse 20^9 files: both repository threads spun for ever, and every tenant's sandboxed calls
    waited. Each file is read once per look, and a look reads a bounded amount."""
    import threading

    run_git(workspace, "init", "-q")
    with (workspace / ".git" / "config").open("a") as config:
        config.write("[include]\n" + "\tpath = ../i0\n" * 20)
    for n in range(8):
        (workspace / f"i{n}").write_text("[include]\n" + f"\tpath = i{n + 1}\n" * 20)
    (workspace / "i8").write_text("[diff]\n\tnoprefix\n")
    found: list[object] = []
    look = threading.Thread(target=lambda: found.append(pins_of(workspace)), daemon=True)
    look.start()
    look.join(120)
    assert not look.is_alive(), "the look did not end"
    pinned = {Path(p.path).name for p in found[0]}  # type: ignore[attr-defined]
    assert pinned == {".git", *(f"i{n}" for n in range(9))}


def test_too_much_configuration_is_refused(workspace: Path) -> None:
    run_git(workspace, "init", "-q")
    with (workspace / ".git" / "config").open("a") as config:
        config.write("[include]\n" + "".join(f"\tpath = ../c{n}\n" for n in range(100)))
    for n in range(100):
        (workspace / f"c{n}").write_text("[diff]\n\tnoprefix\n")
    with pytest.raises(ToolError, match="configuration files"):
        pins_of(workspace)


@pytest.mark.parametrize(
    ("key", "value", "script"),
    [
        ("filter.strip.clean", "sh strip.sh", "strip.sh"),
        ("diff.conv.textconv", "python3 -u conv.py", "conv.py"),
        ("alias.lint", "!node lint.js --fix", "lint.js"),
        ("diff.external", "tools/d", "tools/d"),
        ("sendemail.tocmd", "./to", "to"),
    ],
)
def test_a_script_a_configured_command_runs_is_held_or_refused(
    workspace: Path, key: str, value: str, script: str
) -> None:
    """Attacker round 68: `sh strip.sh` (no slash) named a work-tree script that was neither
    held nor refused, and git ran the model's version at the owner's next diff."""
    configured(workspace, (key, value))
    with pytest.raises(ToolError, match=script.rpartition("/")[2]):
        pins_of(workspace)  # missing: the model could make it
    (workspace / script).parent.mkdir(exist_ok=True)
    (workspace / script).write_text("#!/bin/sh\n")
    assert pin(workspace / script) in pins_of(workspace)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("alias.release", '!"$(git rev-parse --show-toplevel)/scripts/release.sh"'),
        ("filter.x.smudge", "sh $PWD/x.sh"),
        ("core.pager", "`cat p`"),
    ],
)
def test_a_configured_command_whose_words_are_computed_is_refused(
    workspace: Path, key: str, value: str
) -> None:
    configured(workspace, (key, value))
    with pytest.raises(ToolError, match="computes"):
        pins_of(workspace)


def test_a_hooks_path_with_a_dollar_is_a_folder_of_the_work_tree(workspace: Path) -> None:
    """git does not expand variables in core.hooksPath: `$HOME/hooks` is a folder the model
    could make."""
    configured(workspace, ("core.hooksPath", "$HOME/hooks"))
    with pytest.raises(ToolError, match=r"\$HOME"):
        pins_of(workspace)


def test_a_back_reference_tells_nothing_of_the_folders_it_passes(
    workspace: Path, tmp_path: Path
) -> None:
    """Attacker round 68: a `gitdir` back-reference through `<probe>/..` was resolved by the
    kernel, as root: the call ran only when the probed folder existed."""
    other = tmp_path / "other"
    (other / "g").mkdir(parents=True)
    (tmp_path / "probe").mkdir()
    (workspace / ".git").write_text(f"gitdir: {other}/g\n")
    outcomes = []
    for probe in ("probe", "missing"):
        (other / "g" / "gitdir").write_text(f"{tmp_path}/{probe}/../{workspace.name}/.git\n")
        try:
            outcomes.append(repr(pins_of(workspace)))
        except ToolError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]


async def test_a_cancelled_call_keeps_its_principals_turn_until_its_look_ends(
    tmp_path: Path,
) -> None:
    """Attacker round 68: a call cancelled by its deadline gave up its principal's turn while
    its look still ran, so the principal's next call took the second repository thread."""
    import asyncio
    import threading

    from daemon.app import sandbox as module
    from daemon.sessions.session import Session
    from sandbox.backend import SandboxLimits

    release = threading.Event()
    looking = 0
    most = 0

    def slow(pinned: PinnedDirectory, *_: object) -> RepositoryLook:
        nonlocal looking, most
        looking += 1
        most = max(most, looking)
        release.wait(60)
        looking -= 1
        return repository_look(pinned)

    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    session = Session(id="s", workspace=ws, owner="mallory", root=PinnedDirectory.pin(ws))
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("daemon.app.sandbox.repository_look", slow)
            first = asyncio.create_task(module._spec(session, SandboxLimits()))
            await asyncio.sleep(0.2)
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)
            second = asyncio.create_task(module._spec(session, SandboxLimits()))
            await asyncio.sleep(0.3)
            assert most == 1 and not second.done()
            release.set()
            spec = await asyncio.wait_for(second, 30)
    finally:
        release.set()
        assert session.root is not None
        session.root.close()
    assert spec.git_pins == (pin(ws / ".git"),)
    assert most == 1


def test_a_hook_that_is_a_link_into_the_work_tree_holds_its_target(workspace: Path) -> None:
    """Attacker round 69: `.git/hooks/pre-commit -> ../../scripts/pre-commit.sh` (a common way
    to share hooks) ran a work-tree file git followed the link to, which the model rewrote."""
    run_git(workspace, "init", "-q")
    (workspace / "scripts").mkdir()
    (workspace / "scripts" / "pre-commit.sh").write_text("#!/bin/sh\n")
    (workspace / ".git" / "hooks" / "pre-commit").symlink_to("../../scripts/pre-commit.sh")
    (workspace / ".git" / "hooks" / "outside").symlink_to("/usr/bin/true")
    pins = held(workspace)
    assert pins == {".git": True, "scripts": False, "scripts/pre-commit.sh": True}
    (workspace / ".git" / "hooks" / "post-checkout").symlink_to("../../scripts/missing")
    with pytest.raises(ToolError, match="scripts/missing"):
        pins_of(workspace)


def test_a_hooks_directory_that_is_a_link_into_the_work_tree_is_held(workspace: Path) -> None:
    """Attacker round 69: `.git/hooks -> ../githooks`: the model rewrote and added hooks."""
    run_git(workspace, "init", "-q")
    shutil.rmtree(workspace / ".git" / "hooks")
    (workspace / "githooks").mkdir()
    (workspace / ".git" / "hooks").symlink_to("../githooks")
    pins = held(workspace)
    assert pins == {".git": True, "githooks": True}


def test_a_command_naming_a_path_through_a_link_in_the_repository_is_refused(
    workspace: Path,
) -> None:
    """Attacker round 69: `!.git/tools/t.sh` with `.git/tools -> ../tools` was skipped as held."""
    configured(workspace, ("alias.t", "!.git/tools/t.sh"))
    (workspace / "tools").mkdir()
    (workspace / "tools" / "t.sh").write_text("#!/bin/sh\n")
    (workspace / ".git" / "tools").symlink_to("../tools")
    with pytest.raises(ToolError, match="symbolic link"):
        pins_of(workspace)


@pytest.mark.parametrize(
    ("key", "value", "script"),
    [
        ("alias.dft", "-c diff.external=tools/difft diff", "tools/difft"),
        ("alias.ci", "-c core.hooksPath=githooks commit", "githooks"),
        ("alias.fmt", "!sh -e format.sh", "format.sh"),
        ("alias.ci2", "!make -fci.mk", "ci.mk"),
        ("alias.py", "!python3.11 -X dev tool.py", "tool.py"),
        ("alias.rb", "!env FOO=1 ruby run.rb", "run.rb"),
    ],
)
def test_what_a_command_runs_is_found_in_forms_the_splitter_missed(
    workspace: Path, key: str, value: str, script: str
) -> None:
    """Attacker round 69: git's own `-c key=value` in an alias, `sh -e x.sh` (-e is not code
    for sh), an option's attached value (`-fci.mk`) and interpreters with a version."""
    configured(workspace, (key, value))
    if script != "ci.mk":  # an attached value is held when it exists, like any argument
        with pytest.raises(ToolError, match=script):
            pins_of(workspace)
    path = workspace / script
    if script == "githooks":
        path.mkdir()
    else:
        path.parent.mkdir(exist_ok=True)
        path.write_text("#!/bin/sh\n")
    assert pin(path) in pins_of(workspace)


def test_a_workspace_inside_a_repository_holds_what_that_repository_names_in_it(
    tmp_path: Path,
) -> None:
    """Attacker round 69: a session opened on a folder of a repository (`ws2/tools`) wrote the
    script the repository's alias runs (`!tools/t.sh`): git run there finds the repository
    above, and the daemon only looked for a `.git` in the workspace itself."""
    outer = tmp_path / "outer"
    outer.mkdir()
    run_git(outer, "init", "-q")
    run_git(outer, "config", "alias.t", "!tools/t.sh")
    run_git(outer, "config", "alias.u", "!other/u.sh")  # outside the workspace: in no container
    workspace = outer / "tools"
    workspace.mkdir()
    with pytest.raises(ToolError, match=r"t\.sh"):
        pins_of(workspace)  # missing: the model could make it
    (workspace / "t.sh").write_text("#!/bin/sh\n")
    assert pins_of(workspace) == (pin(workspace / "t.sh"),)
    # A repository the model makes in the workspace is held too, with the one above.
    (workspace / ".git").mkdir()
    assert set(pins_of(workspace)) == {pin(workspace / "t.sh"), pin(workspace / ".git")}


def test_a_workspace_inside_a_repository_holds_its_submodules_and_hook_links(
    with_submodules: Path,
) -> None:
    (with_submodules / "scripts").mkdir()
    (with_submodules / "vendor" / "hook.sh").write_text("#!/bin/sh\n")
    (with_submodules / ".git" / "hooks" / "pre-push").symlink_to("../../vendor/hook.sh")
    workspace = with_submodules / "vendor"
    pins = held(workspace)
    assert pins == {
        "lib": False,
        "lib/.git": True,
        "lib/inner": False,
        "lib/inner/.git": True,
        "hook.sh": True,
    }


def test_an_enclosing_repository_whose_git_is_a_file_is_refused(tmp_path: Path) -> None:
    """A `.git` file above the workspace names a git directory anywhere: not followed."""
    outer = tmp_path / "outer"
    (outer / "ws").mkdir(parents=True)
    (outer / ".git").write_text(f"gitdir: {tmp_path}/elsewhere\n")
    with pytest.raises(ToolError, match="lies inside a repository"):
        pins_of(outer / "ws")


def test_links_from_a_hooks_folder_outside_that_lead_into_the_workspace_are_held(
    tmp_path: Path,
) -> None:
    """Attacker round 70: a monorepo's `core.hooksPath = .githooks` (outside a session opened on
    `app`) linking `pre-commit -> ../app/hooks/pre-commit.sh`: the script was never held."""
    mono = tmp_path / "mono"
    mono.mkdir()
    run_git(mono, "init", "-q")
    run_git(mono, "config", "core.hooksPath", ".githooks")
    (mono / ".githooks").mkdir()
    (mono / "app" / "hooks").mkdir(parents=True)
    (mono / "app" / "hooks" / "pre-commit.sh").write_text("#!/bin/sh\n")
    (mono / ".githooks" / "pre-commit").symlink_to("../app/hooks/pre-commit.sh")
    workspace = mono / "app"
    assert pin(workspace / "hooks" / "pre-commit.sh") in pins_of(workspace)
    # .git/hooks a link to another folder outside, whose links lead in: followed to the end.
    run_git(mono, "config", "--unset", "core.hooksPath")
    shutil.rmtree(mono / ".git" / "hooks")
    (mono / ".git" / "hooks").symlink_to("../.githooks")
    assert pin(workspace / "hooks" / "pre-commit.sh") in pins_of(workspace)


def test_a_workspace_that_is_an_empty_submodule_of_the_repository_above_is_refused(
    with_submodules: Path,
) -> None:
    """Attacker round 70: a session on the repository's empty submodule `empty` gave it a
    `.git` whose configuration the superproject's `git status` ran."""
    with pytest.raises(ToolError, match="submodule of the repository above"):
        pins_of(with_submodules / "empty")


def test_a_quoted_git_option_keeps_its_command_whole(workspace: Path) -> None:
    """Attacker round 70: `-c "diff.external=sh difft.sh" diff` was split at the space, and
    the script `difft.sh` was neither held nor refused."""
    configured(
        workspace,
        ("alias.dft", '-c "diff.external=sh difft.sh" diff'),
        ("alias.pg", "!git -c 'core.pager=python3 pager.py' log"),
    )
    with pytest.raises(ToolError, match=r"difft\.sh"):
        pins_of(workspace)
    (workspace / "difft.sh").write_text("cat\n")
    with pytest.raises(ToolError, match=r"pager\.py"):
        pins_of(workspace)
    (workspace / "pager.py").write_text("\n")
    assert {pin(workspace / "difft.sh"), pin(workspace / "pager.py")} <= set(pins_of(workspace))


def test_a_git_above_the_workspace_that_neither_root_nor_its_owner_made_is_ignored(
    tmp_path: Path,
) -> None:
    """Attacker round 70: another local user's `.git` in a folder anyone can write (/tmp)
    above a workspace stopped every call of its session (git itself refuses a repository of
    another owner)."""
    public = tmp_path / "public"
    (public / "ws").mkdir(parents=True)
    (public / ".git").write_text("gitdir: /nonexistent\n")
    os.lchown(public / ".git", 4321, 4321)
    assert pins_of(public / "ws") == ()


def outcome(workspace: Path) -> str:
    """What a caller learns from the pins of `workspace`: held, or the refusal."""
    try:
        pins_of(workspace)
    except ToolError as exc:
        return f"refused: {exc}"
    return "held"


def test_a_hooks_folder_outside_tells_nothing_of_what_lies_beyond_the_owners_reach(
    tmp_path: Path, workspace: Path
) -> None:
    """Attacker round 116: `core.hooksPath` named a folder outside through a link `M ->
    /root/<guess>/../../<its own folder>`, holding `h -> <workspace>/nothere`. The daemon
    (root) opened it by name: only when `<guess>` existed did it list `h`, and refuse the
    call for the missing `nothere`; otherwise the command ran. /root's folders, and another
    tenant's, were told apart so. Outside, a hooks folder is looked at only when it is the
    workspace owner's, reached with no link; any other is refused alike."""
    mine = tmp_path / "mine"
    (mine / "hooks").mkdir(parents=True)
    (mine / "hooks" / "h").symlink_to(workspace / "nothere")
    (tmp_path / "secret" / "exists").mkdir(parents=True)
    for guess in ("exists", "missing"):
        (tmp_path / f"M-{guess}").symlink_to(f"{tmp_path}/secret/{guess}/../../mine")
    answers = {}
    for name in ("M-exists/hooks", "M-missing/hooks", "nowhere/hooks"):
        configured(workspace, ("core.hooksPath", str(tmp_path / name)))
        answers[name] = outcome(workspace).replace(str(tmp_path / name), "P")
    assert len(set(answers.values())) == 1, answers
    assert "outside the workspace" in answers["nowhere/hooks"]
    # Another account's folder, reached with no link: refused the same way.
    os.chown(tmp_path / "secret" / "exists", 4321, 4321)
    configured(workspace, ("core.hooksPath", str(tmp_path / "secret" / "exists")))
    assert outcome(workspace) == answers["nowhere/hooks"]
    # The owner's own folder, reached with no link: its links into the workspace are held.
    configured(workspace, ("core.hooksPath", str(mine / "hooks")))
    assert "names nothere, which is missing" in outcome(workspace)
    (workspace / "nothere").write_text("#!/bin/sh\n")
    assert pin(workspace / "nothere") in pins_of(workspace)


def _theirs_look(workspace: Path) -> RepositoryLook:
    root = PinnedDirectory.pin(workspace)
    try:
        return repository_look(root, SANDBOX_UIDS.__contains__)
    finally:
        root.close()


@pytest.mark.parametrize("kind", ["gitdir file", "link", "fifo"])
def test_a_git_entry_sandboxes_alone_made_at_the_root_is_theirs_whatever_it_is(
    workspace: Path, kind: str
) -> None:
    """Attacker round 129: round 128's exemption covered a `.git` directory only; a `.git`
    file naming a missing folder (or a git directory whose index named another tenant's
    folder), a link or a FIFO made by a tenant at the root of the shared default workspace
    refused (or locked) every other tenant's calls there."""
    dot_git = workspace / ".git"
    if kind == "gitdir file":
        (workspace / "gd").mkdir()
        dot_git.write_text("gitdir: nowhere\n")
    elif kind == "link":
        dot_git.symlink_to("/root")
    else:
        os.mkfifo(dot_git)
    os.lchown(dot_git, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    look = _theirs_look(workspace)
    info = dot_git.lstat()
    assert look.pins == ()
    assert [model[:3] for model in look.models] == [(".git", info.st_dev, info.st_ino)]


def test_what_git_runs_of_a_repository_the_sandboxes_made_is_looked_at_again(
    workspace: Path,
) -> None:
    """Attacker round 129: an empty `.git` made by a tenant was recorded once; its hooks and
    configuration filled in by later calls were not, and another tenant's git ran them."""
    (workspace / ".git").mkdir()
    os.lchown(workspace / ".git", SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    empty = _theirs_look(workspace)
    assert _theirs_look(workspace) == empty
    (workspace / ".git" / "config").write_text("[core]\n\tbare = false\n")
    configured = _theirs_look(workspace)
    assert configured != empty
    (workspace / ".git" / "hooks").mkdir()
    (workspace / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    assert _theirs_look(workspace) != configured
    (workspace / ".git" / "hooks" / "post-checkout").unlink()
    (workspace / ".git" / "objects").mkdir()  # git's own bookkeeping: not what runs
    assert _theirs_look(workspace) == _theirs_look(workspace)
    (workspace / ".git" / "info").symlink_to("/root")  # never followed, never a refusal
    assert _theirs_look(workspace).pins == ()


def test_an_owners_repository_above_trusts_nothing_of_others_it_names(tmp_path: Path) -> None:
    """Attacker round 129: a local user's own `.git` in /tmp, above his workspace, named a
    hooks folder in a root-only folder there; the daemon (root) trusted all of /tmp as that
    repository's work tree, listed the folder and named its link in the refusal. Only a
    repository of root's above is looked at whoever owns its files."""
    public = tmp_path / "public"
    workspace = public / "ws"
    workspace.mkdir(parents=True)
    owner = 4321
    os.chown(workspace, owner, owner)
    (public / ".git").mkdir()
    secret = public / "root-only"
    (secret / "private").mkdir(parents=True)
    secret.chmod(0o700)
    (secret / "private" / "secret-link-name").symlink_to(workspace / "secret-target-name")
    answers = []
    for hooks in (secret / "private", public / "no-such-folder"):
        (public / ".git" / "config").write_text(f"[core]\n\thooksPath = {hooks}\n")
        for made in [public / ".git", *(public / ".git").rglob("*")]:
            os.lchown(made, owner, owner)
        answers.append(outcome(workspace).replace(str(hooks), "P"))
    assert "secret-link-name" not in answers[0], answers[0]
    assert answers[0] == answers[1]


def _model_repository(workspace: Path) -> Path:
    git = workspace / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "config").write_text("[core]\n\tbare = false\n")
    (git / "hooks" / "pre-commit").write_text("#!/bin/sh\ntrue\n")
    for entry in [git, *git.rglob("*")]:
        os.lchown(entry, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    return git


def test_a_change_hidden_behind_the_same_size_and_times_is_still_seen(workspace: Path) -> None:
    """Attacker round 130: `.git/config` and a hook rewritten at the same size, their times put
    back with utime, left the look the same and no record."""
    git = _model_repository(workspace)
    before = _theirs_look(workspace)
    for name, text in (("config", "[core]\n\tbare = fals\n\n"), ("hooks/pre-commit", "x" * 15)):
        info = (git / name).stat()
        (git / name).write_text(text)
        os.utime(git / name, ns=(info.st_atime_ns, info.st_mtime_ns))
        assert (git / name).stat().st_size == info.st_size
    assert _theirs_look(workspace) != before


@pytest.mark.parametrize(
    "untracked",
    [
        "config a link",
        "hook a link",
        "commondir",
        "include",
        "hooksPath",
        "a command",
        "modules",
        "git file",
        "a submodule",
        "an alias",
        "ext transport",
        "a hook",
    ],
)
def test_what_git_would_run_from_elsewhere_makes_every_look_differ(
    workspace: Path, untracked: str
) -> None:
    """Attacker round 130: git took configuration and hooks through what the look did not
    follow (a `.git` file's or `commondir`'s folder, links in `.git` to work-tree files,
    includes, `core.hooksPath`, submodules' configurations): later calls changed them with
    no record. What the look does not follow, it cannot vouch for: every later look differs,
    and every call's check records a change."""
    git = _model_repository(workspace)
    (workspace / "notes.cfg").write_text("[core]\n")
    if untracked == "config a link":
        (git / "config").unlink()
        (git / "config").symlink_to("../notes.cfg")
    elif untracked == "hook a link":
        (git / "hooks" / "pre-commit").unlink()
        (git / "hooks" / "pre-commit").symlink_to("../../notes.cfg")
    elif untracked == "commondir":
        (git / "commondir").write_text("../cd\n")
    elif untracked == "include":
        (git / "config").write_text("[include]\n\tpath = ../notes.cfg\n")
    elif untracked == "hooksPath":
        (git / "config").write_text("[core]\n\thooksPath = tools\n")
    elif untracked == "a command":  # round 129's F3: the script, rewritten later, is elsewhere
        (git / "config").write_text("[core]\n\tfsmonitor = ./fsm.sh\n")
    elif untracked == "modules":
        (git / "modules" / "sub").mkdir(parents=True)
    elif untracked == "a submodule":  # round 131: git status runs in it, with its own config
        shutil.rmtree(git)
        run_git(workspace, "init", "-q")
        run_git(workspace, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},sub")
    elif untracked == "an alias":  # round 131: `-c` in an alias runs a script elsewhere
        (git / "config").write_text("[alias]\n\tst = -c core.fsmonitor=./fsm.sh status\n")
    elif untracked == "ext transport":
        (git / "config").write_text('[remote "o"]\n\turl = ext::sh ./x.sh\n')
    elif untracked == "a hook":  # it may run a script of the work tree, rewritten unseen
        (git / "hooks" / "pre-commit").write_text("#!/bin/sh\nexec ./check.sh\n")
    else:
        shutil.rmtree(git)
        git.write_text("gitdir: gd\n")
    for entry in [git, *(git.rglob("*") if git.is_dir() else [])]:
        os.lchown(entry, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    first = _theirs_look(workspace)
    assert first.pins == ()
    assert _theirs_look(workspace) != first


def test_a_plain_model_repository_looks_the_same_until_it_changes(workspace: Path) -> None:
    run_git(workspace, "init", "-q")  # its hooks are samples, which run nothing
    (workspace / "a.txt").write_text("a\n")
    run_git(workspace, "add", "-A")  # an index, with no submodule in it
    git = workspace / ".git"
    for entry in [git, *git.rglob("*")]:
        os.lchown(entry, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    assert _theirs_look(workspace) == _theirs_look(workspace)


def test_a_large_configuration_of_the_models_is_read_once_per_change(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 131: a 1 MiB configuration in a tenant's repository was parsed twice per
    call of every tenant of the workspace (about a second each)."""
    git = _model_repository(workspace)
    (git / "hooks" / "pre-commit").unlink()
    (git / "config").write_text("[core]\n" + "\tbare = false\n" * 20_000)
    parsed: list[int] = []
    real = git_pins_module.config_entries

    def counted(text: str) -> Any:
        parsed.append(len(text))
        return real(text)

    monkeypatch.setattr(git_pins_module, "config_entries", counted)
    first = _theirs_look(workspace)
    assert _theirs_look(workspace) == first
    assert len(parsed) == 1
    (git / "config").write_text("[core]\n\tbare = true\n")
    assert _theirs_look(workspace) != first
    assert len(parsed) == 2


def test_a_layout_beside_a_git_of_the_models_is_looked_at_and_never_vouched_for(
    workspace: Path,
) -> None:
    """Attacker round 132: git skips a `.git` that is no repository (an empty folder) and takes
    the root itself for a bare one; an empty `.git` made by a tenant hid a layout at the root
    whose configuration ran a program in every other tenant's `git status`, with one record,
    for the empty folder."""
    (workspace / ".git").mkdir()
    os.lchown(workspace / ".git", SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    empty = _theirs_look(workspace)
    assert _theirs_look(workspace) == empty  # an empty `.git` alone: as it was
    _lay_out_as_a_git_directory(workspace)
    (workspace / "config").write_text("[core]\n\tworktree = .\n")
    for name in ("HEAD", "objects", "refs", "config"):
        os.lchown(workspace / name, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    laid_out = _theirs_look(workspace)
    assert laid_out.pins == ()
    assert laid_out != empty
    assert _theirs_look(workspace) != laid_out  # never vouched for: every call recorded
    os.lchown(workspace / "HEAD", 1000, 1000)  # an owner's layout: refused, as without `.git`
    with pytest.raises(ToolError, match="laid out as a git directory"):
        _theirs_look(workspace)


def _plain_model_repository(workspace: Path) -> Path:
    """A repository a tenant made with git: sample hooks only, one file in its index."""
    run_git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("a\n")
    run_git(workspace, "add", "-A")
    git = workspace / ".git"
    for entry in [git, *git.rglob("*")]:
        os.lchown(entry, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    return git


def test_a_rewritten_index_of_the_models_changes_the_look(workspace: Path) -> None:
    """Attacker round 134: an index crafted so that this reader and git read different entries
    (git's threaded reading, a hash length) hid a submodule, and its writing left the look the
    same, so the planting call had no record. Whatever a reader makes of it, an index written
    anew is a change of the repository."""
    git = _plain_model_repository(workspace)
    before = _theirs_look(workspace)
    (workspace / "b.txt").write_text("b\n")
    run_git(workspace, "-c", "safe.directory=*", "add", "b.txt")  # no submodule, but changed
    os.lchown(git / "index", SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    after = _theirs_look(workspace)
    assert after != before
    assert _theirs_look(workspace) == after  # and then the same again, until the next change


def _index_read_two_ways() -> bytes:
    """Attacker round 134's index: read with SHA-1 names, two plain files; read with SHA-256
    ones, as git does in a repository of that format, a file and a submodule `sub`."""
    data = bytearray(188)
    data[0:12] = struct.pack(">4sII", b"DIRC", 2, 2)
    struct.pack_into(">I", data, 36, 0o100644)  # SHA-1 entry 0: "x"
    data[52:72] = b"\x22" * 20
    struct.pack_into(">H", data, 72, 1)
    data[74:75] = b"x"
    struct.pack_into(">H", data, 84, 14)  # SHA-256 entry 0's flags, name "a" * 14
    data[86:100] = b"a" * 14
    struct.pack_into(">I", data, 100, 0o100644)  # SHA-1 entry 1's mode
    struct.pack_into(">I", data, 132, 0o160000)  # SHA-256 entry 1's mode: a submodule
    struct.pack_into(">H", data, 136, 42)  # SHA-1 entry 1's flags
    data[138:180] = b"\x33" * 10 + b"\x11" * 32
    struct.pack_into(">H", data, 180, 3)  # SHA-256 entry 1's flags, name "sub"
    data[182:185] = b"sub"
    return bytes(data) + b"\0" * 20


def test_a_model_index_read_as_sha256_by_git_is_read_so_too(workspace: Path) -> None:
    """Attacker round 134: the index of a tenant's repository was read with SHA-1 names only; in
    a SHA-256 repository git read a submodule there that this reader did not."""
    data = _index_read_two_ways()
    assert read_index(data, 20).gitlinks == ()
    with pytest.raises(UnreadableIndex):  # its entries run into where a SHA-256 checksum is
        read_index(data, 32)
    git = _plain_model_repository(workspace)
    config = "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n"
    (git / "config").write_text(config)
    (git / "index").write_bytes(data)
    listed = subprocess.run(
        ["git", "-C", str(workspace), "-c", "safe.directory=*", "ls-files", "-s"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "160000" in listed.stdout and "\tsub\n" in listed.stdout  # what git reads
    for entry in (git / "config", git / "index"):
        os.lchown(entry, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    first = _theirs_look(workspace)
    assert _theirs_look(workspace) != first  # a submodule: never vouched for


@pytest.mark.parametrize("state", ["rebase-merge", "rebase-apply", "sequencer"])
def test_a_sequence_under_way_in_a_model_repository_is_never_vouched_for(
    workspace: Path, state: str
) -> None:
    """Attacker round 135: a tenant wrote an interactive rebase's state into a repository the
    look vouched for; `git status` told another tenant to run `git rebase --continue`, which ran
    the state's `exec` line, and nothing recorded the planting."""
    git = _plain_model_repository(workspace)
    vouched = _theirs_look(workspace)
    assert _theirs_look(workspace) == vouched
    (git / state).mkdir()
    (git / state / "git-rebase-todo").write_text("exec ./x.sh\n")
    for entry in (git / state, git / state / "git-rebase-todo"):
        os.lchown(entry, SANDBOX_UIDS[7], SANDBOX_UIDS[7])
    first = _theirs_look(workspace)
    assert first != vouched
    assert _theirs_look(workspace) != first


def test_a_large_model_index_is_not_parsed_and_never_vouched_for(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 141: a tenant's 64 MB index at the root of the shared workspace, touched
    every 0.3 s, was parsed again (0.42 s, one parse at a time in the daemon) before and after
    every other tenant's call. A model's index past MODEL_INDEX_MAX_BYTES is not parsed: the
    repository is never vouched for, as one whose index cannot be read."""
    git = _plain_model_repository(workspace)
    monkeypatch.setattr(git_pins_module, "MODEL_INDEX_MAX_BYTES", 64)
    parsed: list[int] = []
    real = git_pins_module.read_index

    def counting(data: bytes, hash_bytes: int) -> object:
        parsed.append(len(data))
        return real(data, hash_bytes)

    monkeypatch.setattr(git_pins_module, "read_index", counting)
    assert (git / "index").stat().st_size > 64
    first = _theirs_look(workspace)
    assert _theirs_look(workspace) != first  # never vouched for
    assert parsed == []
