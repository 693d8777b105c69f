"""`tooljail tools` and `tooljail status`: what a person reads of a running daemon."""

from __future__ import annotations

import json

from google.protobuf import json_format

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.client.connection import Connection


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
