"""Who may do what, with several principals on one daemon (real OPA): two token principals over
TCP and the Unix socket's. Sessions belong to the principal that opened them, each principal
has its own default session and remembered answers, modes are the policy's to allow, and an
ask is answered by an approver, not by the caller that triggered it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.cli import main
from daemon.config import PROJECT_ROOT
from tests.integration.harness import RunningDaemon, running_daemon, text_of
from tests.integration.test_service import free_port

pytestmark = pytest.mark.integration

TOKENS = {
    "alice": "alice-token-5b1e",
    "bob": "bob-token-77c4",
    "carol": "carol-token-0d9a",
    "dave": "dave-token-3e8f",
}


@dataclass
class Principal:
    name: str
    stub: pb_grpc.ExecutorStub
    admin: pb_grpc.AdminStub


@dataclass
class World:
    daemon: RunningDaemon
    workspace: Path
    roots: Path
    target: str
    alice: Principal
    """An approver."""
    bob: Principal
    """Needs approval for Read (ask_tools)."""
    carol: Principal
    local: Principal


def _policies(folder: Path) -> Path:
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data_path = policies / "data.json"
    data = json.loads(data_path.read_text())
    data["tooljail"]["principals"].update(
        {
            "alice": {"approver": True},
            "bob": {"ask_tools": ["Read"]},
            "carol": {"approver": True},
            "dave": {"default_session": "read_only"},
        }
    )
    data["tooljail"]["workspace_roots"] = [str(folder / "roots")]
    (folder / "roots" / "proj" / "sub").mkdir(parents=True)
    data_path.write_text(json.dumps(data))
    return policies


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = Path(tmp_path_factory.mktemp("principals"))
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("shared notes\n")
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        workspace,
        root / "p.sock",
        sandbox={"enabled": False},
        tcp={"address": target},
        auth={"tokens": TOKENS},
        opa={"policies_dir": _policies(root)},
        sessions={"max_per_principal": 4},
        # Every principal's default session in the one folder (the operator's choice), where
        # they ask about, approve and change the same files.
        workspaces={"tenant_defaults": "shared"},
    ) as daemon:
        channel = grpc.insecure_channel(target)

        def principal(name: str) -> Principal:
            # Insecure TCP with a bearer token: what a loopback listener accepts in tests.
            metadata = (("authorization", f"Bearer {TOKENS[name]}"),)

            class _Stub:
                def __init__(self, stub: object) -> None:
                    self._stub = stub

                def __getattr__(self, method: str) -> object:
                    call = getattr(self._stub, method)
                    return lambda request, **kw: call(request, metadata=metadata, **kw)

            return Principal(
                name,
                _Stub(pb_grpc.ExecutorStub(channel)),  # type: ignore[arg-type]
                _Stub(pb_grpc.AdminStub(channel)),  # type: ignore[arg-type]
            )

        local = Principal("local", daemon.stub, pb_grpc.AdminStub(daemon.channel))
        yield World(
            daemon, workspace, root / "roots", target, principal("alice"), principal("bob"),
            principal("carol"), local,
        )  # fmt: skip
        channel.close()


def _use(tool: str, tool_input: dict[str, object], tool_use_id: str) -> pb.ToolUse:
    use = pb.ToolUse(id=tool_use_id, name=tool)
    use.input.update(tool_input)
    return use


def _execute(
    who: Principal, tool: str, tool_input: dict[str, object], tool_use_id: str, **fields: object
) -> pb.ExecuteResponse:
    request = pb.ExecuteRequest(tool_use=_use(tool, tool_input, tool_use_id), **fields)  # type: ignore[arg-type]
    response: pb.ExecuteResponse = who.stub.Execute(request, timeout=60)
    return response


def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as raised:
        call()  # type: ignore[operator]
    code: grpc.StatusCode = raised.value.code()
    return code


def test_a_session_is_its_owners_alone(world: World) -> None:
    session = world.alice.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
    (Path(session.workspace) / "secret.txt").write_text("alice's\n")
    mine = _execute(world.alice, "LS", {"path": session.workspace}, "toolu_own_ls",
                    session_id=session.id)  # fmt: skip
    assert "secret.txt" in text_of(mine)

    theirs = {"session_id": session.id}
    ls = {"path": session.workspace}
    batch = pb.ExecuteBatchRequest(session_id=session.id, tool_uses=[_use("LS", ls, "toolu_b")])
    attempts = {
        "Execute": lambda: _execute(world.bob, "LS", ls, "toolu_bob_ls", **theirs),
        "ExecuteBatch": lambda: list(world.bob.stub.ExecuteBatch(batch, timeout=60)),
        "ExecuteStream": lambda: list(
            world.bob.stub.ExecuteStream(
                pb.ExecuteRequest(session_id=session.id, tool_use=_use("LS", ls, "toolu_bs")),
                timeout=60,
            )
        ),
        "ListTools": lambda: world.bob.stub.ListTools(
            pb.ListToolsRequest(session_id=session.id), timeout=60
        ),
        "CloseSession": lambda: world.bob.stub.CloseSession(
            pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=60
        ),
    }
    for name, attempt in attempts.items():
        assert _code(attempt) == grpc.StatusCode.NOT_FOUND, name
    assert (Path(session.workspace) / "secret.txt").read_text() == "alice's\n"
    # Refused exactly like an id never issued: nothing tells bob the session exists.
    with pytest.raises(grpc.RpcError) as unknown:
        _execute(world.bob, "LS", ls, "toolu_bob_nope", session_id="ses_" + "0" * 24)
    with pytest.raises(grpc.RpcError) as known:
        _execute(world.bob, "LS", ls, "toolu_bob_ls2", **theirs)
    assert known.value.details().replace(session.id, "X") == unknown.value.details().replace(
        "ses_" + "0" * 24, "X"
    )
    # The session's id says nothing about where its workspace is.
    assert session.id.removeprefix("ses_") not in session.workspace
    # An admin principal may close anyone's session.
    closed = world.local.stub.CloseSession(
        pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=60
    )
    assert closed.workspace_deleted


def test_every_principal_has_its_own_default_session(world: World) -> None:
    notes = str(world.workspace / "notes.txt")
    _execute(world.alice, "Read", {"file_path": notes}, "toolu_default_read")
    # carol never read the file in her default session: read-before-write refuses her Edit.
    edit = {"file_path": notes, "old_string": "shared", "new_string": "carol's"}
    refused = _execute(world.carol, "Edit", edit, "toolu_default_edit")
    assert refused.result.is_error and "read" in text_of(refused).lower(), text_of(refused)
    sessions = {
        r["principal"]: r["session"]
        for r in world.daemon.audit_lines()
        if r["tool_use_id"] in ("toolu_default_read", "toolu_default_edit")
    }
    assert sessions["alice"] != sessions["carol"]
    assert all(s.startswith("default-") for s in sessions.values())
    assert (world.workspace / "notes.txt").read_text() == "shared notes\n"


def test_remembered_answers_are_per_principal_and_replays_are_audited(world: World) -> None:
    ls = {"path": str(world.workspace)}
    first = _execute(world.alice, "LS", ls, "toolu_same_id")
    again = _execute(world.alice, "LS", ls, "toolu_same_id")
    assert again.report.replayed and not first.report.replayed
    other = _execute(world.carol, "LS", ls, "toolu_same_id")
    assert not other.report.replayed, "another principal's same id is another call"
    records = [
        r for r in world.daemon.audit_lines(event=None) if r.get("tool_use_id") == "toolu_same_id"
    ]
    events = sorted((r["event"], r["principal"]) for r in records)
    assert events == [("answered", "alice"), ("answered", "carol"), ("replayed", "alice")]


def test_modes_that_lift_asks_are_the_policys_to_allow(world: World) -> None:
    for mode in ("acceptEdits", "bypassPermissions"):
        assert (
            _code(
                lambda m=mode: world.bob.stub.OpenSession(pb.OpenSessionRequest(mode=m), timeout=60)
            )
            == grpc.StatusCode.PERMISSION_DENIED
        ), mode
    plan = world.bob.stub.OpenSession(pb.OpenSessionRequest(mode="plan"), timeout=60)
    assert plan.mode == "plan"
    # The Unix socket's caller (a person at the machine) may choose acceptEdits.
    accept = world.local.stub.OpenSession(pb.OpenSessionRequest(mode="acceptEdits"), timeout=60)
    assert accept.mode == "acceptEdits"
    # Even an admin's SetSessionMode goes through the policy.
    denied = _code(
        lambda: world.local.admin.SetSessionMode(
            pb.SetSessionModeRequest(session_id=accept.id, mode="bypassPermissions"), timeout=60
        )
    )
    assert denied == grpc.StatusCode.PERMISSION_DENIED
    for session in (plan, accept):
        world.local.stub.CloseSession(
            pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=60
        )


def test_an_ask_is_approved_by_another_principal_and_runs_once(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    notes = {"file_path": str(world.workspace / "notes.txt")}
    asked = _execute(world.bob, "Read", notes, "toolu_needs_ok")
    assert asked.decision.outcome == pb.ASK and "shared notes" not in text_of(asked)
    token = asked.decision.approval_token

    # bob sending his own token back is not an approval (he is a remote principal).
    self_approved = _execute(world.bob, "Read", notes, "toolu_needs_ok", approval_token=token)
    assert self_approved.decision.outcome == pb.DENY
    assert "approvals approve" in text_of(self_approved)

    listed = world.alice.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    ask = next(a for a in listed.approvals if a.tool_use_id == "toolu_needs_ok")
    assert (ask.principal, ask.tool, ask.state) == ("bob", "Read", "pending")
    assert json.loads(ask.input_json)["file_path"] == notes["file_path"] and ask.reasons
    # bob is no approver: he may neither see nor answer it.
    mine = world.bob.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    assert not mine.approvals
    answer = pb.AnswerApprovalRequest(approval_id=ask.approval_id)
    assert _code(lambda: world.bob.admin.Approve(answer, timeout=60)) == (
        grpc.StatusCode.PERMISSION_DENIED
    )

    # alice approves from the command line.
    monkeypatch.setenv("TOOLJAIL_TOKEN", TOKENS["alice"])
    code = main(["approvals", "approve", ask.approval_id, "--target", world.target])
    out = capsys.readouterr().out
    assert code == 0 and "approved" in out, out

    ran = _execute(world.bob, "Read", notes, "toolu_needs_ok", approval_token=token)
    assert ran.decision.outcome == pb.ALLOW and "shared notes" in text_of(ran)
    assert any("alice approved this call" in r for r in ran.decision.reasons)
    again = _execute(world.bob, "Read", notes, "toolu_needs_ok", approval_token=token)
    assert again.report.replayed, "the approved call ran once"

    answered = [
        r for r in world.daemon.audit_lines(event=None)
        if r.get("tool_use_id") == "toolu_needs_ok"
    ]  # fmt: skip
    ran_record = next(r for r in answered if r["event"] == "answered" and r["outcome"] == "allow")
    assert (ran_record["principal"], ran_record["approved_by"]) == ("bob", "alice")
    approval = next(r for r in answered if r["event"] == "approval_answered")
    assert (approval["approver"], approval["principal"], approval["answer"]) == (
        "alice", "bob", "approved",
    )  # fmt: skip
    assert _code(lambda: world.carol.admin.Approve(answer, timeout=60)) == (
        grpc.StatusCode.NOT_FOUND
    ), "a used approval is gone"


def test_a_denied_ask_stays_denied_with_the_approvers_note(world: World) -> None:
    notes = {"file_path": str(world.workspace / "notes.txt")}
    asked = _execute(world.bob, "Read", notes, "toolu_deny_me")
    token = asked.decision.approval_token
    listed = world.carol.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    ask = next(a for a in listed.approvals if a.tool_use_id == "toolu_deny_me")
    world.carol.admin.Deny(
        pb.AnswerApprovalRequest(approval_id=ask.approval_id, note="not during the freeze"),
        timeout=60,
    )
    retried = _execute(world.bob, "Read", notes, "toolu_deny_me", approval_token=token)
    assert retried.decision.outcome == pb.DENY
    assert "carol denied this call: not during the freeze" in text_of(retried)
    # A second answer is refused: an ask is answered once.
    again = pb.AnswerApprovalRequest(approval_id=ask.approval_id)
    assert _code(lambda: world.alice.admin.Approve(again, timeout=60)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )


def test_the_approver_fixes_the_scope(world: World) -> None:
    notes = {"file_path": str(world.workspace / "notes.txt")}
    asked = _execute(world.bob, "Read", notes, "toolu_scope")
    token = asked.decision.approval_token
    listed = world.alice.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    ask = next(a for a in listed.approvals if a.tool_use_id == "toolu_scope")
    world.alice.admin.Approve(pb.AnswerApprovalRequest(approval_id=ask.approval_id), timeout=60)
    widened = _execute(
        world.bob, "Read", notes, "toolu_scope", approval_token=token, approval_scope="session"
    )
    assert widened.decision.outcome == pb.DENY
    assert "approved this call with scope 'once'" in text_of(widened)
    ran = _execute(world.bob, "Read", notes, "toolu_scope", approval_token=token)
    assert ran.decision.outcome == pb.ALLOW
    # Once means once: the next Read asks again.
    next_read = _execute(world.bob, "Read", notes, "toolu_scope_next")
    assert next_read.decision.outcome == pb.ASK


def _status(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as raised:
        call()  # type: ignore[operator]
    return raised.value.code(), raised.value.details() or ""


def test_opening_a_workspace_outside_the_roots_touches_nothing_on_disk(world: World) -> None:
    """The policy's answer comes before the daemon (root) looks at the path: nobody can learn
    what exists where, or where a link leads."""
    answers = {
        path: _status(
            lambda p=path: world.bob.stub.OpenSession(
                pb.OpenSessionRequest(workspace=p), timeout=60
            )
        )
        for path in ("/root/.ssh", "/no/such/folder", "/etc/shadow", "/proc/self/cwd")
    }
    for path, (code, details) in answers.items():
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "not inside the allowed workspace roots" in details, details
        assert "real path" not in details and "exist" not in details, details
        assert details.replace(path, "P") == answers["/no/such/folder"][1].replace(
            "/no/such/folder", "P"
        )


def test_overlaps_with_another_principals_session_do_not_name_it(world: World) -> None:
    sub = world.bob.stub.OpenSession(
        pb.OpenSessionRequest(workspace=str(world.roots / "proj" / "sub")), timeout=60
    )
    try:
        code, details = _status(
            lambda: world.alice.stub.OpenSession(
                pb.OpenSessionRequest(workspace=str(world.roots / "proj")), timeout=60
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "overlaps" in details, details
        assert sub.id not in details and "proj/sub" not in details, details
    finally:
        world.bob.stub.CloseSession(pb.CloseSessionRequest(session_id=sub.id), timeout=60)


def test_open_sessions_are_bounded_per_principal(world: World) -> None:
    opened = [world.carol.stub.OpenSession(pb.OpenSessionRequest(), timeout=60) for _ in range(4)]
    try:
        code, details = _status(
            lambda: world.carol.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        )
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "4 sessions open" in details, details
        other = world.alice.stub.OpenSession(pb.OpenSessionRequest(), timeout=60)
        world.alice.stub.CloseSession(
            pb.CloseSessionRequest(session_id=other.id, delete_workspace=True), timeout=60
        )
        code, details = _status(
            lambda: world.alice.stub.OpenSession(
                pb.OpenSessionRequest(idle_ttl_s=10**9), timeout=60
            )
        )
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "idle_ttl_s" in details, details
    finally:
        for session in opened:
            world.carol.stub.CloseSession(
                pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=60
            )


def test_an_approver_sees_exactly_what_would_run(world: World) -> None:
    """Attack: a secret-looking assignment glued to a payload hid the payload from the approver
    (and terminal escapes in the input could paint over what the approver reads)."""
    tricky = {"file_path": f"{world.workspace}/CI_TOKEN=x;>important.txt;echo \x1b[1A\u202e"}
    asked = _execute(world.bob, "Read", tricky, "toolu_tricky")
    assert asked.decision.outcome == pb.ASK
    listed = world.alice.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    ask = next(a for a in listed.approvals if a.tool_use_id == "toolu_tricky")
    assert "CI_TOKEN=x;>important.txt;echo " in ask.input_json
    assert "\x1b" not in ask.input_json and "\u202e" not in ask.input_json
    assert json.loads(ask.input_json)["file_path"] == tricky["file_path"], "escapes keep it exact"
    world.alice.admin.Deny(pb.AnswerApprovalRequest(approval_id=ask.approval_id), timeout=60)


def test_terminal_escapes_in_reasons_are_escaped_for_the_approver(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    escape = "\x1b[1A\x1b[2K"
    asked = _execute(
        world.bob, "Read", {"file_path": str(world.workspace / "notes.txt")}, f"toolu_e{escape}"
    )
    assert asked.decision.outcome == pb.ASK
    listed = world.alice.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    ask = next(a for a in listed.approvals if a.tool_use_id.startswith("toolu_e"))
    assert "\x1b" not in ask.tool_use_id and "\\u001b" in ask.tool_use_id
    monkeypatch.setenv("TOOLJAIL_TOKEN", TOKENS["alice"])
    assert main(["approvals", "--target", world.target]) == 0
    assert "\x1b" not in capsys.readouterr().out
    world.alice.admin.Deny(pb.AnswerApprovalRequest(approval_id=ask.approval_id), timeout=60)


def test_whoever_may_not_answer_an_ask_learns_nothing_about_it(world: World) -> None:
    asked = _execute(world.bob, "Read", {"file_path": str(world.workspace)}, "toolu_secret_ask")
    assert asked.decision.outcome == pb.ASK
    listed = world.alice.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    ask = next(a for a in listed.approvals if a.tool_use_id == "toolu_secret_ask")
    world.alice.admin.Deny(pb.AnswerApprovalRequest(approval_id=ask.approval_id), timeout=60)
    # bob is no approver: the answered ask is refused to him without saying who answered it.
    code, details = _status(
        lambda: world.bob.admin.Approve(
            pb.AnswerApprovalRequest(approval_id=ask.approval_id), timeout=60
        )
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED and "alice" not in details, details


def test_listing_asks_the_policy_once_per_asker_and_tool(world: World) -> None:
    for n in range(30):
        _execute(world.bob, "Read", {"file_path": str(world.workspace)}, f"toolu_many_{n}")
    engine = world.daemon.daemon._policy.decider  # type: ignore[union-attr]
    asked: list[str] = []
    original = engine.admit

    async def counting(rule: str, document: dict[str, object]) -> object:
        asked.append(rule)
        return await original(rule, document)

    engine.admit = counting
    try:
        world.carol.admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=60)
    finally:
        del engine.admit
    assert 1 <= asked.count("approve") <= 3, asked


def test_a_closed_fresh_workspace_is_no_other_principals_to_open(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Attacker round 78: with the policy's workspace roots holding the sessions root, alice
    closed her fresh session without deleting it, and bob opened a session over its folder and
    read her files. Nobody may open a session in the sessions root (or the state directory)."""
    root = Path(tmp_path_factory.mktemp("fresh"))
    (root / "ws").mkdir()
    target = f"127.0.0.1:{free_port()}"
    with running_daemon(
        root / "ws",
        root / "f.sock",
        sandbox={"enabled": False},
        tcp={"address": target},
        auth={"tokens": TOKENS},
        opa={"policies_dir": _policies(root)},
        sessions_root=root / "roots" / "sessions",
        # Plain folders: a budget's filesystem would stay mounted on the sessions root, out of
        # the state directory the test session unmounts below.
        workspaces={"budget_mb": 0},
    ):
        channel = grpc.insecure_channel(target)
        try:
            stub = pb_grpc.ExecutorStub(channel)
            as_alice = (("authorization", f"Bearer {TOKENS['alice']}"),)
            as_bob = (("authorization", f"Bearer {TOKENS['bob']}"),)
            opened = stub.OpenSession(pb.OpenSessionRequest(), metadata=as_alice, timeout=60)
            folder = Path(opened.workspace)
            assert folder.parent == (root / "roots" / "sessions").resolve()
            (folder / "secret.txt").write_text("alice's\n")
            close = pb.CloseSessionRequest(session_id=opened.id, delete_workspace=False)
            stub.CloseSession(close, metadata=as_alice, timeout=60)
            for asked in (folder, folder.parent):
                request = pb.OpenSessionRequest(workspace=str(asked))
                with pytest.raises(grpc.RpcError) as refused:
                    stub.OpenSession(request, metadata=as_bob, timeout=60)
                assert "the daemon's own" in str(refused.value.details()), refused.value
        finally:
            channel.close()


