"""The core over a real gRPC channel with the real OPA deciding: tools, reads, refusals, budgets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import grpc
import pytest
from anthropic.types import ToolParam, ToolResultBlockParam
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import TypeAdapter

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = pytest.mark.integration

READ_ONLY = {"Read", "Glob", "Grep", "LS"}
SANDBOXED = {"Write", "Edit", "MultiEdit", "NotebookEdit", "Bash", "BashOutput", "KillShell"}


def test_without_a_sandbox_only_what_can_run_is_offered(host_daemon: RunningDaemon) -> None:
    names = {t.name for t in host_daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30).tools}
    # Nothing is deferred here, so ToolSearch would find nothing: it is not offered either.
    assert names == READ_ONLY


@pytest.mark.docker
def test_list_tools_gives_valid_anthropic_definitions(sandbox_daemon: RunningDaemon) -> None:
    response = sandbox_daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30)
    names = [t.name for t in response.tools]
    assert set(names) == READ_ONLY | SANDBOXED
    as_json = json.loads(response.tools_json)
    adapter = TypeAdapter(ToolParam)
    for tool, proto in zip(as_json, response.tools, strict=True):
        adapter.validate_python(tool)
        # strict where the whole schema is in strict mode's subset (Write's is; Bash's is not).
        assert set(tool) - {"strict"} == {"name", "description", "input_schema"}
        assert tool.get("strict", True) is True
        assert tool["name"] == proto.name and tool["description"] == proto.description
        assert tool["input_schema"]["type"] == "object"
        assert tool["input_schema"]["additionalProperties"] is False
        # The protobuf Struct holds the same schema (numbers come back as floats there).
        from google.protobuf import json_format

        assert json.loads(json.dumps(json_format.MessageToDict(proto.input_schema))) == json.loads(
            json.dumps(tool["input_schema"]), parse_int=float
        )
    strict = {tool["name"] for tool in as_json if tool.get("strict")}
    assert "Write" in strict and "Bash" not in strict
    traits = {t.name: t.traits for t in response.tools}
    assert traits["Read"].read_only and traits["Read"].concurrency_safe
    assert not traits["Read"].sandboxed
    assert traits["Bash"].sandboxed and traits["Bash"].destructive
    assert traits["Bash"].max_result_chars == 30_000
    assert traits["Grep"].max_result_chars == 20_000


def test_read_with_offset_and_limit_numbers_lines_like_cat_n(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    target = workdir / "lines.txt"
    target.write_text("".join(f"line {i}\n" for i in range(1, 21)))
    response = host_daemon.execute(
        "Read", {"file_path": str(target), "offset": 5, "limit": 3}, tool_use_id="toolu_lines"
    )
    assert not response.result.is_error, text_of(response)
    assert response.decision.outcome == pb.ALLOW
    assert text_of(response).startswith("     5\tline 5\n     6\tline 6\n     7\tline 7")
    assert "line 8" not in text_of(response)
    envelope = json.loads(response.tool_result_json)
    TypeAdapter(ToolResultBlockParam).validate_python(envelope)
    assert envelope == {
        "type": "tool_result",
        "tool_use_id": "toolu_lines",
        "content": [{"type": "text", "text": text_of(response)}],
        "is_error": False,
    }


@pytest.mark.parametrize(
    ("make_path", "expected"),
    [
        (lambda d: str(d), "directory"),
        (lambda d: "/dev/zero", "outside the workspace"),
        (lambda d: "/etc/passwd", "outside the workspace"),
        (lambda d: str(d / ".." / ".." / ".." / "etc" / "passwd"), "outside the workspace"),
        (lambda d: str(d / "escape"), "outside the workspace"),
        (lambda d: "relative.txt", "absolute"),
        (lambda d: str(d / "missing.txt"), "does not exist"),
    ],
    ids=["directory", "device", "absolute-outside", "dotdot", "symlink-out", "relative", "missing"],
)
def test_read_refusals_are_clear_error_results(
    host_daemon: RunningDaemon, workdir: Path, make_path: object, expected: str
) -> None:
    (workdir / "escape").symlink_to("/etc/hostname")
    path = make_path(workdir)  # type: ignore[operator]
    response = host_daemon.execute("Read", {"file_path": path})
    assert response.result.is_error
    assert expected in text_of(response), text_of(response)
    TypeAdapter(ToolResultBlockParam).validate_python(json.loads(response.tool_result_json))


def test_outside_paths_are_denied_by_the_policy_with_a_reason(
    host_daemon: RunningDaemon,
) -> None:
    response = host_daemon.execute("Read", {"file_path": "/etc/passwd"})
    assert response.decision.outcome == pb.DENY
    assert any("/etc/passwd" in reason for reason in response.decision.reasons)
    assert response.decision.policy_revision
    assert "root:" not in text_of(response)


def test_glob_and_grep_on_a_generated_tree(host_daemon: RunningDaemon, workdir: Path) -> None:
    for i in range(30):
        sub = workdir / f"pkg{i % 3}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_text(f"def f{i}():\n    return {i}\n# marker {i % 5}\n")
        (sub / f"notes{i}.txt").write_text("nothing here\n")
    globbed = host_daemon.execute("Glob", {"pattern": "**/*.py", "path": str(workdir)})
    assert not globbed.result.is_error, text_of(globbed)
    assert len(text_of(globbed).splitlines()) == 30
    files = host_daemon.execute("Grep", {"pattern": "marker 3", "path": str(workdir)})
    assert sorted(Path(p).name for p in text_of(files).split() if p.endswith(".py")) == sorted(
        f"mod{i}.py" for i in range(30) if i % 5 == 3
    )
    content = host_daemon.execute(
        "Grep", {"pattern": "return 7$", "path": str(workdir), "output_mode": "content"}
    )
    assert "return 7" in text_of(content) and "mod7.py" in text_of(content)
    count = host_daemon.execute(
        "Grep", {"pattern": "def ", "path": str(workdir), "output_mode": "count"}
    )
    assert not count.result.is_error and "30" in text_of(count)
    limited = host_daemon.execute(
        "Grep", {"pattern": "def", "path": str(workdir), "output_mode": "content", "head_limit": 4}
    )
    assert len([line for line in text_of(limited).splitlines() if "def f" in line]) == 4


def test_unknown_tool_and_invalid_input_are_error_results(host_daemon: RunningDaemon) -> None:
    unknown = host_daemon.execute("Teleport", {"to": "mars"})
    assert unknown.result.is_error and "Unknown tool 'Teleport'" in text_of(unknown)
    assert unknown.decision.outcome == pb.OUTCOME_UNSPECIFIED
    invalid = host_daemon.execute("Read", {"file_path": 42, "limit": -1, "colour": 1})
    text = text_of(invalid)
    assert invalid.result.is_error
    assert "`file_path`" in text and "`limit`" in text and "`colour`: unexpected field" in text


def test_long_read_stops_on_a_whole_line_and_says_where_to_go_on(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    big = workdir / "big.txt"
    big.write_text("".join(f"row {i:06d} " + "x" * 60 + "\n" for i in range(1, 1_001)))
    response = host_daemon.execute("Read", {"file_path": str(big)})
    text = text_of(response)
    assert not response.result.is_error
    assert len(text) <= 50_000
    assert text.startswith("     1\trow 000001")
    assert "offset=" in text.splitlines()[-1]


def test_read_over_a_lower_budget_is_cut_with_head_and_tail(short_tmp: Path) -> None:
    workspace = short_tmp / "ws-budget"
    workspace.mkdir()
    big = workspace / "big.txt"
    big.write_text("".join(f"row {i:06d} " + "x" * 60 + "\n" for i in range(1, 201)))
    with running_daemon(
        workspace, short_tmp / "budget.sock", sandbox={"enabled": False}, result_budget_chars=5_000
    ) as daemon:
        response = daemon.execute("Read", {"file_path": str(big)})
    text = text_of(response)
    assert not response.result.is_error
    assert response.report.truncated and response.report.original_chars > 5_000
    assert len(text) <= 5_000
    assert text.startswith("     1\trow 000001")
    assert text.rstrip("\n").endswith("row 000200 " + "x" * 60)
    assert "cut here" in text


def test_grep_over_budget_is_cut_to_its_own_budget(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    (workdir / "many.txt").write_text(
        "".join(f"needle {i} " + "y" * 80 + "\n" for i in range(3000))
    )
    response = host_daemon.execute(
        "Grep",
        {"pattern": "needle", "path": str(workdir), "output_mode": "content", "head_limit": 0},
    )
    assert response.report.truncated
    assert len(text_of(response)) <= 20_000
    assert "needle 0 " in text_of(response) and "needle 2999 " in text_of(response)


def test_malformed_requests_get_grpc_statuses(host_daemon: RunningDaemon) -> None:
    with pytest.raises(grpc.RpcError) as missing:
        host_daemon.stub.Execute(pb.ExecuteRequest(), timeout=30)
    assert missing.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tool_use" in missing.value.details()
    with pytest.raises(grpc.RpcError) as no_id:
        host_daemon.stub.Execute(pb.ExecuteRequest(tool_use=pb.ToolUse(name="Read")), timeout=30)
    assert no_id.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    huge = pb.ToolUse(id="toolu_big", name="Read")
    huge.input.update({"file_path": "x" * (17 << 20)})
    with pytest.raises(grpc.RpcError) as too_large:
        host_daemon.stub.Execute(pb.ExecuteRequest(tool_use=huge), timeout=30)
    assert too_large.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    uses = [pb.ToolUse(id=f"toolu_{n}", name="LS") for n in range(101)]
    with pytest.raises(grpc.RpcError) as too_many:
        list(host_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses), timeout=30))
    assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "101 tool_use blocks" in (too_many.value.details() or "")


def test_batch_answers_in_request_order(host_daemon: RunningDaemon, workdir: Path) -> None:
    (workdir / "a.txt").write_text("alpha\n")
    uses = []
    for i, (name, tool_input) in enumerate(
        [
            ("Read", {"file_path": str(workdir / "a.txt")}),
            ("Nope", {}),
            ("LS", {"path": str(workdir)}),
        ]
    ):
        use = pb.ToolUse(id=f"toolu_{i}", name=name)
        use.input.update(tool_input)
        uses.append(use)
    responses = list(host_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    assert [r.result.tool_use_id for r in responses] == ["toolu_0", "toolu_1", "toolu_2"]
    assert "alpha" in text_of(responses[0])
    assert responses[1].result.is_error
    assert "a.txt" in text_of(responses[2])


def test_health_and_reflection(host_daemon: RunningDaemon) -> None:
    health = health_pb2_grpc.HealthStub(host_daemon.channel)
    for service in ("", "tooljail.v1.Executor"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_every_call_is_audited(host_daemon: RunningDaemon, workdir: Path) -> None:
    host_daemon.execute("Read", {"file_path": "/etc/shadow"}, tool_use_id="toolu_audited")
    records = [r for r in host_daemon.audit_lines() if r["tool_use_id"] == "toolu_audited"]
    assert len(records) == 1
    assert records[0]["outcome"] == "deny" and records[0]["tool"] == "Read"
    assert os.path.basename(records[0]["input_sha256"]) and len(records[0]["input_sha256"]) == 64
