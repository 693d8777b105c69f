"""Each principal's sandboxes over the workspaces tooljail makes run as a uid of its own, so the
kernel's per-user limits are no tenant's to take from another (attacker round 105, F3: alice
held every inotify instance of the one sandbox uid, and bob's `tail -f` lost inotify).
Real OPA and Docker."""

from __future__ import annotations

import base64
import json
import os
import pwd
import re
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.sessions.principal_uids import LEDGER_NAME
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.test_principals import TOKENS, _policies
from tests.integration.test_service import free_port

pytestmark = [pytest.mark.integration, pytest.mark.docker]

FIRST = 2_100_000_000
SANDBOX_USER = "tooljail-sandbox"
DEFAULT = pb.Session(id="")
#: Takes every inotify instance the kernel grants one uid (a `tail -f` each), says so, holds them.
HOG = (
    "touch f; for i in $(seq 160); do tail -f f > /dev/null 2>&1 & done; sleep 2; "
    "echo taken > held; wait"
)
#: What a tenant's tool sees: tail says when it finds no inotify instance left.
PROBE = "touch g; timeout 2 tail -f g 2>&1; echo probed"
_STARVED = "inotify cannot be used"


class Tenant:
    def __init__(self, target: str, name: str) -> None:
        self.channel = grpc.insecure_channel(target)
        self.stub = pb_grpc.ExecutorStub(self.channel)
        self.metadata = (("authorization", f"Bearer {TOKENS[name]}"),)

    def bash(self, session: pb.Session, command: str, **more: object) -> pb.ExecuteResponse:
        use = pb.ToolUse(id=f"toolu_{os.urandom(6).hex()}", name="Bash")
        use.input.update({"command": command, **more})
        request = pb.ExecuteRequest(tool_use=use, session_id=session.id)
        response: pb.ExecuteResponse = self.stub.Execute(
            request, metadata=self.metadata, timeout=120
        )
        assert not response.result.is_error, text_of(response)
        return response

    def open(self) -> pb.Session:
        session: pb.Session = self.stub.OpenSession(
            pb.OpenSessionRequest(), metadata=self.metadata, timeout=60
        )
        return session

    def close(self, session: pb.Session) -> None:
        self.stub.CloseSession(
            pb.CloseSessionRequest(session_id=session.id, delete_workspace=True),
            metadata=self.metadata,
            timeout=120,
        )


def _starves_its_owner_alone(
    held: Path, owner: tuple[Tenant, pb.Session], other: tuple[Tenant, pb.Session]
) -> None:
    """Once the hog says (`held`) it took every inotify instance of its owner's uid: the owner's
    next container, its uid too, finds none left (so the hog works and the check can fail),
    and the other tenant's finds its own."""
    deadline = time.monotonic() + 90
    while not held.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert held.exists(), "the background command never took the inotify instances"
    assert _STARVED in text_of(owner[0].bash(owner[1], PROBE))
    answer = text_of(other[0].bash(other[1], PROBE))
    assert _STARVED not in answer and "probed" in answer, answer


@pytest.fixture(scope="module")
def tenants(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningDaemon, Tenant, Tenant]]:
    root = Path(tmp_path_factory.mktemp("uids"))
    # The default workspace is the sandbox account's and its group's to write, as the daemon
    # makes it; the operator shares it (workspaces.tenant_defaults): every principal's default
    # session works in it, through the group.
    try:
        account = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        pytest.skip(f"the account {SANDBOX_USER} is missing (make setup creates it)")
    (root / "ws").mkdir()
    (root / "ws").chmod(0o770)
    os.chown(root / "ws", account.pw_uid, account.pw_gid)
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        root / "ws",
        root / "u.sock",
        sandbox={"pool_size": 0, "principal_uid_first": FIRST, "principal_uid_count": 100},
        tcp={"address": target},
        auth={"tokens": TOKENS},
        opa={"policies_dir": _policies(root)},
        workspaces={"tenant_defaults": "shared"},
    ) as running:
        if running.daemon.sandbox is None or running.daemon.sandbox.stats() is None:
            pytest.skip("no Docker engine answers")
        alice, bob = Tenant(target, "alice"), Tenant(target, "bob")
        yield running, alice, bob
        alice.channel.close()
        bob.channel.close()


