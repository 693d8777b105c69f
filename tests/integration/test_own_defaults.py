"""A tenant's default session works in a folder of its own (workspaces.tenant_defaults = "own",
the default): no other tenant's sandbox or read-only tool reaches it, it keeps its files and its
disk budget across a restart, and the configured workspace stays the operators' (the Unix
socket's principal and the admins). Attacker round 137 showed what one folder for every
default session let tenants do to each other. Real OPA, Docker and btrfs."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.test_principal_uids import SANDBOX_USER, Tenant
from tests.integration.test_principals import TOKENS, _policies
from tests.integration.test_service import free_port

pytestmark = [pytest.mark.integration, pytest.mark.docker]

FIRST = 2_100_001_000
DEFAULT = pb.Session(id="")
BUDGET_MB = 64
#: Principals whose first call is cut short by its deadline.
HASTY = {f"hasty{n}": f"hasty-token-{n}-6d1f" for n in range(16)}


@contextlib.contextmanager
def _daemon(root: Path) -> Iterator[tuple[RunningDaemon, str]]:
    """A root daemon whose default workspace is the sandbox account's, as `make run` makes it,
    reached over TCP by the token principals (carol an admin); its address."""
    try:
        account = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        pytest.skip(f"the account {SANDBOX_USER} is missing (make setup creates it)")
    workspace = root / "ws"
    policies = root / "policies"
    if not workspace.exists():
        workspace.mkdir()
        workspace.chmod(0o770)
        os.chown(workspace, account.pw_uid, account.pw_gid)
        policies = _policies(root)
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        workspace,
        root / "o.sock",
        sandbox={"pool_size": 0, "principal_uid_first": FIRST, "principal_uid_count": 100},
        tcp={"address": target},
        auth={"tokens": {**TOKENS, **HASTY}, "admin_principals": ["local", "carol"]},
        opa={"policies_dir": policies},
        workspaces={"budget_mb": BUDGET_MB},
    ) as running:
        if running.daemon.sandbox is None or running.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        yield running, target


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningDaemon, str]]:
    with _daemon(Path(tmp_path_factory.mktemp("own"))) as running:
        yield running


def _call(tenant: Tenant, name: str, tool_input: dict[str, object]) -> pb.ExecuteResponse:
    use = pb.ToolUse(id=f"toolu_{os.urandom(6).hex()}", name=name)
    use.input.update(tool_input)
    response: pb.ExecuteResponse = tenant.stub.Execute(
        pb.ExecuteRequest(tool_use=use), metadata=tenant.metadata, timeout=120
    )
    return response


def _where(tenant: Tenant) -> Path:
    return Path(text_of(tenant.bash(DEFAULT, "pwd")).strip())


def test_each_tenants_default_session_works_in_a_folder_no_other_tenant_reaches(
    own: tuple[RunningDaemon, str],
) -> None:
    running, target = own
    alice, bob = Tenant(target, "alice"), Tenant(target, "bob")
    hers = _where(alice)
    his = _where(bob)
    sessions_root = running.settings.state_dir / "sessions"
    assert hers != his and {hers.parent, his.parent} == {sessions_root.resolve()}, (hers, his)
    assert running.workspace.resolve() not in (hers, his)
    alice.bash(DEFAULT, "echo hers > secret && mkdir -p json && echo 'x = 1' > json/__init__.py")
    uid = int(text_of(alice.bash(DEFAULT, "id -u")).strip())
    assert hers.stat().st_uid == uid and (hers / "secret").stat().st_uid == uid
    # Her folder is not in his container at all, whatever the modes say.
    seen = text_of(_call(bob, "Bash", {"command": f"ls -la {hers}; cat {hers}/secret"}))
    assert "hers" not in seen and "No such file" in seen, seen
    # His read-only tools run on the host, and are confined to his folder.
    for name, tool_input in (
        ("Read", {"file_path": str(hers / "secret")}),
        ("Glob", {"pattern": "**/secret", "path": str(hers)}),
        ("Grep", {"pattern": "hers", "path": str(hers)}),
        ("LS", {"path": str(hers)}),
    ):
        refused = _call(bob, name, tool_input)
        assert refused.result.is_error and "hers" not in text_of(refused), (name, refused)
        assert "outside the workspace" in text_of(refused), (name, text_of(refused))
    # What she made where her commands start is nobody else's import path.
    python = text_of(bob.bash(DEFAULT, "python3 -c 'import json; print(json.__file__)'"))
    assert str(hers) not in python and "/usr/lib/python3" in python, python
    assert "hers" in text_of(_call(alice, "Read", {"file_path": str(hers / "secret")}))
    # Nor can another tenant open a session over it.
    with pytest.raises(Exception, match=r"overlaps a folder of the daemon's own|not inside"):
        bob.stub.OpenSession(
            pb.OpenSessionRequest(workspace=str(hers)), metadata=bob.metadata, timeout=60
        )
    assert not (running.workspace / "secret").exists()


def test_the_operators_default_sessions_work_in_the_configured_workspace(
    own: tuple[RunningDaemon, str],
) -> None:
    running, target = own
    use = pb.ToolUse(id="toolu_local_pwd", name="Bash")
    use.input.update({"command": "pwd"})
    local = running.stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120)
    assert Path(text_of(local).strip()) == running.workspace.resolve(), text_of(local)
    assert _where(Tenant(target, "carol")) == running.workspace.resolve()


def test_a_tenants_first_calls_at_once_open_one_default_session(
    own: tuple[RunningDaemon, str],
) -> None:
    running, target = own
    dave = Tenant(target, "dave")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        found = set(pool.map(lambda _: _where(dave), range(4)))
    assert len(found) == 1, found
    made = [p for p in (running.settings.state_dir / "sessions").iterdir() if p in found]
    assert len(made) == 1


def test_a_first_call_cut_short_by_its_deadline_leaves_no_half_made_folder(
    own: tuple[RunningDaemon, str],
) -> None:
    """Attacker round 142: a first ListTools with a deadline of a few milliseconds left the
    tenant's folder half made (root's, with no budget), and every later call was refused."""
    _, target = own
    channel = grpc.insecure_channel(target)
    stub = pb_grpc.ExecutorStub(channel)
    for n, (name, token) in enumerate(HASTY.items()):
        metadata = (("authorization", f"Bearer {token}"),)
        with contextlib.suppress(grpc.RpcError):
            stub.ListTools(pb.ListToolsRequest(), metadata=metadata, timeout=0.002 + 0.003 * n)
        listed = stub.ListTools(pb.ListToolsRequest(), metadata=metadata, timeout=60)
        assert any(tool.name == "Bash" for tool in listed.tools), name
        use = pb.ToolUse(id=f"toolu_hasty_{n}", name="Bash")
        use.input.update({"command": "id -u; pwd"})
        answer = stub.Execute(pb.ExecuteRequest(tool_use=use), metadata=metadata, timeout=120)
        uid, folder = text_of(answer).split()
        assert Path(folder).stat().st_uid == int(uid) != 0, name
    channel.close()


def test_a_tenants_default_folder_keeps_its_files_and_budget_across_a_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    root = Path(tmp_path_factory.mktemp("restart"))
    with _daemon(root) as (_, target):
        alice = Tenant(target, "alice")
        before = _where(alice)
        alice.bash(DEFAULT, "echo kept > notes")
        alice.channel.close()
    with _daemon(root) as (_, target):
        alice = Tenant(target, "alice")
        assert _where(alice) == before
        assert "kept" in text_of(_call(alice, "Read", {"file_path": str(before / "notes")}))
        filled = text_of(
            _call(alice, "Bash", {"command": "dd if=/dev/zero of=big bs=1M count=100 2>&1; sync"})
        )
        assert "No space left on device" in filled or "Disk quota exceeded" in filled, filled
        assert (before / "big").stat().st_size <= BUDGET_MB << 20
        alice.channel.close()
