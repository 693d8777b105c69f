"""The gRPC server: services, health, reflection and the listeners (Unix socket, optional TCP
with TLS or mTLS)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from daemon._generated.tooljail.v1 import executor_pb2
from daemon.config import Settings, TcpListenerSettings
from daemon.errors import TooljailError
from daemon.server.admin import AdminService
from daemon.server.decoding import add_service
from daemon.server.listen import ListenAddress
from daemon.server.service import REQUEST_CONVERTERS, ExecutorService

_EXECUTOR = executor_pb2.DESCRIPTOR.services_by_name["Executor"]
_ADMIN = executor_pb2.DESCRIPTOR.services_by_name["Admin"]
SERVICE_NAMES = (_EXECUTOR.full_name, _ADMIN.full_name)


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


def build_server(
    settings: Settings,
    address: ListenAddress,
    executor: ExecutorService,
    admin: AdminService,
    health_servicer: health.aio.HealthServicer,
) -> grpc.aio.Server:
    """A server with every service added and every listener bound (not started yet)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_request_bytes),
            ("grpc.max_send_message_length", settings.max_request_bytes),
        ]
    )
    take_timeout_s = settings.answer_take_timeout_s
    add_service(server, _EXECUTOR, executor, REQUEST_CONVERTERS, take_timeout_s)
    add_service(server, _ADMIN, admin, take_timeout_s=take_timeout_s)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    if server.add_insecure_port(address.bind_target()) == 0 and address.unix_path is None:
        raise TooljailError(f"cannot listen on {address.raw}")
    tcp = settings.tcp
    if tcp.address:
        credentials = _tcp_credentials(tcp)
        bound = (
            server.add_secure_port(tcp.address, credentials)
            if credentials is not None
            else server.add_insecure_port(tcp.address)
        )
        if bound == 0:
            raise TooljailError(f"cannot listen on TCP {tcp.address}")
    return server
