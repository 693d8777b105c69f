"""PolicyReloader around the upload of a new policy, with OPA and its checks faked (the real ones:
tests/integration/test_policy_reload.py and test_decision_cache.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.models import Outcome
from daemon.policy import reloader
from daemon.policy.decision_cache import DecisionCache
from daemon.policy.document_body import encode_document
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.reloader import PolicyReloader
from daemon.policy.verdict import Verdict
from sandbox.backend import SandboxLimits


class UploadingOpa:
    """Records how many reused decisions the engine still held when the upload began."""

    def __init__(self, engine: OpaPolicyEngine) -> None:
        self.engine = engine
        self.held_at_upload: list[int] = []

    async def reload(self) -> None:
        self.held_at_upload.append(len(self.engine.cache))


async def test_reused_decisions_are_forgotten_before_the_new_policy_is_uploaded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Attacker round 104's lead: the cache was emptied only after the upload and the revision's
    look in git, so for those milliseconds the new policy served in OPA while calls were still
    allowed by what the old one had decided."""
    engine = OpaPolicyEngine(
        "http://127.0.0.1:9", 0.1, SandboxLimits(), "old", cache=DecisionCache(10, 60)
    )
    key = engine.cache.key(encode_document({"input": {"file_path": "a"}}))
    assert key is not None
    engine.cache.put(key, Verdict(Outcome.ALLOW, (), SandboxLimits(), None, "d1", cache_ttl_s=30))
    opa = UploadingOpa(engine)

    async def checked(*_: Any) -> str:
        return ""

    async def revision(*_: Any) -> str:
        return "new"

    async def loaded(revision: str) -> None:
        engine._revision = revision

    monkeypatch.setattr(reloader, "check_policy_folder", checked)
    monkeypatch.setattr(reloader, "policy_revision", revision)
    monkeypatch.setattr(engine, "policy_loaded", loaded)
    result = await PolicyReloader(opa, engine, Path("opa"), tmp_path).reload()  # type: ignore[arg-type]
    assert result.reloaded and result.revision == "new"
    assert opa.held_at_upload == [0]
