"""Reused decisions with the real OPA: only where the shipped policy allows reuse (read-only
calls), only for the identical input, audited as reused, and never across a policy reload."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.harness import RunningDaemon, git, policy_repo, running_daemon, text_of

pytestmark = pytest.mark.integration


def _audit(daemon: RunningDaemon, tool_use_id: str) -> dict[str, object]:
    return next(r for r in daemon.audit_lines() if r["tool_use_id"] == tool_use_id)


def test_a_repeated_read_reuses_its_decision_and_says_so(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    target = workdir / "a.txt"
    target.write_text("alpha\n")
    first = host_daemon.execute("Read", {"file_path": str(target)}, tool_use_id="toolu_dc_1")
    second = host_daemon.execute("Read", {"file_path": str(target)}, tool_use_id="toolu_dc_2")
    other = host_daemon.execute(
        "Read", {"file_path": str(target), "offset": 1}, tool_use_id="toolu_dc_3"
    )
    for answer in (first, second, other):
        assert answer.decision.outcome == pb.ALLOW and "alpha" in text_of(answer)
    ids = {first.decision.decision_id, second.decision.decision_id, other.decision.decision_id}
    assert len(ids) == 3, "every call has a decision id of its own"
    assert "decision_cached_from" not in _audit(host_daemon, "toolu_dc_1")
    assert _audit(host_daemon, "toolu_dc_2")["decision_cached_from"] == first.decision.decision_id
    assert "decision_cached_from" not in _audit(host_daemon, "toolu_dc_3"), "another input"


def test_calls_that_can_change_something_are_always_decided_by_opa(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    target = workdir / "w.txt"
    for n in range(2):
        host_daemon.execute(
            "Write", {"file_path": str(target), "content": "x"}, tool_use_id=f"toolu_dcw_{n}"
        )
    for n in range(2):
        assert "decision_cached_from" not in _audit(host_daemon, f"toolu_dcw_{n}")


def test_a_reloaded_policy_decides_at_once_whatever_was_reused_before(short_tmp: Path) -> None:
    repo = policy_repo(short_tmp / "cache-policy-repo")
    workspace = short_tmp / "ws-cache-reload"
    workspace.mkdir()
    secret = workspace / "secret.txt"
    secret.write_text("classified\n")
    with running_daemon(
        workspace,
        short_tmp / "cache-reload.sock",
        sandbox={"enabled": False},
        opa={"policies_dir": repo / "policies"},
    ) as daemon:
        for _ in range(2):
            allowed = daemon.execute("Read", {"file_path": str(secret)})
            assert allowed.decision.outcome == pb.ALLOW
        assert daemon.daemon.engine is not None and len(daemon.daemon.engine.cache) >= 1
        rule = repo / "policies" / "tooljail" / "authz" / "no_secrets.rego"
        rule.write_text(
            "package tooljail.authz\n\n"
            'deny contains "secret.txt is off limits since the last policy change." if {\n'
            "\tsome p in input.paths\n"
            '\tendswith(p.path, "/secret.txt")\n'
            "}\n"
        )
        git(repo, "add", ".")
        git(repo, "commit", "-qm", "no secrets")
        reloaded = pb_grpc.AdminStub(daemon.channel).ReloadPolicies(
            pb.ReloadPoliciesRequest(), timeout=120
        )
        assert reloaded.reloaded, reloaded.error
        denied = daemon.execute("Read", {"file_path": str(secret)}, tool_use_id="toolu_dc_after")
        assert denied.decision.outcome == pb.DENY
        assert "off limits" in text_of(denied) and "classified" not in text_of(denied)
        assert "decision_cached_from" not in _audit(daemon, "toolu_dc_after")
