"""The managed OPA: a bad policy refuses to start with OPA's file/row/col message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from daemon.config import PROJECT_ROOT
from daemon.errors import PolicyLoadError
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa, find_opa
from sandbox.backend import SandboxLimits

pytestmark = pytest.mark.integration


async def test_bad_policy_is_refused_with_its_location(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    rego = policies / "tooljail" / "authz" / "authz.rego"
    rego.write_text(rego.read_text() + "\nbroken_rule if {\n  input.x ==\n}\n")
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), policies)
    with pytest.raises(PolicyLoadError) as failure:
        await opa.start()
    message = str(failure.value)
    assert "tooljail/authz/authz.rego:" in message
    assert "rego_parse_error" in message
    assert opa.pid is None or opa._process is None or opa._process.returncode is not None
    await opa.stop()


async def test_shipped_policy_decides_through_the_engine(tmp_path: Path) -> None:
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), PROJECT_ROOT / "policies")
    await opa.start()
    engine = OpaPolicyEngine(opa.url, 10.0, SandboxLimits(), "test")
    await engine.open()
    try:
        document = {
            "version": 1,
            "tool": {"name": "Read", "read_only": True, "destructive": False,
                     "concurrency_safe": True, "sandboxed": False},
            "input": {"file_path": "/srv/ws/a.txt"},
            "paths": [{"path": "/srv/ws/a.txt", "access": "read", "inside_workspace": True}],
            "session": {"id": "default", "workspace": "/srv/ws", "mode": "default", "grants": []},
            "caller": {"principal": "local", "transport": "unix"},
        }  # fmt: skip
        verdict = await engine.decide(document)
        assert verdict.outcome.value == "allow"
        outside = dict(document, paths=[{"path": "/etc/passwd", "access": "read",
                                         "inside_workspace": False}])  # fmt: skip
        verdict = await engine.decide(outside)
        assert verdict.outcome.value == "deny"
        assert any("/etc/passwd" in r for r in verdict.reasons)
        bot = dict(document, caller={"principal": "readonly-bot", "transport": "unix"})
        visible = await engine.visible_tools(
            {
                "version": 1,
                "tools": [
                    {
                        "name": "Read",
                        "read_only": True,
                        "destructive": False,
                        "concurrency_safe": True,
                        "sandboxed": False,
                    },
                    {
                        "name": "Bash",
                        "read_only": False,
                        "destructive": True,
                        "concurrency_safe": False,
                        "sandboxed": True,
                    },
                ],
                "session": bot["session"],
                "caller": bot["caller"],
            }
        )
        assert visible == frozenset({"Read"})
    finally:
        await engine.close()
        await opa.stop()
    assert opa._process is not None and opa._process.returncode is not None
