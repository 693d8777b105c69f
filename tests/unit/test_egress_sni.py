"""ClientHelloReader: real ClientHellos from Python's own TLS client, fed whole and byte by byte,
and hostile bytes that must end in a verdict or ValueError, never anything else."""

from __future__ import annotations

import ssl
import sys
import warnings
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.egress.sni import ClientHelloReader, HelloVerdict


def client_hello(server_hostname: str | None) -> bytes:
    """The first flight of a real TLS client (nothing is sent anywhere: memory BIOs)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if server_hostname is None:
        context.check_hostname = False
    client = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), False, server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


CLIENT_HELLO = client_hello("fuzz.example.test")


def feed_bytewise(data: bytes) -> HelloVerdict:
    reader = ClientHelloReader()
    for i in range(len(data)):
        verdict = reader.feed(data[i : i + 1])
        if verdict is not None:
            assert i == len(data) - 1, "a verdict before the ClientHello was complete"
            return verdict
    raise AssertionError("no verdict after the whole ClientHello")


@pytest.mark.parametrize(
    ("hostname", "expected"),
    [
        ("example.test", "example.test"),
        ("API.Example.TEST", "api.example.test"),
        ("a" * 63 + "." + "b" * 63 + ".test", "a" * 63 + "." + "b" * 63 + ".test"),
    ],
)
def test_sni_is_read_from_a_whole_client_hello(hostname: str, expected: str) -> None:
    assert ClientHelloReader().feed(client_hello(hostname)) == HelloVerdict(True, expected)


def test_sni_is_read_byte_by_byte() -> None:
    assert feed_bytewise(client_hello("example.test")) == HelloVerdict(True, "example.test")


def test_a_client_hello_without_sni_is_tls_without_a_name() -> None:
    hello = client_hello(None)
    assert ClientHelloReader().feed(hello) == HelloVerdict(True, None)
    assert feed_bytewise(hello) == HelloVerdict(True, None)


def test_an_ip_address_is_not_sent_as_sni() -> None:
    assert ClientHelloReader().feed(client_hello("192.0.2.1")) == HelloVerdict(True, None)


def test_an_old_tls_1_0_client_is_still_recognised() -> None:
    """Version negotiation runs before the SNI callback; the reader must not refuse old clients."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_ciphers("ALL:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSVersion.TLSv1 is deprecated
        context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1
    client = context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(), False, "old.test")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    hello = outgoing.read()
    assert hello[9:11] == b"\x03\x01"  # the ClientHello offers TLS 1.0 at most
    assert ClientHelloReader().feed(hello) == HelloVerdict(True, "old.test")


def test_the_verdict_is_repeated_and_later_bytes_are_ignored() -> None:
    reader = ClientHelloReader()
    verdict = reader.feed(client_hello("example.test"))
    assert reader.feed(b"\x17\x03\x03 anything") == verdict


@pytest.mark.parametrize(
    "first", [b"GET / HTTP/1.1\r\n", b"G", b"SSH-2.0-OpenSSH_9.6\r\n", b"\x16", b"\x00"]
)
def test_what_does_not_start_like_tls_is_not_tls(first: bytes) -> None:
    reader = ClientHelloReader()
    if first == b"\x16":
        # One byte of a handshake record: the record version decides.
        assert reader.feed(first) is None
        assert reader.feed(b"\x01") == HelloVerdict(False, None)
    else:
        assert reader.feed(first) == HelloVerdict(False, None)


def test_an_old_sslv2_style_hello_is_not_tls() -> None:
    assert ClientHelloReader().feed(b"\x80\x2e\x01\x03\x01") == HelloVerdict(False, None)


def test_garbage_after_a_tls_record_header_is_refused() -> None:
    reader = ClientHelloReader()
    with pytest.raises(ValueError, match="malformed TLS ClientHello"):
        reader.feed(b"\x16\x03\x01\x00\x10" + b"\xff" * 16)
    with pytest.raises(ValueError, match="malformed TLS ClientHello"):
        reader.feed(b"")  # the failure sticks


