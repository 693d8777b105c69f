"""The fresh workspaces' filesystem is shared by every principal: one principal's workspaces,
open or closed and kept, fill at most its share of it (a btrfs quota group over all of them,
kept by the kernel), so another principal's fresh session still has room. Real OPA, Docker and
btrfs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.host.mounts import mount_at
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.test_principals import TOKENS, _policies
from tests.integration.test_service import free_port

pytestmark = [pytest.mark.integration, pytest.mark.docker]

BUDGET_MB = 64
FILESYSTEM_MB = 384
#: Each principal's share: 3 workspaces' budgets of the 6 the filesystem holds.
SHARE = 0.5


SANDBOX = {"pool_size": 0, "ceilings": {"memory_mb": 256, "pids": 128}}


@contextlib.contextmanager
def _daemon_with_shares(
    root: Path, sandbox: dict[str, Any] = SANDBOX, **workspaces: Any
) -> Iterator[tuple[RunningDaemon, str]]:
    """A daemon (a sandbox one unless `sandbox` says otherwise) whose fresh workspaces have
    budgets and shares (and the other `workspaces` settings given), reached over TCP by token
    principals; its address."""
    (root / "ws").mkdir()
    os.chown(root / "ws", OWNER_UID, OWNER_GID)
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        root / "ws",
        root / "s.sock",
        sandbox=sandbox,
        tcp={"address": target},
        auth={"tokens": TOKENS},
        opa={"policies_dir": _policies(root)},
        workspaces={
            "budget_mb": BUDGET_MB,
            "filesystem_mb": FILESYSTEM_MB,
            "principal_share": SHARE,
            **workspaces,
        },
    ) as running:
        if sandbox.get("enabled", True) and (
            running.daemon.sandbox is None or running.daemon.sandbox.stats() is None
        ):
            pytest.skip("no Docker engine answers")
        yield running, target


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, str]]:
    with _daemon_with_shares(Path(tmp_path_factory.mktemp("shares"))) as running:
        yield running


def _as(
    target: str, name: str
) -> tuple[pb_grpc.ExecutorStub, grpc.Channel, tuple[tuple[str, str]]]:
    channel = grpc.insecure_channel(target)
    return pb_grpc.ExecutorStub(channel), channel, (("authorization", f"Bearer {TOKENS[name]}"),)


def _fill(stub: pb_grpc.ExecutorStub, metadata: object, session: pb.Session) -> str:
    use = pb.ToolUse(id=f"toolu_fill_{session.id[-8:]}", name="Bash")
    use.input.update({"command": "dd if=/dev/zero of=big bs=1M count=100 2>&1; sync"})
    response = stub.Execute(
        pb.ExecuteRequest(tool_use=use, session_id=session.id), metadata=metadata, timeout=120
    )
    return text_of(response)


def _allowed(
    stub: pb_grpc.ExecutorStub,
    metadata: object,
    session: pb.Session,
    tool_use_id: str,
    command: str,
) -> None:
    """Run a long Bash command in `session`; the policy must allow it."""
    use = pb.ToolUse(id=tool_use_id, name="Bash")
    use.input.update({"command": command, "timeout": 300_000})
    done = stub.Execute(
        pb.ExecuteRequest(tool_use=use, session_id=session.id), metadata=metadata, timeout=320
    )
    assert done.decision.outcome == pb.ALLOW, text_of(done)


def _room_for(stub: pb_grpc.ExecutorStub, metadata: object) -> None:
    """A fresh session of this principal still fills its whole budget."""
    his = stub.OpenSession(pb.OpenSessionRequest(), metadata=metadata, timeout=60)
    text = _fill(stub, metadata, his)
    assert "No space left" not in text, text
    assert _used_mb(his.workspace) >= BUDGET_MB - 8, text


def _used_mb(folder: str) -> float:
    return sum(f.stat().st_size for f in Path(folder).glob("big*")) / (1 << 20)


def test_one_principals_workspaces_kept_or_open_never_take_anothers_room(
    shared: tuple[RunningDaemon, str],
) -> None:
    """Attacker round 98: alice opened sessions, filled each to its budget and closed them
    without deleting; the kept workspaces filled the filesystem, and bob's fresh session got
    `No space left on device`."""
    _, target = shared
    alice, alice_channel, as_alice = _as(target, "alice")
    bob, bob_channel, as_bob = _as(target, "bob")
    try:
        hers, refused, told = 0.0, [], []
        for _ in range(FILESYSTEM_MB // BUDGET_MB):
            try:
                opened = alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
            except grpc.RpcError as exc:
                refused.append((exc.code(), exc.details()))
                continue
            told.append(_fill(alice, as_alice, opened))
            hers += _used_mb(opened.workspace)
            alice.CloseSession(
                pb.CloseSessionRequest(session_id=opened.id), metadata=as_alice, timeout=60
            )
        # Her share, and nothing beyond it (a little slack: what was written before a refusal).
        assert hers <= FILESYSTEM_MB * SHARE + 8, hers
        # The command that met it is told what it met.
        assert any(f"reached its share of {int(FILESYSTEM_MB * SHARE)} MiB" in t for t in told)
        # Once it is full, a fresh session of hers is refused with a status saying why.
        assert refused, "every session opened though her share was full"
        code, details = refused[0]
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "share" in details, details
        his = bob.OpenSession(pb.OpenSessionRequest(), metadata=as_bob, timeout=60)
        text = _fill(bob, as_bob, his)
        assert "No space left" not in text, text
        assert _used_mb(his.workspace) >= BUDGET_MB - 8, text
        bob.CloseSession(
            pb.CloseSessionRequest(session_id=his.id, delete_workspace=True),
            metadata=as_bob,
            timeout=60,
        )
    finally:
        alice_channel.close()
        bob_channel.close()


def test_workspaces_are_still_deleted_once_principals_filled_the_filesystem(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 179: two principals filled the workspaces filesystem, each within its
    share; a workspace's deletion began by lifting its budget, which needs room, so no
    workspace could be deleted any more (neither a close with delete_workspace nor the sweep)
    until an operator stepped in."""
    root = Path(tmp_path_factory.mktemp("full"))
    with _daemon_with_shares(root) as (_, target):
        sessions = []
        for name in ("alice", "bob"):
            stub, _, metadata = _as(target, name)
            for _ in range(3):  # a share is three budgets: the two fill the filesystem
                session = stub.OpenSession(pb.OpenSessionRequest(), metadata=metadata, timeout=60)
                _fill(stub, metadata, session)
                sessions.append((stub, metadata, session))
        assert shutil.disk_usage(Path(sessions[0][2].workspace).parent).free < 8 << 20
        for stub, metadata, session in sessions:
            closed = stub.CloseSession(
                pb.CloseSessionRequest(session_id=session.id, delete_workspace=True),
                metadata=metadata,
                timeout=120,
            )
            assert closed.workspace_deleted and not Path(session.workspace).exists()


