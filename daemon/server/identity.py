"""Who is calling, decided by the transport only: never by request fields or free metadata.

In order: a verified mTLS client certificate (its URI SAN, e.g. a SPIFFE id; its Common Name only
when auth.mtls_use_cn says so, and then as "cn:<name>", so a certificate can never take the name
of a configured principal); a bearer token from the configuration (the `authorization` metadata,
mapped to its principal); the Unix socket's configured principal. A TCP caller with none of these
is refused. Admin principals are the ones the configuration lists, nothing implied.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import Literal

import grpc

from daemon.config import AuthSettings
from daemon.errors import Unauthenticated
from daemon.models import Caller, Transport


def _transport(peer: str) -> Literal["unix", "tcp", "unknown"]:
    kind = peer.split(":", 1)[0] if ":" in peer else "unknown"
    if kind in ("ipv4", "ipv6"):
        return "tcp"
    return "unix" if kind == "unix" else "unknown"


TCP_REFUSAL = (
    "callers over TCP must authenticate with an mTLS client certificate or a bearer token: "
    "the metadata 'authorization: Bearer <token>' with a token of the daemon's configuration "
    "(auth.tokens)"
)

Metadata = Iterable[tuple[str, str | bytes]] | None


def _authorization(metadata: Metadata) -> str:
    value = dict(metadata or ()).get("authorization")
    return value if isinstance(value, str) else ""


def _first(auth: Mapping[str, Iterable[bytes]], key: str) -> list[str]:
    return [value.decode(errors="replace") for value in auth.get(key, [])]


class CallerResolver:
    """Resolves the principal of each call."""

    def __init__(self, auth: AuthSettings) -> None:
        self._unix_principal = auth.unix_principal
        self._admins = frozenset(auth.admin_principals)
        self._use_cn = auth.mtls_use_cn
        self._tokens = [
            (hashlib.sha256(secret.get_secret_value().encode()).digest(), principal)
            for principal, secret in auth.tokens.items()
        ]

    def _by_token(self, token: str) -> str | None:
        digest = hashlib.sha256(token.encode()).digest()
        found = None
        for known, principal in self._tokens:  # compare with every entry: constant time per token
            if hmac.compare_digest(known, digest):
                found = principal
        return found

    def _by_bearer(self, authorization: str) -> str | None:
        scheme, _, token = authorization.partition(" ")
        return self._by_token(token.strip()) if scheme.lower() == "bearer" else None

    def has_valid_token(self, metadata: Metadata) -> bool:
        """Whether the call's metadata carries a bearer token of this daemon."""
        authorization = _authorization(metadata)
        return bool(authorization) and self._by_bearer(authorization) is not None

    def resolve(self, context: grpc.aio.ServicerContext[object, object]) -> Caller:
        """The caller, or Unauthenticated."""
        transport = _transport(context.peer() or "")
        auth = context.auth_context() or {}
        if _first(auth, "transport_security_type") == ["ssl"]:
            # Only URI SANs (gRPC lists them apart): an email or DNS SAN may look like a URI
            # ("email:spiffe://corp/admin") and a CA may let anyone have one.
            uris = _first(auth, "peer_uri")
            names = uris or [f"cn:{cn}" for cn in _first(auth, "x509_common_name") if self._use_cn]
            if names:
                return self._caller(names[0], "tcp+mtls")
            if _first(auth, "x509_common_name"):
                raise Unauthenticated(
                    "the client certificate has no URI SAN (a SPIFFE id, for example) to name its "
                    "principal; issue one with a URI SAN, or have the operator set "
                    "auth.mtls_use_cn"
                )
        authorization = _authorization(context.invocation_metadata())
        if authorization:
            principal = self._by_bearer(authorization)
            if principal is None:
                raise Unauthenticated("the bearer token is not valid for this daemon")
            return self._caller(principal, transport)
        if transport == "unix":
            return self._caller(self._unix_principal, "unix")
        raise Unauthenticated(TCP_REFUSAL)

    def _caller(self, principal: str, transport: Transport) -> Caller:
        return Caller(principal=principal, transport=transport, admin=principal in self._admins)
