"""Who sandboxes run as over a workspace, and which open workspaces overlap (no Docker)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.errors import NotFound, RequestError
from daemon.host import btrfs_tree
from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.sessions import disk
from daemon.sessions.disk import PlainWorkspaces
from daemon.sessions.workspaces import (
    IdentityRule,
    keep_others_out,
    made_sessions_root,
    overlaps_of,
    pin_workspace,
)
from tests.hung_mount import HungMount

WATCHDOG_S = 60.0
"""Far beyond what the checks below take; only reached when they waited for a hung mount."""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own folders as others")

SANDBOX_USER = "tooljail-sandbox"


@pytest.fixture
def rule() -> IdentityRule:
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        pytest.skip(f"the account {SANDBOX_USER} is missing (make setup creates it)")
    return IdentityRule(user=SANDBOX_USER, min_uid=1000, run_as_owner=True)


@pytest.fixture
def folders(tmp_path: Path) -> Iterator[dict[str, PinnedDirectory]]:
    made: dict[str, PinnedDirectory] = {}
    for name, owner, mode in (
        ("user", (1000, 1000), 0o755),
        ("root", (0, 0), 0o755),
        ("root-open", (0, 0), 0o777),
        ("user-root-group", (1000, 0), 0o755),
        ("user-root-group-open", (1000, 0), 0o777),
    ):
        folder = tmp_path.resolve() / name
        folder.mkdir()
        folder.chmod(mode)
        os.chown(folder, *owner)
        made[name] = PinnedDirectory.pin(folder)
    yield made
    for pinned in made.values():
        pinned.close()


def test_a_regular_users_workspace_runs_as_that_user(
    rule: IdentityRule, folders: dict[str, PinnedDirectory]
) -> None:
    assert rule.for_workspace(folders["user"]) == (1000, 1000)


def test_anything_else_runs_as_the_sandbox_account_when_it_can_write(
    rule: IdentityRule, folders: dict[str, PinnedDirectory]
) -> None:
    account = pwd.getpwnam(SANDBOX_USER)
    assert rule.for_workspace(folders["root-open"]) == (account.pw_uid, account.pw_gid)
    assert rule.for_workspace(folders["user-root-group-open"])[0] == account.pw_uid
    with pytest.raises(RequestError, match=r"sandbox\.min_uid=1000"):
        rule.for_workspace(folders["root"])
    with pytest.raises(RequestError, match="its group is root's"):
        rule.for_workspace(folders["user-root-group"])


def test_never_as_the_owner_when_the_operator_says_so(folders: dict[str, PinnedDirectory]) -> None:
    strict = IdentityRule(user=SANDBOX_USER, min_uid=1000, run_as_owner=False)
    with pytest.raises(RequestError, match="cannot write it"):
        strict.for_workspace(folders["user"])


def test_an_account_below_the_floor_is_refused() -> None:
    with pytest.raises(RequestError, match=r"sandbox\.min_uid"):
        IdentityRule(user="daemon", min_uid=1000, run_as_owner=True).dedicated()
    with pytest.raises(RequestError, match="does not exist"):
        IdentityRule(user="no-such-account-x", min_uid=1000, run_as_owner=True).dedicated()


def test_overlaps_by_path_and_by_inode(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    for name in ("a/b/c", "d"):
        (root / name).mkdir(parents=True)
    open_ones = {"s1": PinnedDirectory.pin(root / "a"), "s2": PinnedDirectory.pin(root / "d")}
    try:
        relations = {
            name: [(o.session, o.relation) for o in overlaps_of(pin_workspace(str(root / name)),
                                                                open_ones)]
            for name in ("a", "a/b/c", "d", "")
        }  # fmt: skip
    finally:
        for pinned in open_ones.values():
            pinned.close()
    assert relations["a"] == [("s1", "same")]
    assert relations["a/b/c"] == [("s1", "inside")]
    assert relations[""] == [("s1", "contains"), ("s2", "contains")]
    assert relations["d"] == [("s2", "same")]


def test_a_caller_naming_a_symlinked_path_is_told_the_real_one(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    (root / "real").mkdir()
    (root / "link").symlink_to(root / "real")
    with pytest.raises(RequestError, match=f"its real path is {root / 'real'}"):
        pin_workspace(str(root / "link"))


def test_a_caller_is_never_told_where_a_link_leads(tmp_path: Path) -> None:
    """Attacker round 116: a link in the shared default workspace to /proc/self/fd (or /root)
    and a session asked over a path through it: the refusal named the daemon's (root's) real
    path of it, and with it the daemon's open files, other tenants' workspaces among them. Only
    the operator's own paths (configuration) get the hint."""
    root = tmp_path.resolve()
    (root / "ws").mkdir()
    (root / "ws" / "fdl").symlink_to("/proc/self/fd")
    (root / "ws" / "rootl").symlink_to(root / "elsewhere")
    (root / "elsewhere" / "there").mkdir(parents=True)
    answers = []
    for raw in (root / "ws/fdl/3", root / "ws/rootl/there", root / "ws/rootl/missing"):
        with pytest.raises(RequestError) as refused:
            pin_workspace(str(raw), tell_real_path=False)
        answers.append(str(refused.value).replace(str(raw), "P"))
        assert "/proc" not in str(refused.value) and "elsewhere" not in str(refused.value)
    assert "no symbolic link" in answers[0]
    assert len(set(answers)) == 1, answers


