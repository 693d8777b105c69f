"""Where a proxied connection wants to go, read strictly from what the sandbox sent.

Names are kept as ASCII host names (IDNA already applied by the client); anything else, a port
outside 1-65535 or an authority with user information is refused rather than guessed at.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_NUMERIC_LABEL = re.compile(r"0x[0-9a-f]*|[0-9]+")
MAX_NAME = 253


class TargetError(ValueError):
    """The request names no destination the proxy can use; the message says why."""


@dataclass(frozen=True)
class Target:
    """A destination: a lower-case host name or an IP literal, and a port."""

    host: str
    port: int

    @property
    def is_address(self) -> bool:
        """The host is an IP literal (no name resolution)."""
        try:
            ipaddress.ip_address(self.host)
        except ValueError:
            return False
        return True

    def authority(self) -> str:
        """host:port as a request line carries it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def normalize_host(host: str) -> str:
    """A host name (lower-case, no trailing dot) or a canonical IP literal."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    if text != host:
        raise TargetError(f"{host!r} is not an IPv6 address")
    name = text.lower().removesuffix(".")
    if not name or len(name) > MAX_NAME or not all(_LABEL.fullmatch(p) for p in name.split(".")):
        raise TargetError(f"{host!r} is not a host name (ASCII letters, digits, '-', '.')")
    if _NUMERIC_LABEL.fullmatch(name.rsplit(".", 1)[-1]):
        # inet_aton would read it as an address (0x7f.1 is 127.0.0.1): neither, so refused.
        raise TargetError(f"{host!r} is neither a host name nor an IPv4 address")
    return name


def _port(text: str, default: int | None) -> int:
    if not text:
        if default is None:
            raise TargetError("the destination has no port")
        return default
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise TargetError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def parse_authority(authority: str, default_port: int | None = None) -> Target:
    """host:port of a CONNECT request (or a Host header, with `default_port`)."""
    if "@" in authority or "/" in authority or not authority.isascii():
        raise TargetError(f"{authority!r} is not host:port")
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise TargetError(f"{authority!r} has an unclosed '['")
        host, rest = authority[: end + 1], authority[end + 1 :]
        if rest and not rest.startswith(":"):
            raise TargetError(f"{authority!r} is not [address]:port")
        port = rest[1:]
    else:
        host, _, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    return Target(normalize_host(host), _port(port, default_port))


def parse_absolute_url(url: str) -> tuple[str, Target, str]:
    """scheme, destination and path (with query) of an absolute-form HTTP request target."""
    if not url.isascii():
        raise TargetError("the request target is not ASCII")
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
    except ValueError as exc:  # e.g. an unbalanced [ in the host
        raise TargetError(f"the request target is not a URL ({exc})") from exc
    if parts.scheme != "http":
        raise TargetError(
            f"a proxy request for scheme {parts.scheme or '(none)'!r}: only http:// is forwarded "
            "as a request; https goes through CONNECT"
        )
    if not netloc:
        raise TargetError("the request target has no host (send an absolute http:// URL)")
    target = parse_authority(netloc, 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, target, path


#: Escapes that would let a server read a path differently from the proxy (an encoded dot,
#: slash or backslash), and bytes no request target carries.
_AMBIGUOUS = re.compile(r"%(2e|2f|5c|00)|\\|[\x00-\x20\x7f]", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
#: A path whose escapes are all of printable ASCII other than '%' (so %25, %u002e, %c0%ae and
#: a lone '%' are out) and that has no ';' (Tomcat and Spring read "..;" as "..").
_PLAIN_ESCAPES = re.compile(r"(?:[^%;]|%(?:2[0-46-9a-fA-F]|[3-6][0-9a-fA-F]|7[0-9a-eA-E]))*")


def normalize_path(target: str) -> str:
    """An origin-form request target as the server will read it: dot segments removed, runs of
    slashes collapsed; refused (TargetError) when it holds an escape that could be read two
    ways (%2e, %2f, %5c, %00), a backslash or a control byte, or does not start with '/'.
    Rules and credentials are matched against this, and this is what goes upstream."""
    if not target.startswith("/"):
        raise TargetError("the request target must be a path starting with '/'")
    path, sep, query = target.partition("?")
    if _AMBIGUOUS.search(path) or _CONTROL.search(query) or not _PLAIN_ESCAPES.fullmatch(path):
        raise TargetError(
            "the path holds an escaped dot, slash, backslash or percent sign, an escape of a "
            "non-ASCII byte or not of two hex digits, a ';', a backslash or a control byte "
            "(servers read those differently); send it plainly"
        )
    segments: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in (".", ""):
            segments.append(segment)
    normal = "/" + "/".join(segments)
    if path.endswith(("/", "/.", "/..")) and normal != "/":
        normal += "/"
    return normal + sep + query
