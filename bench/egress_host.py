"""The processes of the egress benchmark: an upstream server, and the egress proxy with its OPA.

Each runs in a process of its own (as in use: the proxy in the daemon, servers elsewhere), started
by bench/egress.py, and prints one JSON line once it serves:
- `upstream`: plain HTTP and HTTPS on 127.0.0.2; `GET /size/N` answers N bytes.
- `proxy`: the daemon's EgressProxy on a Unix socket, with the real OPA and a rule allowing the
  upstream's ports (loopback range named), and a credential bound to the HTTPS port (so that
  port's tunnels are intercepted); it also reports the p50 of the OPA egress decision alone, and
  answers each `decisions` line on its stdin with the p50 of the decisions its connections asked
  for since the last such line (the decision's own part of their set-up, same moment).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import ssl
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from daemon.config import PROJECT_ROOT
from daemon.egress.ca import EgressCA
from daemon.egress.credentials import CredentialRule, Credentials
from daemon.egress.proxy import EgressCall, EgressProxy, EgressSettings
from daemon.policy.egress_verdict import EgressVerdict
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa, find_opa
from sandbox.backend import SandboxLimits

HOST = "127.0.0.2"
_BLOCK = memoryview(random.Random(20).randbytes(1 << 20))  # noqa: S311 - not a secret
"""What downloads carry: bytes like a compressed archive's (not one letter repeated, which
would make every scan of the body, e.g. for an echoed credential, its worst case)."""
CALL = {
    "tool_use_id": "toolu_bench",
    "tool": "Bash",
    "caller": {"principal": "bench", "transport": "unix"},
    "session": {"id": "s", "workspace": "/ws", "mode": "default", "grants": []},
}


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        size = int(head.split(b" ")[1].rsplit(b"/", 1)[1])
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % size)
        while size > 0:
            chunk = _BLOCK[: min(size, len(_BLOCK))]
            writer.write(chunk)
            await writer.drain()
            size -= len(chunk)
    except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def upstream(work: Path) -> None:
    ca = EgressCA.load_or_create(work / "upstream-ca")
    (work / "upstream-ca.pem").write_bytes(ca.certificate_pem)
    plain = await asyncio.start_server(_answer, HOST, 0)
    tls = await asyncio.start_server(_answer, HOST, 0, ssl=ca.server_context(HOST))
    ports = {"plain": plain.sockets[0].getsockname()[1], "tls": tls.sockets[0].getsockname()[1]}
    print(json.dumps({**ports, "ca": str(work / "upstream-ca.pem")}), flush=True)
    await asyncio.gather(plain.serve_forever(), tls.serve_forever())


def _policies(work: Path, ports: list[int]) -> Path:
    policies = work / "policies"
    shutil.rmtree(policies, ignore_errors=True)
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    data["tooljail"]["egress"]["principals"]["bench"] = {
        # opaque: the plain download goes through a tunnel as plain HTTP.
        "allow": [
            {"hosts": [HOST], "ports": ports, "address_ranges": ["loopback"], "opaque": True}
        ],
        "budget": {"connections": 1_000_000, "bytes": 1 << 40},
    }
    (policies / "data.json").write_text(json.dumps(data))
    return policies


async def _decision_p50_ms(engine: OpaPolicyEngine, port: int, samples: int) -> float:
    document: dict[str, Any] = {
        "version": 1,
        "call": CALL,
        "destination": {
            "via": "connect",
            "host": HOST,
            "port": port,
            "addresses": [{"address": HOST, "range": "loopback"}],
            "intercepted": False,
        },
        "usage": {"connections": 0, "bytes": 0},
    }
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        verdict = await engine.egress(document)
        times.append((time.perf_counter() - started) * 1000)
        if not verdict.allow:
            raise RuntimeError(f"the bench rule did not allow: {verdict.reasons}")
    return statistics.median(times)


class _TimedEngine(OpaPolicyEngine):
    """The engine, keeping how long each egress decision took."""

    times_ms: list[float]

    async def egress(self, document: dict[str, Any]) -> EgressVerdict:
        started = time.perf_counter()
        try:
            return await super().egress(document)
        finally:
            self.times_ms.append((time.perf_counter() - started) * 1000)


async def _answer_questions(engine: _TimedEngine) -> None:
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if line.strip() == "decisions":
            times, engine.times_ms = engine.times_ms, []
            p50 = statistics.median(times) if times else 0.0
            print(json.dumps({"p50_ms": p50, "count": len(times)}), flush=True)


async def proxy(work: Path, plain: int, tls: int, upstream_ca: Path, samples: int) -> None:
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), _policies(work, [plain, tls]), work / "o" / "s")
    await opa.start()
    engine = _TimedEngine(opa.url, 10.0, SandboxLimits(), "bench")
    engine.times_ms = []
    await engine.open()
    secret = work / "secret"
    # As long as the API tokens credentials usually are (40 characters): the proxy scans every
    # answer for the secret, and how fast depends on its length.
    secret.write_text("tjb_" + "5f0c" * 9 + "\n")
    secret.chmod(0o600)
    ca = EgressCA.load_or_create(work / "egress-ca")
    (work / "egress-ca.pem").write_bytes(ca.certificate_pem)
    upstream_tls = ssl.create_default_context(cafile=str(upstream_ca))
    rules = [CredentialRule(host=HOST, port=tls, secret_file=secret)]
    egress = EgressProxy(
        engine,
        lambda record: None,
        settings=EgressSettings(max_connections=1_000_000, max_bytes=1 << 40),
        credentials=Credentials(rules),
        ca=ca,
        upstream_tls=upstream_tls,
    )
    decision_ms = await _decision_p50_ms(engine, plain, samples)
    socket_path = work / "proxy.sock"
    async with egress.for_call(EgressCall("toolu_bench", CALL)).listen(socket_path):
        print(
            json.dumps(
                {
                    "socket": str(socket_path),
                    "ca": str(work / "egress-ca.pem"),
                    "decision_p50_ms": decision_ms,
                }
            ),
            flush=True,
        )
        await _answer_questions(engine)
        await asyncio.Event().wait()  # stdin closed: serve on until terminated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("role", choices=["upstream", "proxy"])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--plain", type=int, default=0)
    parser.add_argument("--tls", type=int, default=0)
    parser.add_argument("--upstream-ca", type=Path)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.role == "upstream":
        asyncio.run(upstream(args.work))
    else:
        asyncio.run(proxy(args.work, args.plain, args.tls, args.upstream_ca, args.samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
