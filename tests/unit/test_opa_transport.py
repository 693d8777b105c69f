"""What the OPA engine sends and how long it waits: documents as UTF-8 (escaped only when they
cannot be), large ones encoded off the event loop, and a query's time limit growing with its
document. A small HTTP server plays OPA (the real one: tests/integration/test_opa_server.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from daemon.models import Outcome
from daemon.policy import document_body, opa_engine
from daemon.policy.decision_cache import DecisionCache
from daemon.policy.document_body import LargeDocument, encode_document, encoded
from daemon.policy.opa_engine import LARGE_DOCUMENT_BYTES, OPA_READS_BYTES_PER_S, OpaPolicyEngine
from sandbox.backend import SandboxLimits

SANDBOX = {"timeout_ms": 5000, "memory_mb": 256, "cpus": 1, "pids": 64, "network": "none"}
ALLOW = {
    "result": {"outcome": "allow", "reasons": [], "sandbox": SANDBOX, "result_budget_chars": 1000}
}


def test_non_ascii_text_is_sent_as_utf8_not_escaped() -> None:
    body = encode_document({"content": "é" * 10}).body
    assert body == '{"input":{"content":"éééééééééé"}}'.encode()


def test_a_lone_surrogate_is_sent_escaped_and_reads_back_the_same() -> None:
    document = {"path": "caf\udce9", "note": "é"}
    body = encode_document(document).body
    assert body.isascii()
    assert json.loads(body) == {"input": document}


def test_only_a_large_document_is_encoded_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[int] = []

    def spying(document: dict[str, Any]) -> document_body.EncodedDocument:
        threads.append(threading.get_ident())
        return encode_document(document)

    monkeypatch.setattr(document_body, "encode_document", spying)

    async def both() -> int:
        await encoded({"small": "x"})
        await encoded(LargeDocument(large="x"))
        return threading.get_ident()

    loop_thread = asyncio.run(both())
    assert threads[0] == loop_thread
    assert threads[1] != loop_thread


@dataclass
class SlowOpa:
    """Answers a decision query with an allow after `delay_s`, keeping what it was sent; the
    audit mask at once (there is none)."""

    delay_s: float
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    at_once: int = 0
    most_at_once: int = 0
    reply: dict[str, Any] = field(default_factory=lambda: ALLOW)
    health_delay_s: float = 0.0

    async def health(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.health_delay_s)
        return web.json_response({})

    async def answer(self, request: web.Request) -> web.Response:
        if request.match_info["rule"] != "decision":
            return web.json_response({"result": []})
        self.bodies.append(await request.read())
        self.headers.append(dict(request.headers))
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await asyncio.sleep(self.delay_s)
        finally:
            self.at_once -= 1
        return web.json_response(self.reply)


@pytest.fixture
async def slow_opa() -> AsyncIterator[tuple[SlowOpa, str]]:
    opa = SlowOpa(delay_s=0.5)
    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/data/tooljail/authz/{rule}", opa.answer)
    app.router.add_get("/health", opa.health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield opa, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def _reusing_engine(
    opa: SlowOpa, url: str, timeout_s: float
) -> AsyncIterator[OpaPolicyEngine]:
    """An engine with a decision cache, against an OPA whose allows may be reused for 30 s."""
    opa.reply = {"result": {**ALLOW["result"], "cache_ttl_s": 30}}
    cache = DecisionCache(max_entries=10, max_ttl_s=60)
    engine = OpaPolicyEngine(url, timeout_s, SandboxLimits(), "test", cache=cache)
    await engine.open()
    try:
        yield engine
    finally:
        await engine.close()


async def _engine(url: str, timeout_s: float) -> OpaPolicyEngine:
    engine = OpaPolicyEngine(url, timeout_s, SandboxLimits(), "test", token="t0ken")
    await engine.open()
    return engine


# aiohttp warns that a body over 1 MB takes a moment to copy on the event loop; it does.
@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
async def test_a_query_may_take_longer_the_larger_its_document(
    slow_opa: tuple[SlowOpa, str],
) -> None:
    opa, url = slow_opa
    engine = await _engine(url, timeout_s=0.1)
    try:
        small = await engine.decide({"input": {"file_path": "a"}})
        # 16 MB: OPA may take 2 s more to read it than the 0.1 s a small document gets.
        content = "é" * (8 << 20)
        large = await engine.decide(LargeDocument(input={"content": content}))
    finally:
        await engine.close()
    assert small.outcome is Outcome.DENY
    assert "did not answer in time (TimeoutError)" in " ".join(small.reasons)
    assert large.outcome is Outcome.ALLOW, large.reasons
    sent = opa.bodies[-1]
    assert len(sent) / OPA_READS_BYTES_PER_S > 1.0
    assert json.loads(sent) == {"input": {"input": {"content": content}}}
    assert opa.headers[-1]["Authorization"] == "Bearer t0ken"


@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
async def test_large_documents_go_to_opa_one_at_a_time_and_small_ones_pass_them(
    slow_opa: tuple[SlowOpa, str],
) -> None:
    """A policy may spend seconds on one large document: several at once would leave OPA no
    time for other callers' small ones (attacker round 55)."""
    opa, url = slow_opa
    opa.delay_s = 0.3
    engine = await _engine(url, timeout_s=5.0)
    try:
        large = LargeDocument(input={"content": "x" * LARGE_DOCUMENT_BYTES})
        decisions = [asyncio.ensure_future(engine.decide(large)) for _ in range(3)]
        await asyncio.sleep(0.1)
        small = await engine.decide({"input": {"file_path": "a"}})
        verdicts = await asyncio.gather(*decisions)
    finally:
        await engine.close()
    assert all(v.outcome is Outcome.ALLOW for v in [small, *verdicts])
    assert opa.most_at_once == 2, "the small one beside one large one, never two large ones"


