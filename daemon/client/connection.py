"""How a client reaches the daemon: its address, and the TLS files and bearer token a TCP
listener may require (the daemon takes the caller's principal from these, never from a field).

The token is read from a file or the TOOLJAIL_TOKEN variable, never from the command line, where
other users of the machine could read it in the process list.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import grpc

from daemon.client import grpc_target

TOKEN_VARIABLE = "TOOLJAIL_TOKEN"  # noqa: S105 - the variable's name, not a secret
DEFAULT_TARGET = "unix:///run/tooljail/tooljail.sock"
"""Where `make run` and the packaged service listen."""
LOG_LEVEL_VARIABLE = "TOOLJAIL_LOG_LEVEL"
"""The level of a client command's own log lines (the daemon takes its level from its settings)."""


def client_log_level() -> str:
    """The log level of a client command: TOOLJAIL_LOG_LEVEL, else warning."""
    return os.environ.get(LOG_LEVEL_VARIABLE, "warning").lower()


class ConnectionOptionError(ValueError):
    """The connection options cannot work (a file missing, half a key pair)."""


class _Details(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: grpc.CallCredentials | None
    wait_for_ready: bool | None
    compression: grpc.Compression | None


class _CallDetails(_Details, grpc.ClientCallDetails):
    """grpc.ClientCallDetails with one more metadata entry."""


def _with_header(details: Any, header: tuple[str, str]) -> _CallDetails:
    metadata = [*(details.metadata or ()), header]
    return _CallDetails(
        details.method,
        details.timeout,
        metadata,
        details.credentials,
        details.wait_for_ready,
        getattr(details, "compression", None),
    )


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call of a blocking channel."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return continuation(_with_header(client_call_details, self._header), request)

    def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        return continuation(_with_header(client_call_details, self._header), request)


class _AioBearerToken(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.UnaryStreamClientInterceptor):
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


@dataclass(frozen=True)
class Connection:
    """The daemon's address and what the client proves itself with."""

    target: str
    ca: Path | None = None
    """CA certificate(s) the daemon's TLS certificate must chain to; set to use TLS."""
    cert: Path | None = None
    """Client certificate (mTLS), with `key`."""
    key: Path | None = None
    token: str = ""
    """Bearer token (from --token-file or TOOLJAIL_TOKEN)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Connection:
        """From the options `add_arguments` defined."""
        token = os.environ.get(TOKEN_VARIABLE, "")
        if args.token_file is not None:
            try:
                token = args.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConnectionOptionError(
                    f"--token-file {args.token_file}: {exc.strerror or exc}"
                ) from exc
        if (args.tls_cert is None) != (args.tls_key is None):
            raise ConnectionOptionError("--tls-cert and --tls-key: give both or neither")
        if args.tls_cert is not None and args.tls_ca is None:
            raise ConnectionOptionError(
                "--tls-cert needs --tls-ca: the daemon's certificate must be checked too"
            )
        return cls(args.target, args.tls_ca, args.tls_cert, args.tls_key, token)

    def _credentials(self) -> grpc.ChannelCredentials | None:
        if self.ca is None:
            return None
        try:
            ca = self.ca.read_bytes()
            pair = (
                (self.key.read_bytes(), self.cert.read_bytes()) if self.cert and self.key else None
            )
        except OSError as exc:
            raise ConnectionOptionError(f"cannot read a TLS file: {exc}") from exc
        return grpc.ssl_channel_credentials(
            root_certificates=ca,
            private_key=pair[0] if pair else None,
            certificate_chain=pair[1] if pair else None,
        )

    def channel(self) -> grpc.Channel:
        """A blocking channel to the daemon."""
        target, credentials = grpc_target(self.target), self._credentials()
        channel = (
            grpc.secure_channel(target, credentials)
            if credentials is not None
            else grpc.insecure_channel(target)
        )
        return grpc.intercept_channel(channel, _BearerToken(self.token)) if self.token else channel

    def aio_channel(self) -> grpc.aio.Channel:
        """An asyncio channel to the daemon."""
        target, credentials = grpc_target(self.target), self._credentials()
        interceptors = [_AioBearerToken(self.token)] if self.token else None
        if credentials is not None:
            return grpc.aio.secure_channel(target, credentials, interceptors=interceptors)
        return grpc.aio.insecure_channel(target, interceptors=interceptors)


def add_arguments(parser: argparse.ArgumentParser, default_target: str) -> None:
    """The options every client command takes to reach the daemon."""
    parser.add_argument(
        "--target", default=default_target, help=f"daemon address (default {default_target})"
    )
    parser.add_argument(
        "--tls-ca", type=Path, help="CA certificate to check the daemon's TLS certificate with"
    )
    parser.add_argument("--tls-cert", type=Path, help="client certificate for mTLS")
    parser.add_argument("--tls-key", type=Path, help="the client certificate's private key")
    parser.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding a bearer token (or set {TOKEN_VARIABLE}; never pass it as an argument)",
    )
