"""DecisionCache: reuse only what the policy allowed, for as long as it allowed, bounded."""

from __future__ import annotations

from typing import Any

from daemon.models import Outcome
from daemon.policy.decision_cache import MAX_DOCUMENT_BYTES, DecisionCache
from daemon.policy.document_body import EncodedDocument, encode_document
from daemon.policy.verdict import Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def verdict(ttl: float, decision_id: str = "opa-1") -> Verdict:
    return Verdict(Outcome.ALLOW, ("ok",), None, 50_000, decision_id, cache_ttl_s=ttl)


def plain(path: str = "/ws/a.txt", **session: Any) -> dict[str, Any]:
    return {
        "tool": {"name": "Read", "read_only": True},
        "input": {"file_path": path},
        "session": {"id": "s1", "mode": "default", "grants": [], **session},
        "caller": {"principal": "alice"},
    }


def document(path: str = "/ws/a.txt", **session: Any) -> EncodedDocument:
    return encode_document(plain(path, **session))


def test_an_identical_document_gets_the_verdict_back_marked_as_reused() -> None:
    cache = DecisionCache(16, 60, Clock())
    key = cache.key(document())
    assert key is not None
    assert cache.get(key) is None
    cache.put(key, verdict(30))
    again = cache.key(document())
    assert again == key
    reused = cache.get(again)
    assert reused is not None
    assert reused.outcome is Outcome.ALLOW and reused.reasons == ("ok",)
    assert reused.cached_from == "opa-1"
    assert reused.decision_id not in ("", "opa-1")
    assert (cache.hits, cache.misses) == (1, 1)


def test_any_difference_in_the_document_is_another_key() -> None:
    cache = DecisionCache(16, 60, Clock())
    base = cache.key(document())
    others = [
        cache.key(document("/ws/b.txt")),
        cache.key(document(mode="plan")),
        cache.key(document(grants=[{"tool": "Bash"}])),
        cache.key(encode_document({**plain(), "caller": {"principal": "bob"}})),
        cache.key(encode_document({**plain(), "hooks": [{"decision": "allow"}]})),
    ]
    assert base not in others and len(set(others)) == len(others)


def test_a_verdict_without_a_ttl_is_not_kept() -> None:
    cache = DecisionCache(16, 60, Clock())
    key = cache.key(document())
    assert key is not None
    cache.put(key, verdict(0))
    assert cache.get(key) is None and len(cache) == 0


def test_verdicts_expire_after_their_ttl_capped_by_the_ceiling() -> None:
    clock = Clock()
    cache = DecisionCache(16, max_ttl_s=10, clock=clock)
    key = cache.key(document())
    assert key is not None
    cache.put(key, verdict(30))
    clock.now += 9.9
    assert cache.get(key) is not None
    clock.now += 0.2  # past the daemon's 10 s ceiling, although the policy said 30
    assert cache.get(key) is None and len(cache) == 0


def test_the_least_recently_used_go_first_when_full() -> None:
    cache = DecisionCache(2, 60, Clock())
    keys = [cache.key(document(f"/ws/{n}")) for n in range(3)]
    assert all(k is not None for k in keys)
    first, second, third = (k for k in keys if k is not None)
    cache.put(first, verdict(30, "one"))
    cache.put(second, verdict(30, "two"))
    assert cache.get(first) is not None  # now the most recently used
    cache.put(third, verdict(30, "three"))
    assert cache.get(second) is None
    assert cache.get(first) is not None and cache.get(third) is not None
    assert len(cache) == 2


def test_large_documents_and_a_disabled_cache_are_never_keyed() -> None:
    cache = DecisionCache(16, 60, Clock())
    assert cache.key(document("x" * MAX_DOCUMENT_BYTES)) is None
    assert DecisionCache(0, 60).key(document()) is None
    assert DecisionCache(16, 0).key(document()) is None


def test_clear_forgets_everything() -> None:
    cache = DecisionCache(16, 60, Clock())
    key = cache.key(document())
    assert key is not None
    cache.put(key, verdict(30))
    cache.clear()
    assert cache.get(key) is None