async def test_a_workspace_that_cannot_be_handed_over_is_not_left_half_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from daemon.sessions import workspaces

    def refused(fd: int, mode: int) -> None:
        raise PermissionError(1, "Operation not permitted")  # e.g. a service's RestrictSUIDSGID

    monkeypatch.setattr(workspaces.os, "fchmod", refused)
    plain = PlainWorkspaces(tmp_path / "sessions")
    with pytest.raises(PermissionError):
        await plain.create("ws_1", (-1, os.getgid()), "p")
    assert list((tmp_path / "sessions").iterdir()) == []  # the next start is not blocked


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "secret").write_text("root only\n")
    return victim


def test_a_default_workspace_that_is_a_symlink_is_refused_not_followed(tmp_path: Path) -> None:
    from daemon.sessions.store import SessionStore

    victim = _victim(tmp_path)
    (tmp_path / "ws").symlink_to(victim)
    with pytest.raises(RequestError, match="symbolic link"):
        SessionStore(tmp_path / "ws")
    assert (victim.stat().st_uid, victim.stat().st_mode & 0o7777) == (0, 0o700)


def test_a_workspace_swapped_for_a_symlink_while_it_is_made_is_not_handed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whoever can write the parent may swap the new folder for a symlink between its mkdir and
    its chown: the folder is handed over through its descriptor, never by path."""
    from daemon.sessions import workspaces

    victim = _victim(tmp_path)
    made = os.mkdir

    def swapped(path: object, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        made(path, mode, dir_fd=dir_fd)  # type: ignore[arg-type]
        target = tmp_path / "ws"
        target.rename(tmp_path / "moved-away")
        target.symlink_to(victim)

    monkeypatch.setattr(workspaces.os, "mkdir", swapped)
    with pytest.raises(OSError):
        workspaces.make_workspace(tmp_path / "ws", (-1, os.getgid() + 1))
    assert (victim.stat().st_uid, victim.stat().st_gid, victim.stat().st_mode & 0o7777) == (
        0,
        0,
        0o700,
    )


def test_a_default_workspace_under_a_symlinked_folder_is_refused_with_the_real_path(
    tmp_path: Path,
) -> None:
    from daemon.sessions.store import SessionStore

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(RequestError, match=f"its real path is {real}"):
        SessionStore(tmp_path / "link" / "ws")
    assert not (real / "ws").exists()


def test_a_private_session_is_an_empty_folder_of_the_daemons_no_caller_can_name(
    tmp_path: Path, rule: IdentityRule
) -> None:
    """Attack: stdio MCP servers listed their tools in the default workspace, which every
    principal's default session writes: a file there shadowed the server's code."""
    from daemon.sessions.store import SessionStore

    store = SessionStore(tmp_path / "ws", tmp_path / "sessions", rule)
    (tmp_path / "ws" / "benign_mcp.py").write_text("planted")
    private = store.private_session(tmp_path / "state" / "mcp-listing", "mcp-listing")
    assert private.workspace == (tmp_path / "state" / "mcp-listing").resolve()
    assert list(private.workspace.iterdir()) == []
    assert private.sandbox_as is not None and private.sandbox_as[0] != 0
    with pytest.raises(NotFound):
        store.get("mcp-listing", "local")


def test_no_caller_can_write_the_private_folder_or_open_a_session_over_it(
    tmp_path: Path, rule: IdentityRule
) -> None:
    """Attack: where a workspace root covered the state directory, a tenant opened a session
    over the listing folder (the sandbox account's to write), planted the server's module there,
    and its tools became everyone's; the file stayed across restarts."""
    from daemon.sessions.store import SessionStore

    folder = tmp_path / "state" / "mcp-listing"
    folder.mkdir(parents=True)
    (folder / "benign_mcp.py").write_text("planted by a previous session")
    os.chown(folder, 1001, 1001)
    store = SessionStore(tmp_path / "ws", tmp_path / "sessions", rule)
    private = store.private_session(folder, "mcp-listing")
    # Made afresh: empty, the daemon's own, and only readable by the sandbox identity.
    assert list(private.workspace.iterdir()) == []
    info = private.workspace.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), 0o755)
    for asked in (folder, folder.parent):
        with pytest.raises(RequestError, match="the daemon's own"):
            store.prepare(pin_workspace(str(asked)), "local")