async def test_no_reused_decision_is_served_once_opa_has_failed_to_answer(
    slow_opa: tuple[SlowOpa, str],
) -> None:
    """Attacker round 102: with OPA stopped, a call identical to one allowed a moment before was
    still allowed from the decision cache for up to its time to live. Once the daemon has seen
    OPA fail, it reuses nothing until OPA answers again."""
    opa, url = slow_opa
    opa.delay_s = 0.0
    async with _reusing_engine(opa, url, 0.3) as engine:
        document = {"input": {"file_path": "a"}}
        assert (await engine.decide(document)).outcome is Outcome.ALLOW
        assert (await engine.decide(document)).cached_from, "reused while OPA answers"
        opa.delay_s = 1.0  # OPA stops answering in time
        other = await engine.decide({"input": {"file_path": "b"}})
        assert other.outcome is Outcome.DENY
        again = await engine.decide(document)
        assert again.outcome is Outcome.DENY and not again.cached_from
        opa.delay_s = 0.0  # OPA answers again: reuse resumes with what it says now
        assert (await engine.decide(document)).outcome is Outcome.ALLOW
        assert (await engine.decide(document)).cached_from


async def test_an_opa_that_stops_answering_is_noticed_without_a_query_failing(
    slow_opa: tuple[SlowOpa, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 102's fix forgets reused decisions when a query fails; with only cached calls coming,
    none fails. OPA's health is looked at between queries too, and a look that fails forgets them
    as well."""
    monkeypatch.setattr(opa_engine, "HEALTH_WATCH_S", 0.05)
    opa, url = slow_opa
    opa.delay_s = 0.0
    async with _reusing_engine(opa, url, 0.2) as engine:
        document = {"input": {"file_path": "a"}}
        await engine.decide(document)
        assert (await engine.decide(document)).cached_from
        opa.health_delay_s = 1.0  # OPA stops answering; no query is made meanwhile
        await asyncio.sleep(0.6)
        opa.health_delay_s = 0.0
        again = await engine.decide(document)
        assert again.outcome is Outcome.ALLOW and not again.cached_from, "asked of OPA again"


async def test_a_decision_asked_before_the_policy_changed_is_not_reused_after(
    slow_opa: tuple[SlowOpa, str],
) -> None:
    """Attacker round 103's lead: an answer OPA gave under the old policy, read just after a
    reload had emptied the cache, was kept for reuse under the new one."""
    opa, url = slow_opa
    opa.delay_s = 0.3
    async with _reusing_engine(opa, url, 5.0) as engine:
        document = {"input": {"file_path": "a"}}
        asked = asyncio.ensure_future(engine.decide(document))
        await asyncio.sleep(0.1)
        await engine.policy_loaded("rev2")  # a reload while that query is with OPA
        assert (await asked).outcome is Outcome.ALLOW
        opa.delay_s = 0.0
        again = await engine.decide(document)
        assert not again.cached_from, "decided under the old policy, reused under the new one"


async def test_reused_decisions_wait_for_a_health_look_that_takes_too_long(
    slow_opa: tuple[SlowOpa, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 103: after OPA stopped, reused decisions were served until the health look
    had waited out the whole query timeout (1.4 s of allowed calls with no OPA thread running).
    A look that has not been answered in a moment is reason enough to ask OPA instead."""
    monkeypatch.setattr(opa_engine, "HEALTH_WATCH_S", 0.05)
    opa, url = slow_opa
    opa.delay_s = 0.0
    async with _reusing_engine(opa, url, 5.0) as engine:
        document = {"input": {"file_path": "a"}}
        await engine.decide(document)
        assert (await engine.decide(document)).cached_from
        opa.health_delay_s = 1.0  # OPA's health stops answering; the look waits (timeout 5 s)
        await asyncio.sleep(0.1 + opa_engine.STALLED_LOOK_S + 0.2)
        again = await engine.decide(document)
        assert again.outcome is Outcome.ALLOW and not again.cached_from, "asked of OPA"


async def test_large_inputs_are_encoded_one_at_a_time_until_opa_answered(
    slow_opa: tuple[SlowOpa, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 106: every call waiting to send a large input held its JSON body (up to
    six bytes per character) at once; now one body exists at a time."""
    opa, url = slow_opa
    opa.delay_s = 0.2
    seen_at_encode: list[int] = []

    def spying(document: dict[str, Any]) -> document_body.EncodedDocument:
        if isinstance(document, LargeDocument):
            seen_at_encode.append(len(opa.bodies) - opa.at_once)  # decisions answered so far
        return encode_document(document)

    monkeypatch.setattr(document_body, "encode_document", spying)
    engine = await _engine(url, timeout_s=5)
    try:
        documents = [LargeDocument(input={"content": "\x01" * 100_000, "n": n}) for n in range(3)]
        verdicts = await asyncio.gather(*(engine.decide(d) for d in documents))
    finally:
        await engine.close()
    assert [v.outcome for v in verdicts] == [Outcome.ALLOW] * 3
    assert seen_at_encode == [0, 1, 2]
