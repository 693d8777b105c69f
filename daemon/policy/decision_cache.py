"""Verdicts the policy said may be reused: the same input document within `cache_ttl_s`.

A decision is a function of the input document and the policy's code and data, unless the policy
reads the clock or the network; so reuse is the policy's call (the decision's `cache_ttl_s`,
0 by default), bounded by the daemon's ceiling. The key is a digest of the exact document (session,
caller, mode, grants, hook results and approval included), entries expire, the least recently
used go first when full, and everything is dropped when a policy (re)load changes the revision
and whenever OPA fails to answer, a query or the daemon's look at its health four times a
second (nothing is reused until it answers again; see OpaPolicyEngine).
Documents too large to be worth hashing are never cached.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from daemon.policy.document_body import EncodedDocument
from daemon.policy.verdict import Verdict

#: Encoded documents longer than this are decided every time (a 10 MB Write is not repeated).
MAX_DOCUMENT_BYTES = 64 * 1024


@dataclasses.dataclass(frozen=True)
class _Entry:
    verdict: Verdict
    expires: float


class DecisionCache:
    """Bounded, expiring map from input documents to verdicts."""

    def __init__(
        self,
        max_entries: int,
        max_ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._max_ttl_s = max_ttl_s
        self._clock = clock
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._generation = 0
        self.hits = 0
        self.misses = 0

    @property
    def generation(self) -> int:
        """Changes at every clear: taken when a query is asked, handed to `put` with its answer."""
        return self._generation

    @property
    def enabled(self) -> bool:
        return self._max_entries > 0 and self._max_ttl_s > 0

    def key(self, document: EncodedDocument) -> bytes | None:
        """The document's cache key, or None when it is not to be cached."""
        if not self.enabled or len(document.body) > MAX_DOCUMENT_BYTES:
            return None
        return hashlib.blake2b(document.body, digest_size=32).digest()

    def get(self, key: bytes) -> Verdict | None:
        """A still valid verdict for this key, marked as reused; None otherwise."""
        entry = self._entries.get(key)
        if entry is None or entry.expires <= self._clock():
            if entry is not None:
                del self._entries[key]
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        original = entry.verdict
        # A decision id of its own, so each call's audit records stay apart from the original's.
        return dataclasses.replace(
            original, decision_id=uuid.uuid4().hex, cached_from=original.decision_id or "unknown"
        )

    def put(self, key: bytes, verdict: Verdict, asked_at: int | None = None) -> None:
        """Remember a fresh verdict for as long as it (and the ceiling) allows; not one to a
        query asked before the last clear (`asked_at`, the `generation` then): what cleared the
        cache (a reload, OPA failing) made its answer stale too (attacker round 103's lead)."""
        ttl = min(verdict.cache_ttl_s, self._max_ttl_s)
        if ttl <= 0 or (asked_at is not None and asked_at != self._generation):
            return
        self._entries[key] = _Entry(verdict, self._clock() + ttl)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything, and every answer still to come to a query asked until now."""
        self._generation += 1
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