def test_a_kept_workspace_is_deleted_once_kept_long_enough(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Nobody may open a session over a kept workspace (attacker round 78), so the daemon ends
    them: `keep_closed_s` after its session closed (attacker round 98: kept ones stayed for ever
    and filled the filesystem)."""
    root = Path(tmp_path_factory.mktemp("kept"))
    (root / "ws").mkdir()
    os.chown(root / "ws", OWNER_UID, OWNER_GID)
    with running_daemon(
        root / "ws",
        root / "k.sock",
        sandbox={"enabled": False},
        workspaces={"budget_mb": BUDGET_MB, "filesystem_mb": FILESYSTEM_MB, "keep_closed_s": 1},
    ) as daemon:
        stub = daemon.stub
        kept = stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        (Path(kept.workspace) / "result.txt").write_text("kept for a while\n")
        stub.CloseSession(pb.CloseSessionRequest(session_id=kept.id), timeout=60)
        assert Path(kept.workspace).exists(), "deleted at once, not kept"
        deadline = time.monotonic() + 30
        while Path(kept.workspace).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(kept.workspace).exists(), "still there long after keep_closed_s"


def test_a_principal_keeps_at_most_its_limit_of_workspaces_and_others_are_not_held(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 169: alice kept a workspace per OpenSession and CloseSession, 57 a second
    and without limit, each close rewriting the whole registry on the event loop. With her
    kept workspaces and open sessions at the limit, her next fresh session is refused (what
    to do is in the message) and bob's is not; a session closed with delete_workspace makes
    room again."""
    root = Path(tmp_path_factory.mktemp("kept-limit"))
    with _daemon_with_shares(root, sandbox={"enabled": False}, max_kept_per_principal=3) as (
        daemon,
        target,
    ):
        alice, alice_channel, as_alice = _as(target, "alice")
        bob, bob_channel, as_bob = _as(target, "bob")
        try:
            kept = []
            for _ in range(2):
                session = alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
                alice.CloseSession(
                    pb.CloseSessionRequest(session_id=session.id), metadata=as_alice, timeout=60
                )
                kept.append(Path(session.workspace))
            last = alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
            with pytest.raises(grpc.RpcError) as refused:
                alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "2 workspaces kept" in str(refused.value.details())
            assert "delete_workspace=true" in str(refused.value.details())
            theirs = bob.OpenSession(pb.OpenSessionRequest(), metadata=as_bob, timeout=60)
            assert Path(theirs.workspace).is_dir()
            alice.CloseSession(
                pb.CloseSessionRequest(session_id=last.id, delete_workspace=True),
                metadata=as_alice,
                timeout=60,
            )
            again = alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
            assert all(folder.is_dir() for folder in kept), "a kept workspace went early"
            registry = json.loads((daemon.settings.state_dir / "kept-workspaces.json").read_text())
            assert sorted(f for f, e in registry.items() if not e.get("open")) == sorted(
                str(folder) for folder in kept
            )
            assert {f for f, e in registry.items() if e.get("open")} == {
                theirs.workspace,
                again.workspace,
            }, "the workspaces of open sessions are registered as open"
        finally:
            alice_channel.close()
            bob_channel.close()


def _kept_one(daemon: RunningDaemon) -> tuple[Path, Path]:
    """A fresh session opened and closed without delete_workspace: its workspace, and the
    kept workspaces' registry."""
    session = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
    daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=60)
    return Path(session.workspace), daemon.settings.state_dir / "kept-workspaces.json"