def test_a_session_knows_when_another_open_session_shares_its_workspace(
    tmp_path: Path, rule: IdentityRule
) -> None:
    """A session over the same folder (or one inside or around it) can change the files at any
    time: Bash then judges no path as known (tests/unit/test_command_effects.py)."""
    from daemon.sessions.store import SessionStore

    store = SessionStore(tmp_path / "default", tmp_path / "sessions", rule)
    for name in ("ws", "apart"):
        (tmp_path / name / "sub").mkdir(parents=True)
        os.chown(tmp_path / name, 1000, 1000)
        os.chown(tmp_path / name / "sub", 1000, 1000)
    alone = store.open(pin_workspace(str(tmp_path / "apart")), None, owner="alice")
    first = store.open(pin_workspace(str(tmp_path / "ws")), None, owner="alice")
    assert not first.disk_may_change() and not alone.disk_may_change()
    inner = store.open(pin_workspace(str(tmp_path / "ws" / "sub")), None, owner="bob")
    assert first.disk_may_change() and inner.disk_may_change()
    assert not alone.disk_may_change()
    store.close(inner)
    assert not first.disk_may_change()
    # Every principal's default session is over the one default workspace.
    assert not store.default_for("alice").disk_may_change()
    store.default_for("bob")
    assert store.default_for("alice").disk_may_change()


async def test_deleting_workspaces_over_hung_mounts_holds_only_their_owners_threads(
    tmp_path: Path, hung_mount: type[HungMount]
) -> None:
    """Removing a fresh workspace ran in the event loop's default threads (6 on 2 cores), which
    every tenant's request decoding, edits and policy uploads share: one tenant whose
    workspaces held filesystems that never answer took them all with 8 deletions."""
    plain = PlainWorkspaces(tmp_path / "sessions")
    folders = [await plain.create(f"ws_{i}", None, "p") for i in range(8)]
    mounts = []
    for folder in folders:
        (folder / "hung").mkdir()
        mounts.append(hung_mount(folder / "hung"))
    with contextlib.ExitStack() as watched:
        for mount in mounts:
            watched.enter_context(mount.watchdog(WATCHDOG_S))
        deletions = [asyncio.create_task(plain.delete(folder, "alice")) for folder in folders]
        await asyncio.sleep(0.1)  # every deletion has started (or queued for alice's threads)
        assert await asyncio.to_thread(lambda: "shared threads answer") == "shared threads answer"
        assert await FILESYSTEM_THREADS.run("bob", lambda: "bob's too") == "bob's too"
        assert not any(deletion.done() for deletion in deletions)
        assert FILESYSTEM_THREADS.held("alice") == 4
    assert not any(mount.released_by_watchdog for mount in mounts), "waited for alice's mounts"
    for mount in mounts:
        mount.release()
    gone = await asyncio.gather(*deletions)
    # The first four were stuck on a mount (its point stays); the rest waited for alice's threads
    # and found plain folders.
    assert gone == [False] * 4 + [True] * 4


