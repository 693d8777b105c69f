"""Policies in git: the revision follows commits, a broken reload keeps the last good policy, and
decisions keep flowing during reloads."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from tests.integration.harness import git, policy_repo, running_daemon, text_of

pytestmark = pytest.mark.integration


def test_reload_follows_git_and_refuses_broken_policies(short_tmp: Path) -> None:
    repo = policy_repo(short_tmp / "policy-repo")
    first_sha = git(repo, "rev-parse", "--short", "HEAD")
    workspace = short_tmp / "ws-reload"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    rego = repo / "policies" / "tooljail" / "authz" / "authz.rego"
    good = rego.read_text()

    with running_daemon(
        workspace,
        short_tmp / "reload.sock",
        sandbox={"enabled": False},
        opa={"policies_dir": repo / "policies"},
    ) as daemon:
        admin = pb_grpc.AdminStub(daemon.channel)
        read = daemon.execute("Read", {"file_path": str(workspace / "a.txt")})
        assert read.decision.policy_revision == first_sha

        failures: list[str] = []
        stop = threading.Event()

        def keep_calling() -> None:
            while not stop.is_set():
                answer = daemon.execute("Read", {"file_path": str(workspace / "a.txt")})
                if answer.decision.outcome != pb.ALLOW:
                    failures.append(text_of(answer))

        load = threading.Thread(target=keep_calling)
        load.start()
        try:
            rego.write_text(good + "\nbroken_rule if {\n  input.x ==\n}\n")
            refused = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
            assert not refused.reloaded
            assert "authz.rego:" in refused.error and "opa check failed" in refused.error
            assert refused.policy_revision == first_sha

            rego.write_text(good)
            (repo / "policies" / "tooljail" / "authz" / "extra_test.rego").write_text(
                "package tooljail.authz_test\n\nimport rego.v1\n\n"
                "test_always_fails if {\n\tfalse\n}\n"
            )
            failing_tests = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
            assert not failing_tests.reloaded and "opa test failed" in failing_tests.error
            (repo / "policies" / "tooljail" / "authz" / "extra_test.rego").unlink()

            (repo / "policies" / "tooljail" / "authz" / "v2.rego").write_text(
                "package tooljail.authz\n\n"
                'deny contains "forbidden.txt may not be touched (v2 policy)." if {\n'
                "\tsome p in input.paths\n"
                '\tendswith(p.path, "/forbidden.txt")\n'
                "}\n"
            )
            dirty = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
            assert dirty.reloaded and dirty.policy_revision == f"{first_sha}-dirty"
            git(repo, "add", ".")
            git(repo, "commit", "-qm", "v2")
            second_sha = git(repo, "rev-parse", "--short", "HEAD")
            committed = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
            assert committed.reloaded and committed.policy_revision == second_sha != first_sha
        finally:
            stop.set()
            load.join(60)
        assert failures == [], failures[:3]
        after = daemon.execute("Read", {"file_path": str(workspace / "a.txt")})
        assert after.decision.policy_revision == second_sha
        (workspace / "forbidden.txt").write_text("f\n")
        forbidden = daemon.execute("Read", {"file_path": str(workspace / "forbidden.txt")})
        assert forbidden.decision.outcome == pb.DENY
        assert any("(v2 policy)" in reason for reason in forbidden.decision.reasons)


def test_a_policy_whose_audit_mask_cannot_be_used_is_refused(short_tmp: Path) -> None:
    repo = policy_repo(short_tmp / "mask-repo")
    workspace = short_tmp / "ws-mask"
    workspace.mkdir()
    audit_rego = repo / "policies" / "tooljail" / "authz" / "audit.rego"
    good = audit_rego.read_text()
    with running_daemon(
        workspace,
        short_tmp / "mask.sock",
        sandbox={"enabled": False},
        opa={"policies_dir": repo / "policies"},
    ) as daemon:
        admin = pb_grpc.AdminStub(daemon.channel)
        revision = daemon.execute("LS", {"path": str(workspace)}).decision.policy_revision
        # A pattern Python cannot compile would make the audit log secrets in clear.
        audit_rego.write_text(
            good.replace("secret_patterns := {", "secret_patterns := {\n\t`(?P<x`,", 1)
        )
        refused = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
        assert not refused.reloaded and "mask_patterns" in refused.error, refused.error
        assert refused.policy_revision == revision
        # No mask at all is refused too, never read as "mask nothing".
        audit_rego.write_text(
            good.replace("mask contains field if some field in masked_fields", "")
        )
        missing = admin.ReloadPolicies(pb.ReloadPoliciesRequest(), timeout=120)
        assert not missing.reloaded and "mask" in missing.error, missing.error
        audit_rego.write_text(good)
        token = "ghp_" + "A1b2C3d4" * 4
        answer = daemon.execute("LS", {"path": str(workspace), "ignore": [f"GITHUB_TOKEN={token}"]})
        assert answer.decision.outcome == pb.ALLOW
        line = next(
            r for r in daemon.audit_lines() if r["tool_use_id"] == answer.result.tool_use_id
        )
        assert token not in json.dumps(line) and "***masked***" in json.dumps(line)
