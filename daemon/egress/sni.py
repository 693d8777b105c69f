"""Whether a CONNECT tunnel carries TLS, and which server name (SNI) its ClientHello asks for.

The proxy must decide before forwarding anything, and a hand-written TLS parser is exactly the
kind of code hostile input breaks. So OpenSSL parses: the bytes go into a server-side
`ssl.SSLObject` over memory BIOs, whose context has an `sni_callback`. OpenSSL calls it once it
has a complete, well-formed ClientHello, with the name or None when the client sent no SNI; the
callback records that and answers with an alert, so the handshake stops right there, the same way
whether or not a certificate could have been chosen (without the alert, OpenSSL 3 would go on and
fail later with "no suitable signature algorithm"). Nothing is ever sent anywhere: what OpenSSL
writes (the alert) stays in a memory BIO that is never read; the caller forwards the original
bytes upstream itself.

One CPython quirk remains: a server name that is not ASCII never reaches the callback; CPython
reports the UnicodeDecodeError through `sys.unraisablehook` (stderr by default) and the handshake
fails, which this reader turns into ValueError like any other malformed hello.
"""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass

__all__ = ["ClientHelloReader", "HelloVerdict"]

_HANDSHAKE_RECORD = 0x16
_TLS_MAJOR_VERSION = 0x03


@dataclass(frozen=True)
class HelloVerdict:
    """What the first bytes of a tunnel turned out to be."""

    is_tls: bool
    """The tunnel starts with a TLS handshake record."""
    server_name: str | None
    """The SNI, lower-cased; None when not TLS or when the ClientHello has no SNI.

    As sent: ASCII without NUL, but otherwise unchecked (spaces, control characters, a trailing
    dot); validate it as a host name before comparing or using it.
    """


class _Probe(ssl.SSLObject):
    """The SSLObject the inspection context creates, with room for what the callback saw."""

    hello_complete: bool = False
    server_name: str | None = None


def _on_server_name(probe: ssl.SSLObject, name: str | None, _context: ssl.SSLContext) -> int:
    """Record the ClientHello's verdict and stop the handshake with an alert (never sent)."""
    if isinstance(probe, _Probe):
        probe.hello_complete = True
        probe.server_name = name
    return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE


@functools.cache
def _inspection_context() -> ssl.SSLContext:
    """One shared server context: it holds no certificate and only ever reads ClientHellos."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # Version negotiation runs before the callback: an old client must still be recognised,
    # whatever the policy later decides about it.
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.sslobject_class = _Probe
    context.sni_callback = _on_server_name
    return context


class ClientHelloReader:
    """Reads one tunnel's first bytes, fed as they arrive, until it can say what they are.

    Not thread-safe: one reader per tunnel.
    """

    MAX_BYTES = 16384
    """A ClientHello not complete after this many bytes is refused rather than buffered."""

    def __init__(self) -> None:
        self._head = b""
        self._fed = 0
        self._verdict: HelloVerdict | None = None
        self._failure: str | None = None
        self._incoming = ssl.MemoryBIO()
        # What OpenSSL writes (the alert) lands here and is never read: nothing is ever sent.
        probe = _inspection_context().wrap_bio(self._incoming, ssl.MemoryBIO(), server_side=True)
        if not isinstance(probe, _Probe):
            raise TypeError(f"the inspection context made a {type(probe).__name__}")
        self._probe = probe

    def feed(self, data: bytes) -> HelloVerdict | None:
        """The verdict once the bytes so far decide it, else None (feed more).

        After a verdict, further calls return it again.

        Raises:
            ValueError: the bytes start like TLS but are not a ClientHello OpenSSL accepts, or
                no complete ClientHello arrived within MAX_BYTES (raised again on later calls).
        """
        if self._failure is not None:
            raise ValueError(self._failure)
        if self._verdict is not None:
            return self._verdict
        room = max(0, self.MAX_BYTES + 1 - self._fed)
        self._fed += len(data)
        data = data[:room]  # a hello complete within MAX_BYTES needs nothing beyond them
        if len(self._head) < 2:
            self._head += data[: 2 - len(self._head)]
            if self._head[:1] not in (b"", bytes([_HANDSHAKE_RECORD])) or (
                len(self._head) == 2 and self._head[1] != _TLS_MAJOR_VERSION
            ):
                return self._decide(HelloVerdict(is_tls=False, server_name=None))
        if data:
            self._incoming.write(data)
        verdict = self._handshake()
        if verdict is None and self._fed > self.MAX_BYTES:
            raise self._failed(f"no complete TLS ClientHello within {self.MAX_BYTES} bytes")
        return verdict

    def _handshake(self) -> HelloVerdict | None:
        try:
            self._probe.do_handshake()
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLError as error:
            if self._probe.hello_complete:
                name = self._probe.server_name
                return self._decide(HelloVerdict(True, None if name is None else name.lower()))
            reason = error.reason or str(error)
            if reason == "CALLBACK_FAILED":  # failed before the callback: CPython's decode
                reason = "the server name is not ASCII"
            raise self._failed(f"malformed TLS ClientHello ({reason})") from None
        # Unreachable with a context that holds no certificate and a callback that always
        # alerts; refused rather than trusted if OpenSSL ever completes a handshake anyway.
        raise self._failed("the TLS handshake completed unexpectedly")

    def _decide(self, verdict: HelloVerdict) -> HelloVerdict:
        self._verdict = verdict
        return verdict

    def _failed(self, reason: str) -> ValueError:
        """The error to raise now, remembered so that later calls raise it again."""
        self._failure = reason
        return ValueError(reason)


#: Bytes of a TLS record header: content type, protocol version, length.
TLS_HEADER = 5
_MAX_RECORD = (1 << 14) + 2048  # TLSCiphertext may exceed the plaintext limit by 2048


def tls_records(data: bytes) -> bool:
    """Whether `data` is a run of TLS records (change_cipher_spec, alert, handshake,
    application_data; version 3.x; a legal length), the last of which may be incomplete."""
    at = 0
    while at < len(data):
        header = data[at : at + TLS_HEADER]
        if header[0] not in (20, 21, 22, 23) or (len(header) > 1 and header[1] != 3):
            return False
        if len(header) < TLS_HEADER:
            return True
        length = int.from_bytes(header[3:5], "big")
        if length > _MAX_RECORD:
            return False
        at += TLS_HEADER + length
    return True