def test_no_session_holds_the_sessions_root_or_the_state_directory(
    tmp_path: Path, rule: IdentityRule
) -> None:
    """Attacker round 78: where the policy's workspace roots held the sessions root, bob opened
    a session over the fresh workspace alice had closed (not deleted) and read her files. No
    session may lie in or hold the sessions root or the state directory (its approval key,
    kept outputs), whatever the policy says; the default workspace inside the state
    directory stays a workspace."""
    from daemon.sessions.store import SessionStore

    state = tmp_path / "state"
    store = SessionStore(state / "workspace", state / "sessions", rule, state_dir=state)
    left_behind = state / "sessions" / "ws_alice"
    elsewhere = tmp_path / "elsewhere" / "sessions"
    other = SessionStore(tmp_path / "default", elsewhere, rule, state_dir=state)
    for folder in (left_behind, state / "outputs", elsewhere / "ws_bob", tmp_path / "apart"):
        folder.mkdir(parents=True)
        os.chown(folder, 1000, 1000)
    os.chown(state / "workspace", 1000, 1000)
    refused = (left_behind, state / "sessions", state / "outputs", state, tmp_path)
    for asked in refused:
        with pytest.raises(RequestError, match="the daemon's own"):
            store.prepare(pin_workspace(str(asked)), "bob")
    with pytest.raises(RequestError, match="the daemon's own"):
        other.prepare(pin_workspace(str(elsewhere / "ws_bob")), "alice")
    for allowed in (tmp_path / "apart", state / "workspace"):
        root = pin_workspace(str(allowed))
        store.prepare(root, "bob")
        root.close()


def test_a_default_workspace_that_holds_the_state_directory_is_refused(
    tmp_path: Path, rule: IdentityRule
) -> None:
    """Every principal's default session would hold the approval key and kept outputs."""
    from daemon.sessions.store import SessionStore

    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    with pytest.raises(RequestError, match="holds the state directory"):
        SessionStore(workspace, tmp_path / "sessions", rule, state_dir=workspace / "state")
    SessionStore(workspace, tmp_path / "sessions", rule, state_dir=tmp_path / "state")


