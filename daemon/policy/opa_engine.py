"""OPA as the policy engine: one decision query per call, short timeout, no retries, fail closed.

A query may take the configured timeout plus the time OPA takes to read the document at a
conservative rate: a 14 MB Write's document is read in about 0.2 s, so a fixed half-second
timeout would deny large calls whenever the host is busy, while small ones keep a tight bound.
OPA is asked about one large document at a time (the others wait, within their own time
limit): a policy may spend seconds on one (a 4 MB Bash command split into words took 6 CPU
seconds), and several at once would leave OPA no time for every other caller's small ones.

Decisions the policy lets the daemon reuse (DecisionCache) are reused only while OPA is seen to
answer: every failure empties the cache, a health look between queries finds an OPA that stopped
though no query failed, and an answer to a query asked before the cache was emptied is not kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from daemon.policy.decision_cache import DecisionCache
from daemon.policy.document_body import EncodedDocument, LargeDocument, encoded
from daemon.policy.egress_verdict import EgressVerdict, parse_egress
from daemon.policy.engine import Admission, PolicyEngine
from daemon.policy.large_inputs import LargeInputTurns
from daemon.policy.mask import AuditMask, MaskError
from daemon.policy.opa_client import client_for
from daemon.policy.verdict import Verdict, parse_admission, parse_verdict
from sandbox.backend import SandboxLimits

log = logging.getLogger(__name__)

PACKAGE = "tooljail.authz"
OPA_READS_BYTES_PER_S = 8_000_000
"""The slowest rate OPA is expected to read a policy document at: measured 45–85 MB/s on a
2-core machine for 1 to 44 MB documents; a busy host reads several times slower."""
LARGE_DOCUMENT_BYTES = 64 * 1024
"""Documents from this size on are sent to OPA one at a time."""
HEALTH_WATCH_S = 0.25
"""How often OPA's health is looked at between queries: an OPA that stopped answering is noticed
(and nothing it decided is reused) within this and STALLED_LOOK_S, even if no query fails."""
STALLED_LOOK_S = 0.1
"""A health look unanswered for this long stops reuse until it is answered: OPA answers one in
about a millisecond, and waiting out the query timeout let 1.4 s of calls through (round 103)."""


class OpaPolicyEngine(PolicyEngine):
    """Queries data.tooljail.authz.decision and .visible_tools on an OPA server."""

    def __init__(
        self,
        url: str,
        timeout_s: float,
        base_limits: SandboxLimits,
        revision: str,
        on_error: Callable[[], None] | None = None,
        loading: Callable[[], bool] | None = None,
        cache: DecisionCache | None = None,
        token: str | None = None,
    ) -> None:
        self.cache = cache if cache is not None else DecisionCache(max_entries=0, max_ttl_s=0)
        self._on_error = on_error or (lambda: None)
        self._loading = loading or (lambda: False)
        self._timeout_s = timeout_s
        # No session-wide timeout: each query has its own, which grows with its document.
        self._client = client_for(url, None, token)
        self._large_documents = asyncio.Semaphore(1)
        self._large_inputs = LargeInputTurns()
        self._base_limits = base_limits
        self._revision = revision
        self._open = False
        self._watch: asyncio.Task[None] | None = None
        self._look_since: float | None = None
        """When the health look now waiting for OPA began (None: none is waiting)."""
        self._mask: AuditMask | None = None
        """None until read: calls are refused while the audit does not know what to hide."""

    def _failed(self) -> None:
        """OPA did not answer (or restarts): nothing it decided before is reused until it answers
        again (attacker round 102: with OPA stopped, a call identical to one allowed a moment
        before was still allowed from the cache for the rest of its time to live)."""
        self.cache.clear()
        self._on_error()

    def _may_reuse(self) -> bool:
        """False while the watch's health look has waited for OPA longer than it ever should."""
        since = self._look_since
        return since is None or time.monotonic() - since < STALLED_LOOK_S

    @property
    def revision(self) -> str:
        return self._revision

    @property
    def audit_mask(self) -> AuditMask:
        return self._mask or AuditMask()

    def policy_changing(self) -> None:
        """A new policy is about to be loaded: what the old one decided is not reused from now on
        (round 104's lead: it was until the load and the revision's look in git were done)."""
        self.cache.clear()

    async def policy_loaded(self, revision: str) -> None:
        """Record the revision after a (re)load and re-read what the audit log must mask.

        Raises:
            MaskError: the loaded policy's mask is malformed (the last good one stays).
        """
        self._revision = revision
        self.cache.clear()
        try:
            mask = await self._read_mask()
        except MaskError:
            raise
        except Exception as exc:  # noqa: BLE001 - kept: the last good mask, or calls refused
            log.error("could not read the policy's audit mask (%s); %s", exc, self._mask_state())
            return
        self._mask = mask

    def _mask_state(self) -> str:
        if self._mask is None:
            return "calls are refused until it can be read"
        return "the last good mask stays in force"

    async def _read_mask(self) -> AuditMask:
        fields = await self._query({}, "mask")
        patterns = await self._query({}, "mask_patterns")
        return AuditMask.parse(fields.get("result"), patterns.get("result", []))

    async def _mask_known(self) -> bool:
        """Whether the audit mask is known (read again now if it was not)."""
        if self._mask is not None:
            return True
        try:
            self._mask = await self._read_mask()
        except Exception as exc:  # noqa: BLE001 - still unknown: the call is refused
            log.warning("the policy's audit mask is still unreadable: %s", exc)
            return False
        return True

    async def open(self) -> None:
        """Open the HTTP session (AsyncOpaClient only works inside its context) and start
        looking at OPA's health between queries."""
        await self._client.__aenter__()
        self._open = True
        await self.policy_loaded(self._revision)
        self._watch = asyncio.create_task(self._watch_health(), name="opa-health-watch")

    async def close(self) -> None:
        """Stop the health look and close the HTTP session."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        if self._open:
            await self._client.__aexit__(None, None, None)
            self._open = False

    async def healthy(self) -> bool:
        """Whether OPA answers its health endpoint (when not, nothing it decided is reused)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                answered = bool(await self._client.check_health())
        except Exception:  # noqa: BLE001 - not answering is the answer
            answered = False
        if not answered:
            self.cache.clear()  # not counted as a failed query: no call was refused for it
        return answered

    async def _watch_health(self) -> None:
        """A stopped OPA fails no query while only calls with reused decisions come (attacker
        round 102): its health is looked at every HEALTH_WATCH_S."""
        while True:
            await asyncio.sleep(HEALTH_WATCH_S)
            self._look_since = time.monotonic()
            try:
                await self.healthy()
            finally:
                self._look_since = None

    async def _query(self, document: dict[str, Any], rule: str) -> dict[str, Any]:
        async with self._one_large_input(document):
            return await self._send(await encoded(document), rule)

    def _one_large_input(
        self, document: dict[str, Any]
    ) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held from encoding a large input's document to OPA's answer (`LargeInputTurns`)."""
        if isinstance(document, LargeDocument):
            caller = document.get("caller")
            principal = caller.get("principal") if isinstance(caller, dict) else None
            return self._large_inputs.turn(str(principal or ""))
        return contextlib.nullcontext()

    async def _send(self, document: EncodedDocument, rule: str) -> dict[str, Any]:
        size = len(document.body)
        async with asyncio.timeout(self._timeout_s + size / OPA_READS_BYTES_PER_S):
            if size < LARGE_DOCUMENT_BYTES:
                response = await self._client.query_rule(document, PACKAGE, rule)
            else:
                # Leaving on a timeout closes the connection, and OPA stops evaluating.
                async with self._large_documents:
                    response = await self._client.query_rule(document, PACKAGE, rule)
        if not isinstance(response, dict):
            raise TypeError(f"OPA answered {type(response).__name__}, not an object")
        return response

    async def decide(self, document: dict[str, Any]) -> Verdict:
        if self._loading():
            # Checked before the cache too: while OPA restarts, nothing is allowed.
            self._failed()
            return Verdict.deny(
                "The policy engine (OPA) is restarting and does not hold the policy yet, so the "
                "call is denied (fail closed). Retry in a moment."
            )
        if not await self._mask_known():
            self._failed()
            return Verdict.deny(
                "The policy engine (OPA) did not give the policy's audit mask "
                "(data.tooljail.authz.mask and mask_patterns), so the call is denied rather than "
                "logged without it (fail closed). Retry later; the operator finds the cause in "
                "the daemon's log."
            )
        try:
            async with self._one_large_input(document):
                body = await encoded(document)
                key = self.cache.key(body)
                reused = self.cache.get(key) if key is not None and self._may_reuse() else None
                if reused is not None:
                    return reused
                asked_at = self.cache.generation
                response = await self._send(body, "decision")
                del body  # a large input's body goes before the next one is encoded
        except Exception as exc:  # noqa: BLE001 - any transport failure must become a deny
            self._failed()
            log.warning("policy engine unreachable: %r", exc)
            return Verdict.deny(
                "The policy engine (OPA) could not be reached or did not answer in time "
                f"({type(exc).__name__}), so the call is denied (fail closed). Retry later."
            )
        verdict = parse_verdict(response, self._base_limits)
        if key is not None:
            self.cache.put(key, verdict, asked_at)
        return verdict

    async def admit(self, rule: Admission, document: dict[str, Any]) -> Verdict:
        try:
            response = await self._query(document, rule)
        except Exception as exc:  # noqa: BLE001 - any transport failure must become a deny
            self._failed()
            return Verdict.deny(
                f"The policy engine (OPA) could not be reached ({type(exc).__name__}), so the "
                "request is refused (fail closed). Retry later."
            )
        return parse_admission(rule, response)

    async def egress(self, document: dict[str, Any]) -> EgressVerdict:
        if self._loading():
            self._failed()
            return EgressVerdict.refuse(
                "The policy engine (OPA) is restarting, so the connection is refused (fail "
                "closed). Retry in a moment."
            )
        try:
            response = await self._query(document, "egress")
        except Exception as exc:  # noqa: BLE001 - any transport failure must become a refusal
            self._failed()
            return EgressVerdict.refuse(
                "The policy engine (OPA) could not be reached or did not answer in time "
                f"({type(exc).__name__}), so the connection is refused (fail closed)."
            )
        return parse_egress(response)

    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        try:
            response = await self._query(document, "visible_tools")
        except Exception as exc:  # noqa: BLE001 - the caller turns None into UNAVAILABLE
            self._failed()
            log.warning("policy engine unreachable for visible_tools: %s", exc)
            return None
        result = response.get("result", [])
        if not isinstance(result, list):
            return frozenset()
        return frozenset(name for name in result if isinstance(name, str))
