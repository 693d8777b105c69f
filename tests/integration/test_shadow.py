"""Shadow mode: a candidate policy decides beside the serving one; differences are logged, the
serving policy alone is enforced."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.config import PROJECT_ROOT
from tests.integration.harness import running_daemon, text_of

pytestmark = pytest.mark.integration


def test_candidate_policy_is_compared_not_enforced(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    candidate = short_tmp / "candidate"
    shutil.copytree(PROJECT_ROOT / "policies", candidate)
    (candidate / "tooljail" / "authz" / "candidate.rego").write_text(
        "package tooljail.authz\n\n"
        'deny contains "The candidate policy refuses notes.txt." if {\n'
        "\tsome p in input.paths\n"
        '\tendswith(p.path, "/notes.txt")\n'
        "}\n"
    )
    workspace = short_tmp / "ws-shadow"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("n\n")
    (workspace / "other.txt").write_text("o\n")
    with (
        caplog.at_level(logging.WARNING, logger="daemon.policy.shadow"),
        running_daemon(
            workspace,
            short_tmp / "shadow.sock",
            sandbox={"enabled": False},
            opa={"shadow_policies_dir": candidate},
        ) as daemon,
    ):
        served = daemon.execute("Read", {"file_path": str(workspace / "notes.txt")})
        same = daemon.execute("Read", {"file_path": str(workspace / "other.txt")})
        shadowed = daemon.daemon.shadowed
        assert shadowed is not None
        daemon._run(shadowed.drain())
        assert served.decision.outcome == pb.ALLOW and "n" in text_of(served)
        assert same.decision.outcome == pb.ALLOW
        assert shadowed.compared >= 2 and shadowed.differed == 1
    differing = [r for r in caplog.records if "decides differently" in r.getMessage()]
    assert len(differing) == 1
    assert differing[0].shadow_outcome == "deny"  # type: ignore[attr-defined]
    assert "refuses notes.txt" in " ".join(differing[0].shadow_reasons)  # type: ignore[attr-defined]