def test_a_truncated_client_hello_asks_for_more() -> None:
    hello = client_hello("example.test")
    reader = ClientHelloReader()
    assert reader.feed(hello[:100]) is None
    assert reader.feed(hello[100:]) == HelloVerdict(True, "example.test")


def test_a_client_hello_spread_over_records_is_read() -> None:
    """TLS may fragment a handshake message over several records; OpenSSL reassembles it."""
    hello = client_hello("example.test")
    version, body = hello[1:3], hello[5:]
    records = b"".join(
        b"\x16" + version + len(part).to_bytes(2, "big") + part
        for part in (body[i : i + 40] for i in range(0, len(body), 40))
    )
    assert ClientHelloReader().feed(records) == HelloVerdict(True, "example.test")


@pytest.mark.parametrize("chunk", [20000, 1000, 1])
def test_no_verdict_past_max_bytes(chunk: int) -> None:
    """A ClientHello that claims to be huge is refused once MAX_BYTES are in, not buffered."""
    # A ClientHello header announcing 0xffff bytes, carried in full-size handshake records.
    body = b"\x01\x00\xff\xff" + b"\x03\x03" + b"\x00" * 0xFFFF
    records = b"".join(
        b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
        for part in (body[i : i + 16384] for i in range(0, len(body), 16384))
    )[:20000]
    reader = ClientHelloReader()
    with pytest.raises(ValueError, match=f"within {ClientHelloReader.MAX_BYTES} bytes"):
        for offset in range(0, len(records), chunk):
            assert reader.feed(records[offset : offset + chunk]) is None
            assert offset + chunk <= ClientHelloReader.MAX_BYTES
    with pytest.raises(ValueError, match="within"):
        reader.feed(b"\x00")


def test_repeated_record_headers_never_yield_a_verdict() -> None:
    with pytest.raises(ValueError):
        ClientHelloReader().feed(b"\x16\x03\x01" * 6667)


def test_a_non_ascii_server_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython cannot hand a non-ASCII name to the callback: it reports an unraisable
    UnicodeDecodeError and fails the handshake, which the reader turns into ValueError."""
    reported: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    hello = client_hello("xxxxxx.test").replace(b"xxxxxx", "éé".encode() + b"xx")
    with pytest.raises(ValueError, match="server name is not ASCII"):
        ClientHelloReader().feed(hello)
    assert [r.exc_type for r in reported] == [UnicodeDecodeError]


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from([b"", b"\x16\x03\x01", b"\x16\x03\x03", b"\x16\x03\x01\x02\x00\x01"]),
    chunks=st.lists(st.binary(max_size=600), max_size=8),
)
def test_hostile_bytes_end_in_a_verdict_none_or_value_error(
    prefix: bytes, chunks: list[bytes]
) -> None:
    reader = ClientHelloReader()
    for chunk in [prefix, *chunks]:
        try:
            verdict = reader.feed(chunk)
        except ValueError:
            return
        assert verdict is None or isinstance(verdict, HelloVerdict)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_client_hellos_end_in_a_verdict_none_or_value_error(data: st.DataObject) -> None:
    hello = bytearray(CLIENT_HELLO)
    for _ in range(data.draw(st.integers(1, 8))):
        hello[data.draw(st.integers(0, len(hello) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(hello)))
    reader = ClientHelloReader()
    reported: list[Any] = []
    try:
        # A mutated name byte above 0x7f is the documented unraisable UnicodeDecodeError.
        with mock.patch.object(sys, "unraisablehook", reported.append):
            verdict = reader.feed(bytes(hello[:cut]))
            if verdict is None:
                verdict = reader.feed(bytes(hello[cut:]))
    except ValueError:
        return
    finally:
        assert all(r.exc_type is UnicodeDecodeError for r in reported)
    assert verdict is None or isinstance(verdict, HelloVerdict)
    if verdict is not None and verdict.server_name is not None:
        assert verdict.server_name == verdict.server_name.lower()