def _budgeted(
    keep_closed_s: float, budget_mb: int = BUDGET_MB, **workspaces: Any
) -> dict[str, Any]:
    """A daemon's settings without a sandbox, whose fresh workspaces have budgets (with the
    other `workspaces` settings given)."""
    return {
        "sandbox": {"enabled": False},
        "workspaces": {
            "budget_mb": budget_mb,
            "filesystem_mb": FILESYSTEM_MB,
            "keep_closed_s": keep_closed_s,
            **workspaces,
        },
    }


def _root(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder for a daemon, with its configured workspace in it."""
    root = Path(tmp_path_factory.mktemp(name))
    (root / "ws").mkdir()
    os.chown(root / "ws", OWNER_UID, OWNER_GID)
    return root


def _emptied(registry: Path, within_s: float = 60) -> dict[str, Any]:
    """The registry once it holds no entry (the sweeps deleted or forgot them), or as it is
    after `within_s`."""
    deadline = time.monotonic() + within_s
    while (entries := json.loads(registry.read_text())) and time.monotonic() < deadline:
        time.sleep(0.2)
    return cast(dict[str, Any], entries)


def _swept(daemon: RunningDaemon, registry: Path) -> None:
    """Returns once a sweep ran: a workspace kept now (keep_closed_s 1) is deleted by one."""
    marker, _ = _kept_one(daemon)
    deadline = time.monotonic() + 60
    while str(marker) in json.loads(registry.read_text()):
        assert time.monotonic() < deadline, "no sweep deleted a workspace kept past its time"
        time.sleep(0.2)


def _kept_through_plain_folders(root: Path, socket: Path, folder: Path, registry: Path) -> None:
    """`folder`, kept on the workspaces filesystem, stays registered through a daemon with
    budget_mb = 0 started with the filesystem unmounted (plain folders where it was), and is
    deleted once a daemon with a budget is back."""
    subprocess.run(["umount", str(folder.parent)], check=True)
    with running_daemon(root / "ws", socket, **_budgeted(1, budget_mb=0)) as daemon:
        _swept(daemon, registry)
        assert str(folder) in json.loads(registry.read_text()), "forgotten where it is not"
    with running_daemon(root / "ws", socket, **_budgeted(1)):
        _emptied(registry)
        assert os.path.ismount(folder.parent) and not folder.exists(), "never deleted"


def test_a_workspace_of_a_session_open_when_the_daemon_stopped_is_deleted_in_its_turn(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 170: the workspaces of sessions still open when the daemon stopped (a
    restart, an upgrade) were in no registry: the restarted daemon never deleted them, and they
    counted against nobody's limit."""
    root = _root(tmp_path_factory, "left-open")
    options = _budgeted(2, max_kept_per_principal=1)
    with running_daemon(root / "ws", root / "o.sock", **options) as daemon:
        left = daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        (Path(left.workspace) / "work.txt").write_text("the model's\n")
        registry = daemon.settings.state_dir / "kept-workspaces.json"
    assert Path(left.workspace).exists(), "deleted as the daemon stopped"
    with running_daemon(root / "ws", root / "o.sock", **options) as daemon:
        with pytest.raises(grpc.RpcError) as refused:
            daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        deadline = time.monotonic() + 60
        while Path(left.workspace).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(left.workspace).exists(), "never deleted after the restart"
        # Forgotten once its deletion returned (the registry written after): room again.
        assert _emptied(registry) == {}
        assert daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60).id


