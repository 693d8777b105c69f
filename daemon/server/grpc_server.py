"""The gRPC server: services, health, reflection and the listeners (Unix socket, optional TCP
with TLS or mTLS)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from daemon._generated.tooljail.v1 import executor_pb2
from daemon.config import Settings, TcpListenerSettings
from daemon.errors import TooljailError
from daemon.server.admin import AdminService
from daemon.server.credential_gate import CredentialGate
from daemon.server.decoding import add_service
from daemon.server.identity import CallerResolver
from daemon.server.listen import ListenAddress
from daemon.server.receipts import Receipts, ReceiptTurns
from daemon.server.service import REQUEST_CONVERTERS, ExecutorService

_EXECUTOR = executor_pb2.DESCRIPTOR.services_by_name["Executor"]
_ADMIN = executor_pb2.DESCRIPTOR.services_by_name["Admin"]
SERVICE_NAMES = (_EXECUTOR.full_name, _ADMIN.full_name)
#: Open ExecuteTurn streams are bounded per principal by the service (`TurnStreams`).
_TURN_METHOD = f"/{_EXECUTOR.full_name}/ExecuteTurn"


def _tcp_credentials(tcp: TcpListenerSettings) -> grpc.ServerCredentials | None:
    if tcp.tls_cert is None or tcp.tls_key is None:
        return None
    try:
        pair = (tcp.tls_key.read_bytes(), tcp.tls_cert.read_bytes())
        ca = tcp.client_ca.read_bytes() if tcp.client_ca else None
    except OSError as exc:
        raise TooljailError(f"cannot read the TLS files of the TCP listener: {exc}") from exc
    return grpc.ssl_server_credentials(
        [pair], root_certificates=ca, require_client_auth=ca is not None
    )


@dataclass(frozen=True)
class Listener:
    """One listening address and how its callers are checked."""

    target: str
    tcp: bool
    """Bounded as the tcp section says (connections, streams, idle time, handshake time)."""
    credentials: grpc.ServerCredentials | None = None
    gated: bool = False
    """Calls without a valid bearer token are refused before their request is read."""


def listeners(settings: Settings, address: ListenAddress) -> list[Listener]:
    """The daemon's listeners: its listen address, and the TCP listener when one is set. Each
    gets a server of its own: a full TCP listener leaves the Unix socket serving, and only the
    listeners whose callers may lack a credential are gated."""
    tcp = address.unix_path is None
    out = [Listener(address.bind_target(), tcp=tcp, gated=tcp)]
    if settings.tcp.address:
        credentials = _tcp_credentials(settings.tcp)
        mtls = settings.tcp.client_ca is not None
        out.append(Listener(settings.tcp.address, True, credentials, gated=not mtls))
    return out


def _options(settings: Settings, listener: Listener) -> list[tuple[str, int]]:
    options = [
        ("grpc.max_receive_message_length", settings.max_request_bytes),
        ("grpc.max_send_message_length", settings.max_request_bytes),
    ]
    if listener.tcp:
        tcp = settings.tcp
        options += [
            ("grpc.max_allowed_incoming_connections", tcp.max_connections),
            ("grpc.max_concurrent_streams", tcp.max_streams_per_connection),
            ("grpc.max_connection_idle_ms", round(tcp.idle_connection_timeout_s * 1000)),
            ("grpc.server_handshake_timeout_ms", round(tcp.handshake_timeout_s * 1000)),
            # Without BDP probing a stream's window stays at HTTP/2's 64 KiB until tooljail
            # reads its message: with it, grpc grew the windows of a caller sending data on
            # calls it then had refused to 64 MiB (attacker round 165).
            ("grpc.http2.bdp_probe", 0),
        ]
    return options


class Servers:
    """The daemon's gRPC servers, started and stopped together."""

    def __init__(self, servers: list[grpc.aio.Server]) -> None:
        self._servers = servers

    async def start(self) -> None:
        """Start them all; when one fails, the ones started are stopped again."""
        try:
            for server in self._servers:
                await server.start()
        except BaseException:
            await self.stop(0)
            raise

    async def stop(self, grace_s: float) -> None:
        """Stop them all at once, each giving its calls `grace_s` to end."""
        await asyncio.gather(*(server.stop(grace_s) for server in self._servers))


def build_servers(
    settings: Settings,
    address: ListenAddress,
    executor: ExecutorService,
    admin: AdminService,
    health_servicer: health.aio.HealthServicer,
    resolver: CallerResolver,
) -> Servers:
    """A server for each listener, with every service added and its address bound (not
    started yet)."""
    receipts = Receipts(settings.receipts_per_principal, settings.request_receive_timeout_s)
    counted = [f"/{_EXECUTOR.full_name}/{name}" for name in REQUEST_CONVERTERS]
    turns = ReceiptTurns(receipts, resolver, [_TURN_METHOD], counted)
    take_timeout_s = settings.answer_take_timeout_s
    servers = []
    for listener in listeners(settings, address):
        gate = [CredentialGate(resolver)] if listener.gated else []
        server = grpc.aio.server(interceptors=[*gate, turns], options=_options(settings, listener))
        add_service(server, _EXECUTOR, executor, REQUEST_CONVERTERS, take_timeout_s)
        add_service(server, _ADMIN, admin, take_timeout_s=take_timeout_s)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            bound = (
                server.add_secure_port(listener.target, listener.credentials)
                if listener.credentials is not None
                else server.add_insecure_port(listener.target)
            )
        except RuntimeError:
            bound = 0
        if bound == 0:
            raise TooljailError(
                f"cannot listen on {listener.target}: the address is taken or not this "
                "machine's. If another process holds the port, find out whose: on a host with "
                "other users, one may have bound it to collect the tokens callers send "
                "(docs/operations.md, 'Listeners and who may call')"
            )
        servers.append(server)
    return Servers(servers)
