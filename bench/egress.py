"""The egress benchmark part: connection set-up and download throughput through the proxy against
the same directly, in the same run (bench/egress_host.py runs the upstream and the proxy).

The client speaks to the proxy's Unix socket as the in-container forwarder does; the forwarder's
own hop inside the container is not part of this measurement.
"""

from __future__ import annotations

import json
import socket
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.egress_host import HOST

_RECV = 1 << 20

_Asker = Callable[[str], dict[str, Any]]


@contextmanager
def _host(role: str, work: Path, *args: str) -> Iterator[tuple[dict[str, Any], _Asker]]:
    """The host process's first line, and how to ask it a question (a line in, a line out)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.egress_host", role, "--work", str(work), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    stdin, stdout = process.stdin, process.stdout

    def ask(question: str) -> dict[str, Any]:
        stdin.write(question + "\n")
        stdin.flush()
        answer: dict[str, Any] = json.loads(stdout.readline())
        return answer

    try:
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the egress {role} did not start (exit {process.wait(30)})")
        yield json.loads(line), ask
    finally:
        process.terminate()
        process.wait(30)


def _read_response(sock: socket.socket | ssl.SSLSocket, size: int) -> int:
    """Read one `GET /size/N` answer to its end; the body's length."""
    data = bytearray()
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the answer ended inside its head")
        data += chunk
    body = len(data) - data.index(b"\r\n\r\n") - 4
    buffer = bytearray(_RECV)  # one buffer for the whole body: no allocation per read
    while body < size:
        got = sock.recv_into(buffer)
        if not got:
            break
        body += got
    if body != size:
        raise RuntimeError(f"got {body} of {size} bytes")
    return body


def _connect_tunnel(proxy: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(proxy)
    sock.sendall(f"CONNECT {HOST}:{port} HTTP/1.1\r\nhost: {HOST}:{port}\r\n\r\n".encode())
    answer = sock.recv(4096)
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the proxy refused: {answer[:300]!r}")
    return sock


def _direct(port: int) -> socket.socket:
    return socket.create_connection((HOST, port))


def _p50s_ms(opens: list[Callable[[], socket.socket]], n: int) -> list[float]:
    """Set-up p50 of each way of connecting, taken in turns (a busy moment of the machine
    falls on all of them alike)."""
    times: list[list[float]] = [[] for _ in opens]
    for _ in range(n):
        for way, open_ in enumerate(opens):
            started = time.perf_counter()
            sock = open_()
            times[way].append((time.perf_counter() - started) * 1000)
            sock.close()
    return [statistics.median(way) for way in times]


def _download_mb_s(open_: Callable[[], socket.socket | ssl.SSLSocket], size: int) -> float:
    sock = open_()
    try:
        started = time.perf_counter()
        sock.sendall(f"GET /size/{size} HTTP/1.1\r\nhost: {HOST}\r\n\r\n".encode())
        _read_response(sock, size)
        return size / (1 << 20) / (time.perf_counter() - started)
    finally:
        sock.close()


def _best_mb_s(
    opens: list[Callable[[], socket.socket | ssl.SSLSocket]], size: int, rounds: int = 3
) -> list[float]:
    """The best of `rounds` downloads for each way, the ways taken in turns (the first may pay
    for page faults; a busy moment of the machine falls on all alike)."""
    best = [0.0] * len(opens)
    for _ in range(rounds):
        for way, open_ in enumerate(opens):
            best[way] = max(best[way], _download_mb_s(open_, size))
    return best


def measure_egress(work: Path, connects: int, download_bytes: int) -> dict[str, Any]:
    """Set-up p50 and throughput, direct and through the proxy (tunnelled and intercepted)."""
    with _host("upstream", work / "upstream") as (up, _):
        args = ["--plain", str(up["plain"]), "--tls", str(up["tls"]), "--upstream-ca", up["ca"]]
        with _host("proxy", work / "proxy", *args) as (proxy, ask_proxy):
            plain, tls, path = up["plain"], up["tls"], proxy["socket"]
            upstream_trust = ssl.create_default_context(cafile=up["ca"])
            proxy_trust = ssl.create_default_context(cafile=proxy["ca"])

            def tls_direct() -> ssl.SSLSocket:
                return upstream_trust.wrap_socket(_direct(tls), server_hostname=HOST)

            def tls_intercepted() -> ssl.SSLSocket:
                return proxy_trust.wrap_socket(_connect_tunnel(path, tls), server_hostname=HOST)

            ask_proxy("decisions")  # from here on: the decisions of the connections measured
            direct_ms, proxied_ms = _p50s_ms(
                [lambda: _direct(plain), lambda: _connect_tunnel(path, plain)], connects
            )
            in_flow = ask_proxy("decisions")
            direct_mb_s, tunnel_mb_s = _best_mb_s(
                [lambda: _direct(plain), lambda: _connect_tunnel(path, plain)], download_bytes
            )
            tls_direct_mb_s, intercepted_mb_s = _best_mb_s(
                [tls_direct, tls_intercepted], download_bytes
            )
            return {
                "connects": connects,
                "download_bytes": download_bytes,
                "setup_direct_p50_ms": direct_ms,
                "setup_proxy_p50_ms": proxied_ms,
                "decision_p50_ms": in_flow["p50_ms"],
                "decision_alone_p50_ms": proxy["decision_p50_ms"],
                "direct_mb_s": direct_mb_s,
                "tunnel_mb_s": tunnel_mb_s,
                "tls_direct_mb_s": tls_direct_mb_s,
                "intercepted_mb_s": intercepted_mb_s,
                "errors": 0,
            }
