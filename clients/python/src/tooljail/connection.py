"""Where the daemon is and how to prove who we are: from arguments, else the environment.

TOOLJAIL_TARGET: `unix:///run/tooljail/tooljail.sock` (the default; the principal is the socket
peer's user) or `host:port` (TCP: with a bearer token, TOOLJAIL_TOKEN, and/or TLS files for mTLS).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import grpc

DEFAULT_TARGET = "unix:///run/tooljail/tooljail.sock"
TARGET_VARIABLE = "TOOLJAIL_TARGET"
TOKEN_VARIABLE = "TOOLJAIL_TOKEN"  # noqa: S105 - a variable's name


@dataclass(frozen=True)
class Connection:
    """How to reach the daemon."""

    target: str
    """`unix:///path`, `unix:/path`, or `host:port`."""
    token: str = field(default="", repr=False)
    """Bearer token for a TCP listener that wants one (never put it on a command line; never
    shown in a repr, so never in a log line or a traceback)."""
    ca_file: Path | None = None
    """Roots that sign the daemon's certificate (TLS)."""
    cert_file: Path | None = None
    """The client's certificate (mTLS), with `key_file`."""
    key_file: Path | None = None

    def __post_init__(self) -> None:
        if self.token and not self.secure and not _on_this_machine(self.target):
            raise ValueError(
                f"refusing to send the bearer token in clear to {self.target}: give the daemon's "
                "CA (ca_file) to use TLS, or reach it on loopback or its Unix socket"
            )

    @classmethod
    def resolve(
        cls,
        target: str | None = None,
        *,
        token: str | None = None,
        ca_file: str | Path | None = None,
        cert_file: str | Path | None = None,
        key_file: str | Path | None = None,
    ) -> Connection:
        """Arguments first, then TOOLJAIL_TARGET / TOOLJAIL_TOKEN, then the default socket."""
        if (cert_file is None) != (key_file is None):
            raise ValueError("give both cert_file and key_file for mTLS, or neither")
        files = {"ca_file": ca_file, "cert_file": cert_file, "key_file": key_file}
        for name, value in files.items():
            if value is not None and not str(value):
                raise ValueError(f"{name} is empty: give a file name, or None for no TLS")
        return cls(
            target=target or os.environ.get(TARGET_VARIABLE) or DEFAULT_TARGET,
            token=token if token is not None else os.environ.get(TOKEN_VARIABLE, ""),
            ca_file=Path(ca_file) if ca_file else None,
            cert_file=Path(cert_file) if cert_file else None,
            key_file=Path(key_file) if key_file else None,
        )

    @property
    def grpc_target(self) -> str:
        if self.target.startswith("unix://") and not self.target.startswith("unix:///"):
            return "unix:" + self.target.removeprefix("unix://")
        return self.target

    @property
    def secure(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None

    def credentials(self) -> grpc.ChannelCredentials:
        """TLS credentials from the files (ValueError naming the file that cannot be read)."""

        def read(path: Path | None) -> bytes | None:
            try:
                return path.read_bytes() if path is not None else None
            except OSError as error:
                raise ValueError(f"cannot read the TLS file {path}: {error.strerror}") from None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )

    def channel(self) -> grpc.Channel:
        """A blocking channel; every call on it carries the token, if there is one."""
        channel = (
            grpc.secure_channel(self.grpc_target, self.credentials())
            if self.secure
            else grpc.insecure_channel(self.grpc_target)
        )
        return grpc.intercept_channel(channel, _Bearer(self.token)) if self.token else channel

    def aio_channel(self) -> grpc.aio.Channel:
        """An asyncio channel; every call on it carries the token, if there is one."""
        interceptors = [_AioBearer(self.token)] if self.token else None
        if self.secure:
            return grpc.aio.secure_channel(
                self.grpc_target, self.credentials(), interceptors=interceptors
            )
        return grpc.aio.insecure_channel(self.grpc_target, interceptors=interceptors)


def _on_this_machine(target: str) -> bool:
    """Whether `target` is a Unix socket or a loopback address (a token in clear stays here)."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    address = target.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host = address[1:].partition("]")[0] if address.startswith("[") else address.rpartition(":")[0]
    return loopback_host(host)


def loopback_host(host: str) -> bool:
    """Whether `host` is this machine's loopback: an IP address the standard library parses as
    loopback (127.0.0.0/8, ::1), or "localhost"; any other name is not (it could resolve
    anywhere), nor an address like "127.evil.example"."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class _CallDetails(_Details, grpc.ClientCallDetails):
    """A call's details with one more metadata entry."""


class _Bearer(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """`authorization: Bearer <token>` on every call of a blocking channel."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: Any) -> _CallDetails:
        return _CallDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self._header],
            details.credentials,
            details.wait_for_ready,
            getattr(details, "compression", None),
        )

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return continuation(self._details(client_call_details), request)

    def intercept_stream_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        return continuation(self._details(client_call_details), request_iterator)


class _AioBearer(
    grpc.aio.UnaryUnaryClientInterceptor,
    grpc.aio.UnaryStreamClientInterceptor,
    grpc.aio.StreamStreamClientInterceptor,
):
    """The same for an asyncio channel."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self._header)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)

    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._details(client_call_details), request)

    async def intercept_stream_stream(
        self,
        continuation: Any,
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await continuation(self._details(client_call_details), request_iterator)