def test_kept_workspaces_are_deleted_after_a_start_without_their_filesystem_mounted(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 171: after a reboot (the workspaces filesystem not mounted yet), the
    restarted daemon's sweep found every kept workspace missing on the empty mount point and
    forgot them all: never deleted, counted against nobody. It mounts the filesystem first."""
    root = _root(tmp_path_factory, "unmounted")
    with running_daemon(root / "ws", root / "u.sock", **_budgeted(2)) as daemon:
        folder, registry = _kept_one(daemon)
        sessions_root = folder.parent
    subprocess.run(["umount", str(sessions_root)], check=True)
    assert not folder.exists()
    with running_daemon(root / "ws", root / "u.sock", **_budgeted(2)):
        _emptied(registry)
        assert os.path.ismount(sessions_root), "forgotten without looking at the filesystem"
        assert not folder.exists(), "forgotten, not deleted"
        assert json.loads(registry.read_text()) == {}


def test_a_kept_workspace_is_deleted_even_if_its_filesystem_was_unmounted_under_the_daemon(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 172: unmounted while the daemon ran, the bare folder beneath was taken for
    the filesystem (it was looked at once), every kept workspace was forgotten there, and fresh
    sessions failed until a restart. The filesystem is looked at each time, mounted again."""
    root = _root(tmp_path_factory, "unmounted-live")
    with running_daemon(root / "ws", root / "v.sock", **_budgeted(3)) as daemon:
        folder, registry = _kept_one(daemon)
        subprocess.run(["umount", str(folder.parent)], check=True)
        _emptied(registry)
        assert os.path.ismount(folder.parent), "forgotten on the bare folder, not mounted again"
        assert not folder.exists(), "forgotten, not deleted"
        assert daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60).id


def test_kept_workspaces_stay_registered_while_another_kind_of_workspaces_is_configured(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 172: restarted with workspaces.budget_mb = 0 (plain folders where the
    filesystem was mounted), the daemon forgot every kept workspace of the filesystem: back
    with a budget, nothing deleted them, and they counted against nobody."""
    root = _root(tmp_path_factory, "budget-changed")
    with running_daemon(root / "ws", root / "b.sock", **_budgeted(3600)) as daemon:
        folder, registry = _kept_one(daemon)
    _kept_through_plain_folders(root, root / "b.sock", folder, registry)


def test_an_image_made_anew_frees_what_was_kept_on_the_old_one(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 173: an image removed to be made anew (as docs/operations.md says) got a
    new name, and the entries of the old one counted against their principal for ever."""
    root = _root(tmp_path_factory, "remade")
    options = _budgeted(3600, max_kept_per_principal=1)
    with running_daemon(root / "ws", root / "r.sock", **options) as daemon:
        folder, registry = _kept_one(daemon)
        image = daemon.settings.workspaces.image or daemon.settings.state_dir / "workspaces.img"
    subprocess.run(["umount", str(folder.parent)], check=True)
    image.unlink()
    marks = image.parent / "workspaces-marks.json"
    marks.write_text(json.dumps({}))  # deleted for good, as docs/operations.md says to tell it
    with running_daemon(root / "ws", root / "r.sock", **options) as daemon:
        assert _emptied(registry) == {}, "the old image's entry still counts"
        assert daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60).id


