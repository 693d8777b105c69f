"""A decided CONNECT tunnel: its first bytes checked, then carried by the kernel.

The proxy does not read a tunnel's payload, so it checks what it can at the start: the client's
first record is a TLS ClientHello naming the host that was decided (a shared address could serve
another site under another name), and the server's first record is TLS too (a plain-text service
behind an allowed port would otherwise be reachable). A rule marked opaque lifts both checks.
After that, splice(2) moves the bytes, metered (see splice.py).
"""

from __future__ import annotations

import asyncio
import socket

from daemon.egress.http_relay import CHUNK, Meter
from daemon.egress.record import ConnectionRecord, Ended, Refused
from daemon.egress.sni import TLS_HEADER, ClientHelloReader, HelloVerdict, tls_records
from daemon.egress.splice import splice_pump
from daemon.egress.streams import in_thread, shutter
from daemon.egress.target import Target


async def read_hello(
    client: socket.socket,
    early: bytes,
    target: Target,
    record: ConnectionRecord,
    timeout_s: float,
) -> bytes:
    """The first bytes of the tunnel: a TLS ClientHello naming the CONNECT host (a name needs
    its server name), or, only when the decision says the tunnel may be opaque, anything."""
    loop = asyncio.get_running_loop()
    hello = ClientHelloReader()
    seen = bytearray(early)
    verdict: HelloVerdict | None = None
    ended = False
    try:
        verdict = hello.feed(early) if early else None
        deadline = loop.time() + timeout_s
        while verdict is None:
            async with asyncio.timeout_at(deadline):
                data = await loop.sock_recv(client, CHUNK)
            if not data:
                ended = True
                break
            seen += data
            verdict = hello.feed(data)
    except ValueError as exc:
        raise Refused(0, f"the tunnel began with a malformed TLS hello ({exc})") from exc
    except TimeoutError:
        pass  # the client waits for the server to speak first: not TLS
    if verdict is None and not seen and ended:
        raise Ended("the client closed the tunnel before sending anything")
    if verdict is None or not verdict.is_tls:
        record.fields["tls"] = False
        if not record.opaque:
            raise Refused(
                0,
                f"the tunnel to {target.authority()} did not begin with TLS; only a rule "
                'with "opaque": true lets a tunnel carry another protocol',
            )
        return bytes(seen)
    record.fields["tls"] = True
    name = verdict.server_name
    if name is not None:
        record.fields["sni"] = name
    if name is None and not target.is_address:
        raise Refused(
            0,
            f"the TLS hello names no server; it must name {target.host!r} (the CONNECT host)",
        )
    if name is not None and name.removesuffix(".") != target.host:
        raise Refused(
            0,
            f"the TLS server name {name!r} differs from the CONNECT host {target.host!r}; "
            "connect to the host you name",
        )
    return bytes(seen)


async def _server_speaks_tls(
    upstream: socket.socket, client: socket.socket, meter_down: Meter, timeout_s: float
) -> None:
    """Read the server's first record header, check that it is TLS (a handshake or an alert)
    and pass it on; a plain-text service behind an allowed port is refused here."""
    loop = asyncio.get_running_loop()
    first = b""
    try:
        async with asyncio.timeout(timeout_s):
            while len(first) < TLS_HEADER:
                data = await loop.sock_recv(upstream, TLS_HEADER - len(first))
                if not data:
                    break
                first += data
    except TimeoutError:
        pass  # silence is not TLS either
    if len(first) < TLS_HEADER or first[0] not in (21, 22) or not tls_records(first):
        raise Refused(0, "the server did not answer the TLS hello with TLS")
    if meter_down(len(first)):
        await loop.sock_sendall(client, first)


async def carry_tunnel(
    client: socket.socket,
    upstream: socket.socket,
    hello: bytes,
    record: ConnectionRecord,
    *,
    meter_up: Meter,
    meter_down: Meter,
    timeout_s: float,
) -> None:
    """Send the hello on, check the server's answer when the tunnel is TLS, then splice both
    directions until both end."""
    tls = bool(record.fields.get("tls"))
    # TLS the whole way, not a hello in front of another protocol: what the client sent so
    # far is TLS records, and so is the server's first answer.
    if tls and not tls_records(hello):
        raise Refused(0, "the tunnel carried something other than TLS records")
    if hello:
        if not meter_up(len(hello)):
            return
        await asyncio.get_running_loop().sock_sendall(upstream, hello)
    if tls:
        await _server_speaks_tls(upstream, client, meter_down, timeout_s)
    client.setblocking(True)
    upstream.setblocking(True)
    interrupt = shutter(client, upstream)
    await asyncio.gather(
        in_thread(lambda: splice_pump(client, upstream, meter_up), interrupt=interrupt),
        in_thread(lambda: splice_pump(upstream, client, meter_down), interrupt=interrupt),
    )
    record.fields.setdefault("end", "done")
