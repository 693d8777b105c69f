"""Whatever OPA answers, only a well-formed allow/ask/deny is taken; the rest is a deny."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.models import Outcome
from daemon.policy.verdict import parse_verdict
from daemon.tools.contract import BackgroundGrant
from sandbox.backend import GitAccess, NetworkMode, SandboxLimits

SANDBOX = {"timeout_ms": 5000, "memory_mb": 256, "cpus": 1, "pids": 64, "network": "none"}


def decision(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "outcome": "allow",
        "reasons": [],
        "sandbox": dict(SANDBOX),
        "result_budget_chars": 1234,
    }
    body.update(overrides)
    return {"result": body}


def test_allow_carries_limits_and_budget() -> None:
    verdict = parse_verdict(decision(), SandboxLimits())
    assert verdict.outcome is Outcome.ALLOW
    assert verdict.limits is not None
    assert verdict.limits.timeout_ms == 5000
    assert verdict.limits.memory_mb == 256
    assert verdict.limits.network is NetworkMode.NONE
    assert verdict.result_budget_chars == 1234


def test_cache_ttl_is_optional_and_taken_as_given() -> None:
    assert parse_verdict(decision(), SandboxLimits()).cache_ttl_s == 0
    assert parse_verdict(decision(cache_ttl_s=30), SandboxLimits()).cache_ttl_s == 30
    assert parse_verdict(decision(cache_ttl_s=0.5), SandboxLimits()).cache_ttl_s == 0.5


def test_the_turn_budget_is_optional_and_taken_as_given() -> None:
    assert parse_verdict(decision(), SandboxLimits()).turn_budget_chars is None
    assert (
        parse_verdict(decision(turn_budget_chars=9000), SandboxLimits()).turn_budget_chars == 9000
    )


def test_background_commands_are_none_unless_the_policy_grants_them() -> None:
    assert parse_verdict(decision(), SandboxLimits()).background == BackgroundGrant()
    granted = parse_verdict(
        decision(background={"shells": 3, "timeout_ms": 60000, "on_timeout": True}),
        SandboxLimits(),
    )
    assert granted.background == BackgroundGrant(shells=3, timeout_ms=60000, on_timeout=True)


def test_the_repository_is_read_only_unless_the_policy_grants_git_writes() -> None:
    writable = SandboxLimits(git=GitAccess.WRITABLE)  # what it was before: not carried over
    limits = parse_verdict(decision(), writable).limits
    assert limits is not None and limits.git is GitAccess.READ_ONLY
    granted = parse_verdict(decision(sandbox={**SANDBOX, "git": "writable"}), SandboxLimits())
    assert granted.limits is not None and granted.limits.git is GitAccess.WRITABLE


def test_undefined_decision_is_a_deny() -> None:
    verdict = parse_verdict({}, SandboxLimits())
    assert verdict.outcome is Outcome.DENY
    assert "undefined" in verdict.reasons[0]


@pytest.mark.parametrize(
    ("overrides", "where"),
    [
        ({"outcome": "permit"}, "outcome"),
        ({"outcome": True}, "outcome"),
        ({"reasons": "no"}, "reasons"),
        ({"reasons": [1]}, "reasons"),
        ({"sandbox": {**SANDBOX, "timeout_ms": "5000"}}, "sandbox.timeout_ms"),
        ({"sandbox": {**SANDBOX, "network": "host"}}, "sandbox.network"),
        ({"sandbox": {**SANDBOX, "git": "yes"}}, "sandbox.git"),
        ({"sandbox": {**SANDBOX, "git": True}}, "sandbox.git"),
        ({"sandbox": {k: v for k, v in SANDBOX.items() if k != "pids"}}, "sandbox.pids"),
        ({"result_budget_chars": -1}, "result_budget_chars"),
        ({"result_budget_chars": 1.5}, "result_budget_chars"),
        ({"turn_budget_chars": 0}, "turn_budget_chars"),
        ({"turn_budget_chars": "9"}, "turn_budget_chars"),
        ({"cache_ttl_s": -1}, "cache_ttl_s"),
        ({"cache_ttl_s": "30"}, "cache_ttl_s"),
        ({"background": {"shells": -1, "timeout_ms": 1}}, "background.shells"),
        ({"background": {"shells": 1, "timeout_ms": 0}}, "background.timeout_ms"),
        ({"background": {"shells": 1, "timeout_ms": 5, "on_timeout": 1}}, "background.on_timeout"),
        ({"background": [1]}, "background"),
    ],
)
def test_malformed_parts_are_a_deny_naming_the_part(overrides: dict[str, Any], where: str) -> None:
    verdict = parse_verdict(decision(**overrides), SandboxLimits())
    assert verdict.outcome is Outcome.DENY
    assert where in verdict.reasons[0]
    assert "malformed" in verdict.reasons[0]


def test_result_that_is_not_an_object_is_a_deny() -> None:
    assert parse_verdict({"result": "allow"}, SandboxLimits()).outcome is Outcome.DENY


def test_deny_without_reasons_gets_one() -> None:
    verdict = parse_verdict(decision(outcome="deny"), SandboxLimits())
    assert verdict.outcome is Outcome.DENY
    assert verdict.reasons


def test_every_answer_of_the_policy_has_a_decision_id_of_its_own() -> None:
    # OPA gives one only with decision logging on; without, the daemon names the decision.
    assert parse_verdict({**decision(), "decision_id": "opa-7"}, SandboxLimits()).decision_id == (
        "opa-7"
    )
    ids = {parse_verdict(answer, SandboxLimits()).decision_id for answer in (decision(), {})}
    ids |= {parse_verdict(decision(), SandboxLimits()).decision_id}
    assert len(ids) == 3
    assert "" not in ids


def test_only_a_well_formed_decision_is_the_policys() -> None:
    assert parse_verdict(decision(), SandboxLimits()).by_policy
    assert parse_verdict(decision(outcome="deny", reasons=["no"]), SandboxLimits()).by_policy
    # The daemon refuses these itself; OPA's id (when it gave one) names them all the same.
    undefined = parse_verdict({"decision_id": "opa-3"}, SandboxLimits())
    assert not undefined.by_policy and undefined.decision_id == "opa-3"
    assert not parse_verdict(decision(outcome="permit"), SandboxLimits()).by_policy