def test_a_principal_kept_out_of_the_shared_default_folder_changes_files_in_its_own_session(
    world: World,
) -> None:
    """Attacker round 99: every principal's default session works in one shared folder with no
    disk budget; a tenant filled the host's disk there and deleted another tenant's files. The
    policy can keep a principal to reading there (`default_session: "read_only"`)."""
    channel = grpc.insecure_channel(world.target)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        as_dave = (("authorization", f"Bearer {TOKENS['dave']}"),)

        def write(tool_use_id: str, session_id: str = "") -> pb.ExecuteResponse:
            use = _use("Write", {"file_path": path, "content": "dave's\n"}, tool_use_id)
            request = pb.ExecuteRequest(tool_use=use, session_id=session_id)
            response: pb.ExecuteResponse = stub.Execute(request, metadata=as_dave, timeout=60)
            return response

        path = str(world.workspace / "dave.txt")
        refused = write("toolu_dave_default")
        assert refused.decision.outcome == pb.DENY, text_of(refused)
        assert "session of its own" in text_of(refused)
        read = _use("Read", {"file_path": str(world.workspace / "notes.txt")}, "toolu_dave_read")
        answer = stub.Execute(pb.ExecuteRequest(tool_use=read), metadata=as_dave, timeout=60)
        assert answer.decision.outcome == pb.ALLOW and "shared notes" in text_of(answer)
        own = stub.OpenSession(pb.OpenSessionRequest(), metadata=as_dave, timeout=60)
        path = str(Path(own.workspace) / "dave.txt")
        assert write("toolu_dave_own", own.id).decision.outcome == pb.ALLOW
        stub.CloseSession(
            pb.CloseSessionRequest(session_id=own.id, delete_workspace=True),
            metadata=as_dave,
            timeout=60,
        )
    finally:
        channel.close()
