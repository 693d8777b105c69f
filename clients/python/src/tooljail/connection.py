"""Where the daemon is and how to prove who we are: from arguments, else the environment.

TOOLJAIL_TARGET: `unix:///run/tooljail/tooljail.sock` (the default; the principal is the socket
peer's user) or `host:port` (TCP: with a bearer token, TOOLJAIL_TOKEN, and/or TLS files for mTLS).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

DEFAULT_TARGET = "unix:///run/tooljail/tooljail.sock"
TARGET_VARIABLE = "TOOLJAIL_TARGET"
TOKEN_VARIABLE = "TOOLJAIL_TOKEN"  # noqa: S105 - a variable's name


@dataclass(frozen=True)
class Connection:
    """How to reach the daemon."""

    target: str
    """`unix:///path`, `unix:/path`, or `host:port`."""
    token: str = ""
    """Bearer token for a TCP listener that wants one (never put it on a command line)."""
    ca_file: Path | None = None
    """Roots that sign the daemon's certificate (TLS)."""
    cert_file: Path | None = None
    """The client's certificate (mTLS), with `key_file`."""
    key_file: Path | None = None

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
        def read(path: Path | None) -> bytes | None:
            return path.read_bytes() if path is not None else None

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.ca_file),
            private_key=read(self.key_file),
            certificate_chain=read(self.cert_file),
        )

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),) if self.token else ()

    def channel(self) -> grpc.Channel:
        """A blocking channel."""
        if self.secure:
            return grpc.secure_channel(self.grpc_target, self.credentials())
        return grpc.insecure_channel(self.grpc_target)

    def aio_channel(self) -> grpc.aio.Channel:
        """An asyncio channel."""
        if self.secure:
            return grpc.aio.secure_channel(self.grpc_target, self.credentials())
        return grpc.aio.insecure_channel(self.grpc_target)
