"""`tooljail tools` and `tooljail status`: what a person reads of a running daemon."""

from __future__ import annotations

import json
import time

from google.protobuf import json_format
from tooljail.wire import pb, pb_grpc

from daemon.client.connection import Connection
from daemon.text import printable


def print_tools(connection: Connection, session: str, timeout: float, as_json: bool) -> int:
    """The tools this caller may see: one line each, or the Anthropic `tools` JSON."""
    with connection.channel() as channel:
        response = pb_grpc.ExecutorStub(channel).ListTools(
            pb.ListToolsRequest(session_id=session), timeout=timeout
        )
    if as_json:
        print(json.dumps(json.loads(response.tools_json), indent=2))
        return 0
    for tool in response.tools:
        kind = (
            "read-only" if tool.traits.read_only else "sandboxed" if tool.traits.sandboxed else ""
        )
        first_line = tool.description.strip().splitlines()[0] if tool.description else ""
        print(f"{tool.name:<10} {kind:<10} {first_line}")
    return 0


def print_status(connection: Connection, timeout: float, as_json: bool) -> int:
    """A short health summary; exit 1 when the policy engine is down."""
    with connection.channel() as channel:
        status = pb_grpc.AdminStub(channel).Status(pb.StatusRequest(), timeout=timeout)
    if as_json:
        print(
            json_format.MessageToJson(status, indent=2, always_print_fields_with_no_presence=True)
        )
        return 0
    health = {True: "healthy", False: "DOWN"}
    print(f"tooljail {status.version} (instance {status.instance_id}), you are {status.principal}")
    print(f"policy    revision {status.policy_revision}, OPA {health[status.opa_healthy]}")
    print(f"sandbox   Docker {health[status.docker_healthy]}, {status.pool_ready} warm containers")
    print(f"calls     {status.in_flight} in flight, {status.sessions} sessions")
    return 0 if status.opa_healthy else 1


def approvals(
    connection: Connection,
    timeout: float,
    as_json: bool,
    action: str,
    approval_id: str = "",
    scope: str = "",
    note: str = "",
) -> int:
    """`tooljail approvals [list | approve ID | deny ID]`: what waits for this caller's answer,
    or answer one."""
    with connection.channel() as channel:
        admin = pb_grpc.AdminStub(channel)
        if action == "list":
            listed = admin.ListPendingApprovals(pb.ListPendingApprovalsRequest(), timeout=timeout)
            if as_json:
                print(json_format.MessageToJson(listed, indent=2))
                return 0
            if not listed.approvals:
                print("nothing waits for your approval")
            for ask in listed.approvals:
                _print_ask(ask)
            return 0
        request = pb.AnswerApprovalRequest(approval_id=approval_id, scope=scope, note=note)
        answer = admin.Approve if action == "approve" else admin.Deny
        answered = answer(request, timeout=timeout)
    if as_json:
        print(json_format.MessageToJson(answered, indent=2))
    else:
        print(
            printable(
                f"{answered.state} {answered.approval_id} ({answered.tool} of "
                f"{answered.principal}, scope {answered.scope}); the caller's retry with its "
                f"token now {'runs' if answered.state == 'approved' else 'is denied'}"
            )
        )
    return 0


def _print_ask(ask: pb.PendingApproval) -> None:
    # Escaped again here: this terminal must not act on what an asker wrote, whatever the daemon.
    asked = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ask.asked_at))
    head = f"{ask.approval_id}  {ask.tool} by {ask.principal}, session {ask.session_id}"
    print(printable(f"{head}, asked {asked}"))
    if ask.input_json:
        print(f"    input: {printable(ask.input_json)}")
    else:
        print(f"    input: {ask.input_chars} characters, too large to review here: deny it")
    for reason in ask.reasons:
        print(f"    why:   {printable(reason)}")