async def test_each_principal_gets_a_quota_group_of_its_own_that_holds_its_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 98: one principal's workspaces, kept after their sessions closed, filled
    the filesystem every principal's fresh workspaces share."""
    ran: list[tuple[str, ...]] = []

    async def run(*argv: str) -> str:
        ran.append(argv)
        return ""

    monkeypatch.setattr(disk, "_run", run)
    budgeted = disk.BudgetedWorkspaces(
        tmp_path, tmp_path / "img", 4096, 1024, 0.25, marks=tmp_path / "m"
    )
    assert budgeted.share_mb == 1024
    groups = [await budgeted._group_of(tmp_path, who) for who in ("alice", "bob", "alice")]
    assert groups == ["1/1", "1/2", "1/1"]
    assert ("btrfs", "qgroup", "limit", "1024M", "1/2", str(tmp_path)) in ran
    # Made and limited once per start of the daemon, not at every fresh session.
    assert [a for a in ran if a[3:5] == ("1/1", str(tmp_path)) or a[4:5] == ("1/1",)] == [
        ("btrfs", "qgroup", "create", "1/1", str(tmp_path)),
        ("btrfs", "qgroup", "limit", "1024M", "1/1", str(tmp_path)),
    ]
    written = tmp_path / ".principal-groups.json"
    assert json.loads(written.read_text()) == {"alice": 1, "bob": 2}
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    # Not what the daemon wrote: refused, never guessed (two principals in one group).
    written.write_text('{"alice": 1, "bob": "1"}')
    with pytest.raises(RequestError, match="not a map"):
        await budgeted._group_of(tmp_path, "carol")
    assert (
        disk.BudgetedWorkspaces(
            tmp_path, tmp_path / "img", 4096, 1024, 1.0, marks=tmp_path / "m"
        ).share_mb
        == 0
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="hands a folder to another user")
def test_the_sessions_root_lets_no_one_else_in(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Attacker round 181: a sessions root others could pass through reached every workspace a
    command made world-writable. One the daemon owns is closed (and the operator told that
    processes already inside keep their way in: round 182); another's is refused."""
    made = made_sessions_root(tmp_path / "made" / "sessions")
    keep_others_out(made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert not caplog.records
    made.chmod(0o711)
    keep_others_out(made)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert "(mode 711) and is now 0700" in caplog.text and "/proc/*/cwd" in caplog.text
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o711)
    theirs.chmod(0o711)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(RequestError, match="lets others than its owner in"):
        keep_others_out(theirs)
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o711


def test_subvolumes_that_cannot_be_looked_for_are_a_request_error(tmp_path: Path) -> None:
    """The root tree cannot be searched (not btrfs here; not root elsewhere): the deletion
    says so as any failed btrfs step does, and the close goes on."""
    (tmp_path / "ws").mkdir()
    with pytest.raises(RequestError, match="cannot look for subvolumes inside"):
        disk._nested_ids(tmp_path, tmp_path / "ws")
    with pytest.raises(RequestError, match="not a folder of"):
        disk._nested_ids(tmp_path, tmp_path / "ws" / "inner")


def test_nested_subvolumes_are_listed_deepest_first_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Children before their parents, by id from the root tree; past the bound, refused."""
    tree = {
        btrfs_tree.TOP_SUBVOLUME: [
            btrfs_tree.Child(300, btrfs_tree.SUBVOLUME_TOP_FOLDER, b"other"),
            btrfs_tree.Child(301, 999, b"ws"),  # a folder named so deeper down: not it
            btrfs_tree.Child(302, btrfs_tree.SUBVOLUME_TOP_FOLDER, b"ws"),
        ],
        302: [btrfs_tree.Child(310, 257, b"a"), btrfs_tree.Child(311, 258, b"b")],
        310: [btrfs_tree.Child(320, 256, b"deeper")],
        300: [btrfs_tree.Child(330, 256, b"anothers")],
    }

    def children(fd: int, parent: int, limit: int) -> list[btrfs_tree.Child]:
        return tree.get(parent, [])[: limit + 1]

    monkeypatch.setattr(disk, "children", children)
    assert disk._nested_below(0, Path("/r/ws")) == [320, 311, 310]
    monkeypatch.setattr(disk, "_MAX_NESTED", 2)
    with pytest.raises(RequestError, match="holds over 2 subvolumes"):
        disk._nested_below(0, Path("/r/ws"))
    with pytest.raises(RequestError, match="is not a subvolume"):
        disk._nested_below(0, Path("/r/missing"))


async def test_a_btrfs_answer_longer_than_its_cap_is_refused_not_read_in_part() -> None:
    """A list read in part hid what was listed last (nested subvolumes a deletion must remove
    first): an answer past its cap is an error, whatever reads it."""

    def printing(size: int) -> tuple[str, ...]:
        return ("sh", "-c", f"head -c {size} /dev/zero | tr '\\0' x")

    assert len(await disk._run(*printing(disk._OUTPUT_CAP))) == disk._OUTPUT_CAP
    with pytest.raises(RequestError, match=f"printed more than {disk._OUTPUT_CAP} bytes"):
        await disk._run(*printing(disk._OUTPUT_CAP + 1))


@pytest.mark.parametrize(("profile", "converted"), [("DUP", True), ("single", False)])
async def test_metadata_stored_twice_is_converted_to_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str, converted: bool
) -> None:
    """Attacker round 99: small files live in btrfs's metadata, stored twice (DUP) on one device
    and counted once by the quotas; a principal within its share filled the filesystem. Images
    are now made with metadata stored once, and one made before is converted when first used."""
    ran: list[tuple[str, ...]] = []

    async def run(*argv: str) -> str:
        ran.append(argv)
        if argv[:3] == ("btrfs", "filesystem", "df"):
            return f"Data, single: total=8.00MiB, used=0.00B\nMetadata, {profile}: total=1.00GiB\n"
        return ""

    monkeypatch.setattr(disk, "_run", run)
    await disk._metadata_once(tmp_path)
    balanced = ("btrfs", "balance", "start", "-f", "-mconvert=single", str(tmp_path))
    assert (balanced in ran) is converted


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
def test_a_mark_that_is_not_a_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """Nothing but a regular file the daemon wrote is a place's mark; a FIFO in its place does
    not hold the thread reading it."""
    mark = tmp_path / ".tooljail-folder"
    if kind == "fifo":
        os.mkfifo(mark)
    elif kind == "folder":
        mark.mkdir()
    else:
        (tmp_path / "real").write_text("0" * 32)
        mark.symlink_to(tmp_path / "real")
    with pytest.raises(RequestError, match="not what the daemon wrote"):
        disk._marked(tmp_path)
