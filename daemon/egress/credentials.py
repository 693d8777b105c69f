"""Secrets the proxy adds at the edge: a header for a few destinations, never seen by the sandbox.

A rule binds one secret (read once at start from a file only the daemon may read) to a host
pattern and port, optionally a method and a path prefix, as one header. The proxy terminates TLS
only for destinations some rule names; everything else is tunnelled untouched.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from daemon.errors import TooljailError

_HEADER_NAME = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


class CredentialRule(BaseModel):
    """One secret bound to one kind of destination (configuration)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(description="Host name, or *.domain for its subdomains (not itself).")
    port: int = Field(default=443, gt=0, lt=65536)
    methods: tuple[str, ...] = Field(default=(), description="Empty: every method.")
    path_prefix: str = "/"
    header: str = "Authorization"
    value_prefix: str = Field(default="Bearer ", description="Put before the secret.")
    secret_file: Path

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        name = value.lower().removesuffix(".")
        bare = name.removeprefix("*.")
        if not bare or "*" in bare or not all(part for part in bare.split(".")):
            raise ValueError(f"{value!r}: a host name, or *. followed by a domain")
        return name

    @field_validator("header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not value or not set(value) <= _HEADER_NAME:
            raise ValueError(f"{value!r} is not an HTTP header name")
        return value

    @field_validator("methods")
    @classmethod
    def _methods(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(method.upper() for method in value)

    def covers_host(self, host: str, port: int) -> bool:
        """Whether connections to host:port are intercepted for this rule."""
        if port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and fnmatch.fnmatchcase(host, self.host)
        return host == self.host

    def covers_request(self, method: str, path: str) -> bool:
        """Whether a request (on a covered destination) gets the header."""
        if self.methods and method.upper() not in self.methods:
            return False
        return path.startswith(self.path_prefix)


@dataclass(frozen=True)
class _Bound:
    rule: CredentialRule
    header: tuple[bytes, bytes]
    secret: bytes


def read_secret(path: Path) -> bytes:
    """A secret file's content (one line, surrounding whitespace dropped); refused when anyone
    but the daemon's user could read or replace it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TooljailError(f"credential secret {path}: {exc.strerror}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise TooljailError(
                f"credential secret {path} must be a file owned by the daemon's user"
            )
        if info.st_mode & 0o077:
            raise TooljailError(
                f"credential secret {path} is readable by others (mode "
                f"{stat.S_IMODE(info.st_mode):o}); chmod 600 it"
            )
        data = os.read(fd, 65536).strip()
    finally:
        os.close(fd)
    if not data or b"\n" in data or b"\r" in data:
        raise TooljailError(f"credential secret {path} must hold exactly one non-empty line")
    return data


class Credentials:
    """The configured rules with their secrets loaded."""

    def __init__(self, rules: list[CredentialRule]) -> None:
        self._bound = []
        for rule in rules:
            secret = read_secret(rule.secret_file)
            header = (rule.header.encode(), rule.value_prefix.encode() + secret)
            self._bound.append(_Bound(rule, header, secret))

    def intercepts(self, host: str, port: int) -> bool:
        """Whether some rule names this destination (its TLS is then terminated)."""
        return any(bound.rule.covers_host(host, port) for bound in self._bound)

    def headers(self, host: str, port: int, method: str, path: str) -> list[tuple[bytes, bytes]]:
        """The headers to add to one request."""
        return [
            bound.header
            for bound in self._bound
            if bound.rule.covers_host(host, port) and bound.rule.covers_request(method, path)
        ]

    def secrets(self, host: str, port: int) -> list[bytes]:
        """The secrets bound to a destination: hidden in whatever comes back from it."""
        return [bound.secret for bound in self._bound if bound.rule.covers_host(host, port)]