def test_each_principal_runs_as_its_own_uid_kept_across_sessions(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    running, alice, bob = tenants
    ids: dict[str, set[tuple[int, int]]] = {"alice": set(), "bob": set()}
    for name, tenant in (("alice", alice), ("bob", bob), ("alice", alice)):
        session = tenant.open()
        uid, gid = map(int, text_of(tenant.bash(session, "id -u; id -g")).split())
        owner = Path(session.workspace).stat()
        assert (owner.st_uid, owner.st_gid) == (uid, gid)  # the daemon runs as root here
        ids[name].add((uid, gid))
        tenant.close(session)
    assert len(ids["alice"]) == 1 and len(ids["bob"]) == 1, ids
    (alice_uid, group), (bob_uid, bob_group) = ids["alice"].pop(), ids["bob"].pop()
    assert alice_uid != bob_uid and group == bob_group
    assert {alice_uid, bob_uid} <= set(range(FIRST, FIRST + 100))
    ledger = json.loads((running.settings.state_dir / LEDGER_NAME).read_text())
    assert set(ledger["uids"].values()) >= {alice_uid, bob_uid}


def test_one_tenant_holding_a_per_user_kernel_limit_leaves_anothers_alone(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    _, alice, bob = tenants
    hers, his = alice.open(), bob.open()
    try:
        alice.bash(hers, HOG, run_in_background=True)
        _starves_its_owner_alone(Path(hers.workspace) / "held", (alice, hers), (bob, his))
    finally:
        alice.close(hers)
        bob.close(his)


def test_default_sessions_share_the_workspace_but_each_runs_as_its_principals_uid(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 109: every principal's default session still ran as the one sandbox
    account, so alice's default session held the inotify instances (and message queues, pipe
    pages) of bob's."""
    running, alice, bob = tenants
    hers = text_of(alice.bash(DEFAULT, "id -u; id -g")).split()
    his = text_of(bob.bash(DEFAULT, "id -u; id -g")).split()
    assert hers[0] != his[0] and hers[1] == his[1], (hers, his)
    assert {int(hers[0]), int(his[0])} <= set(range(FIRST, FIRST + 100))
    # Still one workspace for both: what one makes, the other reads but may not change (attacker
    # round 136: a tenant changed another's repository, and its drivers ran in the other's git),
    # and git takes no other tenant's repository for the caller's own.
    alice.bash(DEFAULT, "mkdir -p shared && echo hers > shared/notes && git init -q shared/repo")
    answer = text_of(
        bob.bash(
            DEFAULT, "cat shared/notes; echo his >> shared/notes; git -C shared/repo status; true"
        )
    )
    assert "hers" in answer and "Permission denied" in answer, answer
    assert "dubious ownership" in answer, answer
    assert (running.settings.workspace / "shared" / "notes").read_text() == "hers\n"
    assert "On branch" in text_of(alice.bash(DEFAULT, "git -C shared/repo status"))
    started = text_of(
        alice.bash(DEFAULT, HOG.replace("held", "held-default"), run_in_background=True)
    )
    shell = re.search(r"with ID: (bash_[0-9a-f]{8})", started)
    assert shell, started
    try:
        held = running.settings.workspace / "held-default"
        _starves_its_owner_alone(held, (alice, DEFAULT), (bob, DEFAULT))
    finally:
        use = pb.ToolUse(id="toolu_kill_hog", name="KillShell")
        use.input.update({"shell_id": shell.group(1)})
        alice.stub.Execute(pb.ExecuteRequest(tool_use=use), metadata=alice.metadata, timeout=60)


def test_a_cwd_another_principal_took_away_sends_the_next_command_to_the_root(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 110: alice swapped bob's default-session cwd for a folder of her own that
    bob's uid may not enter; every later Bash of bob's failed, `cd ..` included. Round 111:
    running it at the root instead ran it where the policy had not judged it (bob's writes
    landed on the shared top-level files): the call runs nothing, the next starts at the root."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    trap = workspace / "trap"
    bob.bash(DEFAULT, "mkdir -p trap/inner && cd trap/inner")
    # What alice's commands did (a folder rename the policy has a person approve), done here.
    alice_uid = int(text_of(alice.bash(DEFAULT, "id -u")))
    trap.rename(trap.with_name("trap.moved"))
    for folder in (trap, trap / "inner"):
        folder.mkdir(mode=0o700)
        os.chown(folder, alice_uid, os.stat(workspace).st_gid)
    use = pb.ToolUse(id=f"toolu_{os.urandom(6).hex()}", name="Bash")
    use.input.update({"command": "echo bob > redirected.txt"})
    refused = bob.stub.Execute(pb.ExecuteRequest(tool_use=use), metadata=bob.metadata, timeout=120)
    text = text_of(refused)
    assert refused.result.is_error, text
    assert "Shell cwd was reset" in text and "Nothing ran" in text and "trap/inner" in text
    assert not (workspace / "redirected.txt").exists(), "it ran where it was not judged"
    # The next one is judged, and runs, at the root.
    again = text_of(bob.bash(DEFAULT, "pwd"))
    assert again.strip() == str(workspace), again


def test_the_pipes_a_command_gets_are_its_own_uids(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 111: the runner (root in every container) made the command's pipes, so
    their pages counted against root's per-user limit; one tenant kept hundreds alive (passed
    to a background command of its own) until every tenant's new runner pipes shrank to 8 KiB.
    A pipe's inode belongs to whoever made it."""
    _, alice, _ = tenants
    hers = alice.open()
    try:
        text = text_of(alice.bash(hers, "id -u; stat -L -c %u /proc/self/fd/1 /proc/self/fd/31"))
        uid, *owners = text.split()
        assert owners == [uid, uid], text
    finally:
        alice.close(hers)


def test_a_cwd_gone_after_it_was_judged_runs_nothing(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 112: the daemon's own check found the session's cwd gone (removed by a
    background command, or by another tenant) and ran the command at the workspace root,
    where the policy had not judged it: `rm -rf ../<workspace>`, allowed from a subfolder,
    emptied the workspace. Nothing runs; the next command is judged, and runs, at the root."""
    _, alice, _ = tenants
    hers = alice.open()
    try:
        workspace = Path(hers.workspace)
        alice.bash(hers, "mkdir -p keep d/sub && echo important > keep/main.c && cd d/sub")
        shutil.rmtree(workspace / "d")  # what her background command did
        use = pb.ToolUse(id=f"toolu_{os.urandom(6).hex()}", name="Bash")
        use.input.update({"command": "rm -rf ../keep"})
        refused = alice.stub.Execute(
            pb.ExecuteRequest(tool_use=use, session_id=hers.id),
            metadata=alice.metadata,
            timeout=120,
        )
        text = text_of(refused)
        assert refused.result.is_error and "Nothing ran" in text, text
        assert (workspace / "keep" / "main.c").read_text() == "important\n"
        assert text_of(alice.bash(hers, "pwd")).strip() == str(workspace)
    finally:
        alice.close(hers)


def test_a_write_through_a_link_there_when_it_was_judged_reaches_its_target(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """The runner follows no link (attacker round 113 made one between the judgement and the
    write); a Write through a link that was there when the policy judged it still reaches the
    link's target, which the daemon resolved and the policy saw."""
    _, alice, _ = tenants
    hers = alice.open()
    try:
        workspace = Path(hers.workspace)
        (workspace / "alias.txt").symlink_to("real.txt")
        use = pb.ToolUse(id=f"toolu_{os.urandom(6).hex()}", name="Write")
        use.input.update({"file_path": str(workspace / "alias.txt"), "content": "through\n"})
        answer = alice.stub.Execute(
            pb.ExecuteRequest(tool_use=use, session_id=hers.id),
            metadata=alice.metadata,
            timeout=120,
        )
        assert not answer.result.is_error, text_of(answer)
        assert (workspace / "real.txt").read_text() == "through\n"
        assert (workspace / "alias.txt").is_symlink()
    finally:
        alice.close(hers)


def _wait_for_record(running: RunningDaemon, event: str, call: pb.ExecuteResponse) -> None:
    """Until the audit has an `event` record naming `call` (the check runs after the answer)."""
    deadline = time.monotonic() + 60
    while call.result.tool_use_id not in [r["tool_use_id"] for r in running.audit_lines(event)]:
        assert time.monotonic() < deadline, f"no {event} record of {call.result.tool_use_id}"
        time.sleep(0.05)


def test_a_tenant_laying_out_the_shared_workspace_as_a_git_directory_stops_nobody(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 128: alice made the shared default workspace look like a bare repository
    (HEAD beside objects/); from then on every sandboxed call of every tenant there was
    refused, `rm HEAD` included, until the operator stepped in. What her sandbox made is the
    model's own: the others go on working, and the making is in the audit."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    made = alice.bash(DEFAULT, "mkdir -p objects refs && echo 'ref: refs/heads/main' > HEAD")
    try:
        answer = bob.bash(DEFAULT, "echo bob-ran")
        assert "bob-ran" in text_of(answer)
        alice.bash(DEFAULT, "rm HEAD && rmdir objects refs")
        assert not (workspace / "HEAD").exists()
        _wait_for_record(running, "repository_created", made)
    finally:
        for name in ("HEAD", "objects", "refs"):
            shutil.rmtree(workspace / name, ignore_errors=True)
            (workspace / name).unlink(missing_ok=True)


def test_a_tenants_repository_at_the_shared_root_locks_no_other_tenants_folder(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 128: alice's `git init` at the root of the shared default workspace, whose
    index named bob's folder as a submodule, had bob's folder held read-only in every container
    (an empty submodule) and the repository too, so nobody could undo it."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    bob.bash(DEFAULT, "mkdir -p bob-proj && echo one > bob-proj/notes.txt")
    made = alice.bash(
        DEFAULT,
        _trusting_the_root(
            "git init -q . && git update-index --add --cacheinfo "
            "160000,1111111111111111111111111111111111111111,bob-proj && echo made"
        ),
    )
    try:
        assert "made" in text_of(made)
        bob.bash(DEFAULT, "echo two >> bob-proj/notes.txt")
        assert (workspace / "bob-proj" / "notes.txt").read_text() == "one\ntwo\n"
        # Not held read-only either: the repository is alice's model's own to use.
        alice.bash(DEFAULT, _trusting_the_root(
            "GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a "
            "GIT_COMMITTER_EMAIL=a@b git commit -q --allow-empty -m x"))  # fmt: skip
        assert "x" in text_of(alice.bash(DEFAULT, _trusting_the_root("git log --format=%s")))
    finally:
        shutil.rmtree(workspace / ".git", ignore_errors=True)


def _trusting_the_root(command: str) -> str:
    """`command` run with git told to trust the shared root's repository, as a model does for a
    repository of its own there (git refuses it unasked: the root is the sandbox account's)."""
    return _unseen("open('/tmp/.gitconfig', 'w').write('[safe]\\n\\tdirectory = *\\n')") + (
        f" && {command}"
    )


def _unseen(code: str) -> str:
    """A command running Python `code` that the policy's Bash rules cannot read (as a model
    may write one: the sandbox, not the rules, is the boundary; attacker round 129's way)."""
    encoded = base64.b64encode(code.encode()).decode()
    return f"echo {encoded} | base64 -d > /tmp/x.py && python3 /tmp/x.py"


def test_a_git_file_a_tenant_put_at_the_shared_root_stops_nobody(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 129: round 128's fix covered a `.git` directory only; alice's `.git`
    *file* naming a missing folder refused every call of bob's in the default workspace."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    alice.bash(DEFAULT, _unseen("open('.git', 'w').write('gitdir: nowhere\\n')"))
    try:
        assert "bob-ran" in text_of(bob.bash(DEFAULT, "echo bob-ran"))
    finally:
        (workspace / ".git").unlink(missing_ok=True)


def test_what_a_tenant_fills_into_its_repository_later_is_audited(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 129: an empty `.git` made at the shared root was recorded once; the
    configuration written into it by a later call (a program git runs, in bob's container too)
    was not."""
    running, alice, _ = tenants
    workspace = running.settings.workspace
    alice.bash(DEFAULT, _unseen("import os; os.mkdir('.git')"))
    try:
        filled = alice.bash(
            DEFAULT,
            _unseen("open('.git/config', 'w').write('[core]\\n\\tfsmonitor = ./fsm.sh\\n')"),
        )
        _wait_for_record(running, "repository_changed", filled)
    finally:
        shutil.rmtree(workspace / ".git", ignore_errors=True)


def test_what_a_git_file_names_is_never_vouched_for(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 130: a `.git` file naming a folder of the model's was looked at by its
    own size and time only; the configuration written into that folder by a later call (a
    program git runs) got no record."""
    running, alice, _ = tenants
    workspace = running.settings.workspace
    alice.bash(DEFAULT, _unseen("import os; os.mkdir('gd'); open('.git', 'w').write('gitdir: gd')"))
    try:
        later = alice.bash(DEFAULT, _unseen("open('gd/config', 'w').write('[core]\\n')"))
        _wait_for_record(running, "repository_changed", later)
    finally:
        (workspace / ".git").unlink(missing_ok=True)
        shutil.rmtree(workspace / "gd", ignore_errors=True)


def test_a_repository_the_operator_made_as_the_sandbox_account_is_held(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 130: the sandbox account owns the default workspace; a repository the
    operator made there as that account was taken for the model's, and a tenant wrote its
    hooks."""
    running, alice, _ = tenants
    workspace = running.settings.workspace
    account = pwd.getpwnam(SANDBOX_USER)
    (workspace / ".git" / "hooks").mkdir(parents=True)
    try:
        for made in (workspace / ".git", workspace / ".git" / "hooks"):
            os.chown(made, account.pw_uid, account.pw_gid)
            made.chmod(0o2775)  # the group's to write, as the default workspace's files are
        use = pb.ToolUse(id=f"toolu_{os.urandom(6).hex()}", name="Bash")
        use.input.update({"command": _unseen("open('.git/hooks/pre-commit', 'w').write('x')")})
        answer = alice.stub.Execute(
            pb.ExecuteRequest(tool_use=use), metadata=alice.metadata, timeout=120
        )
        assert "Read-only file system" in text_of(answer), text_of(answer)
        assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    finally:
        shutil.rmtree(workspace / ".git", ignore_errors=True)


def test_a_submodule_added_to_a_tenants_repository_later_is_audited(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 131: after a recorded `git init` at the shared root, a later call added a
    submodule to the index whose own configuration ran a program; bob's `git status` ran it
    as bob, and no record named the call that planted it."""
    running, alice, _ = tenants
    workspace = running.settings.workspace
    alice.bash(DEFAULT, _unseen("import subprocess; subprocess.run(['git', 'init', '-q'])"))
    try:
        planted = alice.bash(
            DEFAULT,
            _trusting_the_root(
                _unseen(
                    "import subprocess; subprocess.run(['git', 'update-index', '--add', "
                    "'--cacheinfo', '160000,' + '1' * 40 + ',sub'], check=True)"
                )
            ),
        )
        _wait_for_record(running, "repository_changed", planted)
    finally:
        shutil.rmtree(workspace / ".git", ignore_errors=True)


def test_a_root_laid_out_behind_an_empty_git_runs_nothing_of_a_tenants_and_is_audited(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 132: git skips an empty `.git` and takes the root for a bare repository
    when it is laid out as one. Behind a tenant's empty `.git`, a layout at the shared root
    whose configuration named a program ran it in every other tenant's `git status`, and only
    the empty folder's making was recorded."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    marker = workspace / "ran-as"
    alice.bash(DEFAULT, _unseen("import os; os.mkdir('.git')"))
    try:
        planted = alice.bash(
            DEFAULT,
            _unseen(
                "import os\n"
                "for d in ('objects', 'refs/heads'): os.makedirs(d)\n"
                "open('HEAD', 'w').write('ref: refs/heads/main\\n')\n"
                "open('config', 'w').write('[core]\\n\\trepositoryformatversion = 0\\n"
                "\\tbare = false\\n\\tworktree = .\\n"
                '\\tfsmonitor = "id -u >> ran-as; false"\\n\')\n'
            ),
        )
        answer = text_of(bob.bash(DEFAULT, "git status >/dev/null 2>&1; echo looked"))
        assert "looked" in answer
        assert not marker.exists(), marker.read_text()
        _wait_for_record(running, "repository_changed", planted)
    finally:
        for name in (".git", "objects", "refs"):
            shutil.rmtree(workspace / name, ignore_errors=True)
        for name in ("HEAD", "config", "ran-as"):
            (workspace / name).unlink(missing_ok=True)


def test_a_tenants_repository_runs_no_program_of_its_in_anothers_git(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker rounds 132 to 135: a repository one tenant made at the shared root, or below
    another's working folder, ran its `core.fsmonitor` program and its hooks in the other's
    `git status` and `git commit`, with no record naming the planting call when it was made
    where the look does not see (a nested repository, a `.git` swapped in and back while the
    other's call ran). In a shared workspace every sandbox's git takes neither from a
    repository: command-line scope, which a repository's configuration does not override."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    plant = (
        "import os, subprocess\n"
        "for where in ('.', 'nested'):\n"
        "    os.makedirs(where, exist_ok=True)\n"
        "    subprocess.run(['git', 'init', '-q', where], check=True)\n"
        "    mark = os.path.abspath(os.path.join(where, 'ran-' + where.strip('.') + 'x'))\n"
        "    subprocess.run(['git', '-C', where, 'config', 'core.fsmonitor',\n"
        "                    f'id -u >> {mark}; false'], check=True)\n"
        "    hook = os.path.join(where, '.git', 'hooks', 'pre-commit')\n"
        "    open(hook, 'w').write(f'#!/bin/sh\\nid -u >> {mark}\\n')\n"
        "    os.chmod(hook, 0o755)\n"
    )
    alice.bash(DEFAULT, _trusting_the_root(_unseen(plant)))
    commit = (
        "GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b "
        "git commit -q --allow-empty -m b"
    )
    try:
        for where in (".", "nested"):
            # Unasked, git refuses another tenant's repository (round 136)...
            refused = text_of(bob.bash(DEFAULT, f"(cd {where} && git status --short); echo done"))
            assert "dubious ownership" in refused, refused
            # ... and told to trust it, takes no monitor from it all the same, nor hooks (a
            # commit there is not bob's to make anyway: the repository is alice's to write).
            trusted = text_of(
                bob.bash(
                    DEFAULT,
                    _trusting_the_root(f"(cd {where} && git status --short; {commit}); true"),
                )
            )
            assert "index.lock" in trusted, trusted
        assert not list(workspace.glob("ran-*")), "a tenant's program ran in another's git"
        assert not list((workspace / "nested").glob("ran-*")), "the nested one's ran"
    finally:
        shutil.rmtree(workspace / ".git", ignore_errors=True)
        shutil.rmtree(workspace / "nested", ignore_errors=True)


def test_a_tenant_cannot_move_what_another_made_at_the_shared_root(
    tenants: tuple[RunningDaemon, Tenant, Tenant],
) -> None:
    """Attacker round 135: a tenant renamed another's `.git` at the shared root away and its own
    in, and back, while the other's `git status` ran. The shared root has the sticky bit: only
    who made an entry there (or root) renames or removes it."""
    running, alice, bob = tenants
    workspace = running.settings.workspace
    assert workspace.stat().st_mode & stat.S_ISVTX
    alice.bash(DEFAULT, "git init -q alices && echo kept > alices-notes")
    try:
        moved = text_of(
            bob.bash(
                DEFAULT,
                _unseen(
                    "import os\n"
                    "for attempt in (lambda: os.rename('alices', 'bobs'),\n"
                    "                lambda: os.rename('alices-notes', 'x'),\n"
                    "                lambda: os.unlink('alices-notes')):\n"
                    "    try:\n"
                    "        attempt()\n"
                    "    except PermissionError as exc:\n"
                    "        print(exc.strerror)\n"
                ),
            )
        )
        assert moved.count("Operation not permitted") == 3
        assert (workspace / "alices" / ".git").is_dir()
        assert (workspace / "alices-notes").read_text() == "kept\n"
        # Nor in a folder she made (round 136: umask 0022 there, so nothing of hers is bob's
        # to change, her repository's configuration included).
        inside = text_of(
            bob.bash(
                DEFAULT,
                _unseen(
                    "for path in ('alices/bobs', 'alices/.git/config'):\n"
                    "    try:\n"
                    "        open(path, 'a').write('x')\n"
                    "    except PermissionError as exc:\n"
                    "        print(exc.strerror)\n"
                ),
            )
        )
        assert inside.count("Permission denied") == 2, inside
    finally:
        shutil.rmtree(workspace / "alices", ignore_errors=True)
        (workspace / "alices-notes").unlink(missing_ok=True)