def test_a_missing_image_found_before_is_not_made_anew(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 178: a daemon started before the disk its image is on was mounted found
    no image, made a new one in the bare folder and forgot every workspace kept on the real
    one. An image the daemon found before is not made anew until an operator says it is gone."""
    root = _root(tmp_path_factory, "image-late")
    with running_daemon(root / "ws", root / "l.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
        image = daemon.settings.state_dir / "workspaces.img"
    subprocess.run(["umount", str(folder.parent)], check=True)
    away = image.rename(root / "away.img")  # its disk not mounted yet
    try:
        _refused_and_nothing_forgotten(root, root / "l.sock", folder, "is missing")
        assert not image.exists(), "a new image was made"
    finally:
        away.rename(image)
    with running_daemon(root / "ws", root / "l.sock", **_budgeted(3600)) as daemon:
        assert daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60).id
        assert folder.is_dir()
    _unmount(folder.parent)


def test_a_copy_of_the_image_mounted_from_a_node_gone_since_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 178: a copy of the image (carrying its mark) mounted through a device
    node removed afterwards: nothing said which file it read, the image check was skipped,
    and the workspaces kept since the copy was made were forgotten. A mount whose source is
    not a loop device over the image is refused."""
    root, folder, image = _kept_and_unmounted(tmp_path_factory, "image-copy")
    sessions = folder.parent
    copy = root / "copy.img"
    subprocess.run(["cp", "--sparse=always", str(image), str(copy)], check=True)
    try:
        with _mounted_through_a_node(copy, "copy", sessions) as node:
            node.unlink()
            _refused_and_nothing_forgotten(root, root / "d.sock", folder, "not from a loop")
    finally:
        _unmount(sessions)


def test_entries_from_before_filesystems_were_named_are_not_forgotten_where_they_are_not(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 173: an upgraded registry's entries took the first place in view, so a
    start with budget_mb = 0 and the filesystem unmounted forgot them on the bare folder."""
    root = _root(tmp_path_factory, "legacy")
    with running_daemon(root / "ws", root / "g.sock", **_budgeted(3600)) as daemon:
        folder, registry = _kept_one(daemon)
    entries = json.loads(registry.read_text())
    for entry in entries.values():
        del entry["filesystem"]  # as the daemon wrote them before
    registry.write_text(json.dumps(entries))
    _kept_through_plain_folders(root, root / "g.sock", folder, registry)


def test_kept_workspaces_of_a_bind_mounted_folder_are_not_forgotten_on_the_one_beneath(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 174: with budget_mb = 0 and the sessions folder a bind mount of a folder
    on the same filesystem (not a mount point to os.path.ismount), a start before the bind was
    back (a reboot) forgot every kept workspace on the bare folder beneath."""
    root = _root(tmp_path_factory, "bind")
    sessions, source = root / "p.state" / "sessions", root / "elsewhere"
    sessions.mkdir(parents=True)
    source.mkdir()
    subprocess.run(["mount", "--bind", str(source), str(sessions)], check=True)
    try:
        with running_daemon(root / "ws", root / "p.sock", **_budgeted(3600, budget_mb=0)) as d:
            folder, registry = _kept_one(d)
        assert (source / folder.name).is_dir()
    finally:
        subprocess.run(["umount", str(sessions)], check=True)
    with running_daemon(root / "ws", root / "p.sock", **_budgeted(1, budget_mb=0)) as daemon:
        _swept(daemon, registry)
        assert str(folder) in json.loads(registry.read_text()), "forgotten where it is not"
    subprocess.run(["mount", "--bind", str(source), str(sessions)], check=True)
    try:
        with running_daemon(root / "ws", root / "p.sock", **_budgeted(1, budget_mb=0)):
            assert str(folder) not in _emptied(registry), "never deleted"
            assert not (source / folder.name).exists()
    finally:
        subprocess.run(["umount", str(sessions)], check=True)


def _foreign_btrfs(root: Path) -> Path:
    """A btrfs image of nobody's configuration, made beside the daemon's."""
    image = root / "foreign.img"
    with image.open("wb") as made:
        made.truncate(FILESYSTEM_MB << 20)
    subprocess.run(["mkfs.btrfs", "-q", "-f", "--mixed", str(image)], check=True)
    return image


def _unmount(*paths: Path) -> None:
    """Everything mounted at each of `paths`, in order, however many mounts are stacked
    (lazily: a test that failed may have left something using them)."""
    for path in paths:
        while str(path) in _mount_points():
            subprocess.run(["umount", "-l", str(path)], check=True)


def _mount_points() -> set[str]:
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return {line.split(" ")[4].replace("\\040", " ") for line in lines}


@contextlib.contextmanager
def _mounted_through_a_node(image: Path, name: str, at: Path) -> Iterator[Path]:
    """`image` mounted at `at` from a loop device, through a node of its own named `name`
    (in a folder of /dev made for it); the node, while the loop device lasts."""
    loop = subprocess.run(
        ["losetup", "-f", "--show", str(image)], check=True, capture_output=True, text=True
    ).stdout.strip()
    nodes = Path(tempfile.mkdtemp(prefix="tj-nodes-", dir="/dev"))
    try:
        node = nodes / name
        os.mknod(node, 0o600 | stat.S_IFBLK, os.stat(loop).st_rdev)
        subprocess.run(
            ["mount", "-t", "btrfs", "-o", "nosuid,nodev", str(node), str(at)], check=True
        )
        yield node
    finally:
        _unmount(at)
        shutil.rmtree(nodes)
        subprocess.run(["losetup", "-d", loop], check=False)


def _kept_and_unmounted(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> tuple[Path, Path, Path]:
    """A folder for daemons (socket d.sock) where one kept a workspace on its image, which
    was unmounted then: (the folder, the kept workspace, the image)."""
    root = _root(tmp_path_factory, name)
    with running_daemon(root / "ws", root / "d.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
        image = daemon.settings.state_dir / "workspaces.img"
    subprocess.run(["umount", str(folder.parent)], check=True)
    return root, folder, image


def _refused_and_nothing_forgotten(
    root: Path, socket: Path, folder: Path, hint: str, **settings: Any
) -> None:
    """A daemon started now (with `settings`, else a budget and keep_closed_s 1) refuses
    fresh sessions (the error names `hint`), and its sweep forgets nothing: `folder` stays
    registered."""
    registry = folder.parents[1] / "kept-workspaces.json"
    with running_daemon(root / "ws", socket, **(settings or _budgeted(1))) as daemon:
        with pytest.raises(grpc.RpcError) as refused:
            daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        assert hint in str(refused.value.details()), refused.value.details()
        assert daemon._run(daemon.daemon.sessions._kept.sweep()) == 0
        assert str(folder) in json.loads(registry.read_text())


def test_a_filesystem_of_another_image_than_the_configured_one_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 174: workspaces.image changed while the old image stayed mounted: new
    workspaces were made on the old image and recorded as the new one's, then forgotten once
    the new one was mounted."""
    root = _root(tmp_path_factory, "image-switched")
    with running_daemon(root / "ws", root / "i.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
    other = _budgeted(1, image=str(root / "other.img"))
    try:
        _refused_and_nothing_forgotten(
            root, root / "i.sock", folder, "not the configured one", **other
        )
        assert folder.is_dir()
    finally:
        _unmount(folder.parent)


def test_a_file_mounted_over_the_configured_images_path_is_not_taken_for_the_image(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With another file mounted over the configured image's path once the image is mounted,
    sysfs still names the loop device's file by that path, but the path leads to the other
    file (a daemon mounting the configured image now would mount it), and workspaces made on
    the mounted one would be recorded as the other file's, as in round 174."""
    root = _root(tmp_path_factory, "image-shadowed")
    with running_daemon(root / "ws", root / "s.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
        image = daemon.settings.state_dir / "workspaces.img"
    other = root / "other.img"
    other.write_bytes(b"")
    subprocess.run(["mount", "--bind", str(other), str(image)], check=True)
    try:
        _refused_and_nothing_forgotten(root, root / "s.sock", folder, "mounted over")
        assert folder.is_dir()
    finally:
        _unmount(image, folder.parent)


def test_a_file_mounted_over_the_image_path_is_refused_before_the_daemon_mounts_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 176: with the sessions root unmounted and another btrfs image bound over
    the configured image's path, the daemon mounted the path itself: the loop device read the
    other file, and so did the path, so the check passed and the sweep forgot every kept
    workspace of the image beneath. A mount at the image's path is refused."""
    root = _root(tmp_path_factory, "image-bound")
    with running_daemon(root / "ws", root / "b.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
        image = daemon.settings.state_dir / "workspaces.img"
    subprocess.run(["umount", str(folder.parent)], check=True)
    subprocess.run(["mount", "--bind", str(_foreign_btrfs(root)), str(image)], check=True)
    try:
        _refused_and_nothing_forgotten(root, root / "b.sock", folder, "mounted over")
        assert not os.path.ismount(folder.parent), "the file over the image was mounted"
    finally:
        _unmount(folder.parent, image)


def test_a_filesystem_moved_over_the_image_is_the_one_looked_at(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 176: a filesystem mounted before the image and moved on top of it
    (mount --move) is listed before it in the mount table, and the check looked at the last
    listed one, the image beneath, while every path reached the one on top. The mount looked
    at is the one the kernel says the sessions root is on."""
    root = _root(tmp_path_factory, "image-moved")
    early = root / "early"
    early.mkdir()
    subprocess.run(
        ["mount", "-o", "loop,nosuid,nodev", str(_foreign_btrfs(root)), str(early)], check=True
    )
    sessions = root / "m.state" / "sessions"
    try:
        with running_daemon(root / "ws", root / "m.sock", **_budgeted(3600)) as daemon:
            folder, _ = _kept_one(daemon)
        assert folder.parent == sessions
        subprocess.run(["mount", "--move", str(early), str(sessions)], check=True)
        _refused_and_nothing_forgotten(root, root / "m.sock", folder, "not the configured one")
    finally:
        _unmount(sessions, early)


def test_the_image_mounted_without_nosuid_and_nodev_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 176: a filesystem found mounted at the sessions root was used whatever
    its options; the daemon mounts it nosuid,nodev, and one mounted otherwise is refused."""
    root = _root(tmp_path_factory, "image-suid")
    with running_daemon(root / "ws", root / "n.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
        image = daemon.settings.state_dir / "workspaces.img"
    subprocess.run(["umount", str(folder.parent)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(folder.parent)], check=True)
    try:
        _refused_and_nothing_forgotten(root, root / "n.sock", folder, "nosuid,nodev")
    finally:
        _unmount(folder.parent)


def test_another_image_under_a_folder_mounted_over_the_images_folder_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 177: a folder mounted over the image's folder held another image under
    the image's name; mounted at the sessions root (by an operator, or by the daemon itself),
    it passed every check on paths and devices, and the sweep forgot the kept workspaces of
    the image beneath. The filesystem must carry the mark made on the one first found there."""
    root = _root(tmp_path_factory, "image-folder")
    (root / "img").mkdir()
    image = root / "img" / "ws.img"
    settings = _budgeted(3600, image=str(image))
    with running_daemon(root / "ws", root / "f.sock", **settings) as daemon:
        folder, _ = _kept_one(daemon)
    (root / "alt").mkdir()
    _foreign_btrfs(root).rename(root / "alt" / "ws.img")
    subprocess.run(["umount", str(folder.parent)], check=True)
    subprocess.run(["mount", "--bind", str(root / "alt"), str(root / "img")], check=True)
    try:
        again = _budgeted(1, image=str(image))
        _refused_and_nothing_forgotten(root, root / "f.sock", folder, "mark", **again)
    finally:
        _unmount(folder.parent, root / "img")


def test_a_device_node_named_like_the_images_loop_device_is_not_taken_for_it(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 177: another image's loop device mounted over the image through a node
    named like the image's loop device: the check looked the name up in /dev, found the
    image's device, and took the other filesystem for it. The device is the node's own."""
    root = _root(tmp_path_factory, "image-node")
    with running_daemon(root / "ws", root / "d.sock", **_budgeted(3600)) as daemon:
        folder, _ = _kept_one(daemon)
    sessions = folder.parent
    mounted = mount_at(sessions)
    assert mounted is not None
    try:
        # Named like the image's device, and mounted over it.
        with _mounted_through_a_node(_foreign_btrfs(root), Path(mounted.source).name, sessions):
            _refused_and_nothing_forgotten(root, root / "d.sock", folder, "not the configured")
    finally:
        _unmount(sessions)


def test_the_images_filesystem_keeps_its_name_when_its_device_is_named_otherwise(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 177: `btrfs device scan` of another node of the image's loop device
    changed the mount table's source, the image was taken for an operator's device and named
    by its id, and every workspace kept before counted for ever, undeleted."""
    root = _root(tmp_path_factory, "image-renamed")
    with running_daemon(root / "ws", root / "n.sock", **_budgeted(3600)) as daemon:
        folder, registry = _kept_one(daemon)
    mounted = mount_at(folder.parent)
    assert mounted is not None
    nodes = Path(tempfile.mkdtemp(prefix="tj-nodes-", dir="/dev"))
    alias = nodes / "vol0"
    try:
        os.mknod(alias, 0o600 | stat.S_IFBLK, os.stat(mounted.source).st_rdev)
        subprocess.run(["btrfs", "device", "scan", str(alias)], check=True, capture_output=True)
        renamed = mount_at(folder.parent)
        assert renamed is not None and renamed.source == str(alias)
        with running_daemon(root / "ws", root / "n.sock", **_budgeted(1)):
            assert _emptied(registry) == {}, "the kept workspace was never deleted"
    finally:
        subprocess.run(["btrfs", "device", "scan", mounted.source], capture_output=True)
        shutil.rmtree(nodes)
        _unmount(folder.parent)


def test_kept_workspaces_follow_their_filesystem_to_another_sessions_root(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 177: with the sessions root set elsewhere and the same image mounted
    there, every workspace kept before was taken for gone (recorded at the old root) and never
    deleted. They are looked for where their filesystem is, and deleted in their turn."""
    root = _root(tmp_path_factory, "root-moved")
    with running_daemon(root / "ws", root / "r.sock", **_budgeted(3600)) as daemon:
        folder, registry = _kept_one(daemon)
    subprocess.run(["umount", str(folder.parent)], check=True)
    moved = root / "moved"
    try:
        with running_daemon(root / "ws", root / "r.sock", sessions_root=moved, **_budgeted(1)):
            assert _emptied(registry) == {}, "the kept workspace was never deleted"
            assert not (moved / folder.name).exists()
    finally:
        _unmount(moved)


def test_a_subvolume_of_the_image_mounted_in_its_place_is_refused(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 175: the configured image mounted from one of its subvolumes (mount -o
    subvol=) was named as the whole image, and the kept workspaces were forgotten there."""
    root, folder, image = _kept_and_unmounted(tmp_path_factory, "subvolume")
    sessions = folder.parent
    options = "loop,nosuid,nodev,subvol=" + folder.name
    subprocess.run(["mount", "-o", options, str(image), str(sessions)], check=True)
    try:
        _refused_and_nothing_forgotten(root, root / "d.sock", folder, "not its top level")
    finally:
        _unmount(sessions)


SMALL_FILES = (
    "mkdir small && head -c 100M /dev/zero | split -b 2000 -a 6 - small/part- 2>&1 | tail -1"
)
"""Files small enough for btrfs to keep inside its metadata, until the quota stops them."""


def test_files_kept_in_metadata_count_once_against_the_share(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 99: small files live in btrfs's metadata, which was stored twice (DUP)
    and counted once by the quotas: alice, within her share, filled the whole filesystem and
    bob could not even make a folder."""
    with _daemon_with_shares(Path(tmp_path_factory.mktemp("metadata"))) as (_, target):
        alice, alice_channel, as_alice = _as(target, "alice")
        bob, bob_channel, as_bob = _as(target, "bob")
        try:
            for n in range(int(FILESYSTEM_MB * SHARE) // BUDGET_MB):
                opened = alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
                _allowed(alice, as_alice, opened, f"toolu_small_{n}", SMALL_FILES)
            _room_for(bob, as_bob)
        finally:
            alice_channel.close()
            bob_channel.close()


NUMBERED_SMALL_FILES = (
    "mkdir small && head -c 100M /dev/zero | split -b 2000 -d -a 6 - small/part- 2>&1 | tail -1"
)
ALL_BUT_ONE_IN_TEN = " ".join(f"small/part-*{digit}" for digit in "123456789")
"""Those files but the ones whose number ends in 0."""


def test_metadata_space_freed_by_one_principal_is_room_for_everyone(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 153: btrfs sets space aside in chunks for data or for metadata, and a
    metadata chunk holds no data however empty. Alice filled her share with small files (kept in
    metadata), deleted all but one in ten (her quota back to little, the chunks pinned),
    then filled her share again with data: the filesystem was full and bob got "No space left
    on device" within his own share. The filesystem now mixes data and metadata in its chunks."""
    with _daemon_with_shares(Path(tmp_path_factory.mktemp("pinned"))) as (_, target):
        alice, alice_channel, as_alice = _as(target, "alice")
        bob, bob_channel, as_bob = _as(target, "bob")
        try:
            sessions = [
                alice.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
                for _ in range(int(FILESYSTEM_MB * SHARE) // BUDGET_MB)
            ]
            for n, opened in enumerate(sessions):
                for step, command in enumerate(
                    [NUMBERED_SMALL_FILES, f"rm -f {ALL_BUT_ONE_IN_TEN}; sync; ls small | wc -l"]
                ):
                    _allowed(alice, as_alice, opened, f"toolu_pin_{n}_{step}", command)
            time.sleep(35)  # btrfs commits the deletes (and frees their quota) every 30 s
            for opened in sessions:
                _fill(alice, as_alice, opened)
            _room_for(bob, as_bob)
        finally:
            alice_channel.close()
            bob_channel.close()
