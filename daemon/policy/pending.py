"""Asks waiting for a person: what the policy asked about, until an approver approves or denies
it, the asking caller's retry uses the approval, or the approval token expires.

An ask is known by its approval id, which is the id of the token handed to the asking caller
(the token's signed `jti`): the caller's retry with that token finds the approver's answer here,
so the approver fixes the scope and is the one recorded as having approved. The store is bounded
per principal and in total; when a principal has too many asks waiting, its oldest is dropped
(a retry with its token is then refused, asking the caller to ask again: it cannot pass for a
self-approval of an ask an approver may have denied).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from daemon.errors import NotFound, RequestError
from daemon.policy.approval import Scope

MAX_PER_PRINCIPAL = 100
MAX_TOTAL = 1_000
MAX_REVIEW_CHARS = 64 * 1024
"""A longer input is not kept for review: such an ask can be denied, not approved."""


class AskState(StrEnum):
    """Where an ask stands."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"


@dataclass(frozen=True)
class PendingAsk:
    """One call the policy asked about."""

    approval_id: str
    principal: str
    """Who made the call (and holds the token)."""
    session_id: str
    tool_use_id: str
    tool: str
    input_json: str
    """The exact input as JSON, nothing masked or cut (an approver must see what runs), with the
    characters a terminal would act on escaped; empty when longer than MAX_REVIEW_CHARS."""
    input_chars: int
    """The length of the input as JSON."""
    reasons: tuple[str, ...]
    asked_at: float
    expires_at: float
    state: AskState = AskState.PENDING
    decided_by: str = ""
    decided_at: float = 0.0
    scope: Scope = "once"
    """What the approver approved: this call once, or similar calls for the rest of the session."""
    note: str = ""
    """The approver's words (why denied, for example); shown to the model on a deny."""

    @property
    def reviewable(self) -> bool:
        """Small enough to be shown whole to an approver (and so to be approved)."""
        return bool(self.input_json)


class PendingApprovals:
    """The asks waiting for a person, by approval id."""

    def __init__(
        self,
        *,
        max_per_principal: int = MAX_PER_PRINCIPAL,
        max_total: int = MAX_TOTAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._asks: dict[str, PendingAsk] = {}
        self._dropped: dict[str, float] = {}
        """Asks dropped for room, by id, until their tokens expire: a retry with such a token
        must not pass for a self-approval (an approver may have denied it)."""
        self._max_per_principal = max_per_principal
        self._max_total = max_total
        self._clock = clock
        self._lock = threading.Lock()

    def add(self, ask: PendingAsk) -> None:
        """Remember a new ask, dropping expired ones and, beyond the bounds, the oldest: the
        asker's own, or, past the total, the oldest of whoever holds the most (askers in
        concert cannot drop a third one's asks: round 141's lead)."""
        with self._lock:
            self._drop_expired()
            mine = [a for a in self._asks.values() if a.principal == ask.principal]
            for old in mine[: max(0, len(mine) - self._max_per_principal + 1)]:
                self._drop(old)
            while len(self._asks) >= self._max_total:
                self._drop(self._oldest_of_the_most_held())
            self._asks[ask.approval_id] = ask

    def _oldest_of_the_most_held(self) -> PendingAsk:
        held = Counter(a.principal for a in self._asks.values())
        most = max(held.values())
        return next(a for a in self._asks.values() if held[a.principal] == most)

    def dropped(self, approval_id: str) -> bool:
        """Whether this ask was dropped for room before its token expired."""
        with self._lock:
            self._drop_expired()
            return approval_id in self._dropped

    def _drop(self, ask: PendingAsk) -> None:
        del self._asks[ask.approval_id]
        self._dropped[ask.approval_id] = ask.expires_at
        while len(self._dropped) > self._max_total * 10:
            del self._dropped[next(iter(self._dropped))]

    def listed(self) -> list[PendingAsk]:
        """Every ask still waiting, oldest first."""
        with self._lock:
            self._drop_expired()
            return [a for a in self._asks.values() if a.state is AskState.PENDING]

    def get(self, approval_id: str) -> PendingAsk | None:
        """The ask with this id, whatever its state (None when unknown or expired)."""
        with self._lock:
            self._drop_expired()
            return self._asks.get(approval_id)

    def decide(
        self, approval_id: str, state: AskState, by: str, *, scope: Scope = "once", note: str = ""
    ) -> PendingAsk:
        """Record an approver's answer; an ask is answered once."""
        with self._lock:
            self._drop_expired()
            ask = self._asks.get(approval_id)
            if ask is None:
                raise NotFound(
                    f"no pending approval {approval_id!r}: it was never asked, already used, or "
                    "expired; list the waiting ones with ListPendingApprovals"
                )
            if ask.state is not AskState.PENDING:
                raise RequestError(
                    f"approval {approval_id!r} was already {ask.state.value} by {ask.decided_by}"
                )
            decided = replace(
                ask, state=state, decided_by=by, decided_at=self._clock(), scope=scope, note=note
            )
            self._asks[approval_id] = decided
            return decided

    def used(self, approval_id: str) -> None:
        """The approved call ran: the ask is done."""
        with self._lock:
            self._asks.pop(approval_id, None)

    def _drop_expired(self) -> None:
        now = self._clock()
        for approval_id in [k for k, a in self._asks.items() if a.expires_at <= now]:
            del self._asks[approval_id]
        for approval_id in [k for k, at in self._dropped.items() if at <= now]:
            del self._dropped[approval_id]


def newest_per_asker(asks: list[PendingAsk], room: int) -> list[PendingAsk]:
    """At most `room` of `asks` (oldest first, and so kept), shared among their askers: every
    asker's newest, then every asker's next newest, and so on, so that no asker's many asks
    crowd another's out of a listing."""
    queues: dict[str, list[PendingAsk]] = {}
    for ask in reversed(asks):
        queues.setdefault(ask.principal, []).append(ask)
    chosen: set[str] = set()
    rank = 0
    while len(chosen) < room and any(rank < len(queue) for queue in queues.values()):
        for queue in queues.values():
            if rank < len(queue) and len(chosen) < room:
                chosen.add(queue[rank].approval_id)
        rank += 1
    return [ask for ask in asks if ask.approval_id in chosen]
