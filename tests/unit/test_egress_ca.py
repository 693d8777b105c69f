"""EgressCA: real TLS handshakes against its leaf certificates, and the files it keeps on disk."""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from daemon.egress import ca as ca_module
from daemon.egress.ca import EgressCA
from daemon.errors import TooljailError


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "egress-ca"


@pytest.fixture
def ca(folder: Path) -> EgressCA:
    return EgressCA.load_or_create(folder)


def handshake(
    ca: EgressCA, host: str, server_hostname: str, trusted: EgressCA | None = None
) -> x509.Certificate:
    """Connect a client that trusts only `trusted` (by default the CA itself) to
    `ca.server_context(host)` over a socket pair; the leaf the server presented."""
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_context.load_verify_locations(cadata=(trusted or ca).certificate_pem.decode())
    server_context = ca.server_context(host)
    client_end, server_end = socket.socketpair()
    server_error: list[BaseException] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(server_end, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as error:
            server_error.append(error)

    server = threading.Thread(target=serve)
    server.start()
    try:
        with client_context.wrap_socket(client_end, server_hostname=server_hostname) as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None
            tls.sendall(b"x")
            return x509.load_der_x509_certificate(der)
    finally:
        client_end.close()
        server.join(timeout=10)
        server_end.close()


def test_a_client_trusting_only_the_ca_accepts_the_leaf_for_its_host(ca: EgressCA) -> None:
    leaf = handshake(ca, "example.test", "example.test")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["example.test"]
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "example.test"
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
    assert lifetime <= datetime.timedelta(days=7, hours=1)


def test_the_leaf_does_not_verify_for_another_host(ca: EgressCA) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match=r"other\.test"):
        handshake(ca, "example.test", "other.test")


def test_a_leaf_from_another_ca_is_refused(ca: EgressCA, tmp_path: Path) -> None:
    stranger = EgressCA.load_or_create(tmp_path / "another-ca")
    assert stranger.certificate_pem != ca.certificate_pem
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(stranger, "example.test", "example.test", trusted=ca)


def test_names_are_lower_cased(ca: EgressCA) -> None:
    leaf = handshake(ca, "API.Example.TEST", "api.example.test")
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api.example.test"]
    assert ca.server_context("API.Example.TEST") is ca.server_context("api.example.test")


@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_an_ip_literal_gets_an_ip_address_entry(ca: EgressCA, address: str) -> None:
    leaf = handshake(ca, address, address)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [address]
    assert san.get_values_for_type(x509.DNSName) == []


def test_a_long_name_is_cut_in_the_common_name_only(ca: EgressCA) -> None:
    host = ".".join(["a" * 63, "b" * 63, "c" * 20, "test"])
    leaf = handshake(ca, host, host)
    assert leaf.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == host[:64]
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [host]


@pytest.mark.parametrize(
    ("host", "complaint"),
    [
        ("", "empty"),
        ("a" * 254, "longer than 253"),
        ("exa mple.test", "not a host name"),
        ("exa_mple.test", "not a host name"),
        ("exämple.test", "not a host name"),
        ("*.example.test", "not a host name"),
        ("example..test", "empty label"),
        ("a" * 64 + ".test", "longer than 63"),
        ("999.1.1.1", "not a valid one"),
        ("1.2.3", "not a valid one"),
        ("010.0.0.1", "not a valid one"),
        (":::1", "not a valid one"),
        ("[::1]", "not a valid one"),
        ("fe80::1%eth0", "zone index"),
    ],
)
def test_hosts_that_are_not_plain_names_or_addresses_are_refused(
    ca: EgressCA, host: str, complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        ca.server_context(host)


def test_the_context_is_cached_per_host_and_requires_tls_1_2(ca: EgressCA) -> None:
    context = ca.server_context("example.test")
    assert ca.server_context("example.test") is context
    assert ca.server_context("other.test") is not context
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_the_cache_is_bounded(ca: EgressCA) -> None:
    first = ca.server_context("h0.test")
    for i in range(1, ca_module.CACHE_SIZE + 1):
        ca.server_context(f"h{i}.test")
    assert ca.server_context("h0.test") is not first


def test_a_leaf_near_expiry_is_minted_again(ca: EgressCA, monkeypatch: pytest.MonkeyPatch) -> None:
    context = ca.server_context("example.test")
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=6, hours=1)
    monkeypatch.setattr(ca_module, "_utcnow", lambda: later)
    assert ca.server_context("example.test") is not context


def test_no_leaf_file_is_left_behind(ca: EgressCA, folder: Path) -> None:
    ca.server_context("example.test")
    assert sorted(p.name for p in folder.iterdir()) == ["ca.key", "ca.pem"]


def test_the_files_have_private_modes(ca: EgressCA, folder: Path) -> None:
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    key, cert = folder / "ca.key", folder / "ca.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(cert.stat().st_mode) == 0o644
    for path in (folder, key, cert):
        assert path.stat().st_uid == os.geteuid()
    assert cert.read_bytes() == ca.certificate_pem


def test_the_ca_certificate_is_a_constrained_ca(ca: EgressCA) -> None:
    certificate = x509.load_pem_x509_certificate(ca.certificate_pem)
    assert certificate.subject == certificate.issuer
    [common_name] = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert isinstance(common_name.value, str)
    assert common_name.value.startswith("tooljail egress CA ")
    assert len(common_name.value.removeprefix("tooljail egress CA ")) == 8
    constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical
    assert (constraints.value.ca, constraints.value.path_length) == (True, 0)
    usage = certificate.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical
    assert usage.value.key_cert_sign
    assert usage.value.crl_sign
    assert not usage.value.digital_signature
    certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    lifetime = certificate.not_valid_after_utc - certificate.not_valid_before_utc
    assert datetime.timedelta(days=3650) <= lifetime <= datetime.timedelta(days=3651)


def test_reloading_gives_the_same_ca(ca: EgressCA, folder: Path) -> None:
    again = EgressCA.load_or_create(folder)
    assert again.certificate_pem == ca.certificate_pem
    # The reloaded key signs leaves that clients of the first certificate accept.
    handshake(again, "example.test", "example.test")


def test_a_symlinked_key_is_refused(ca: EgressCA, folder: Path, tmp_path: Path) -> None:
    key = folder / "ca.key"
    moved = tmp_path / "elsewhere.key"
    key.rename(moved)
    key.symlink_to(moved)
    with pytest.raises(TooljailError, match="symbolic link"):
        EgressCA.load_or_create(folder)


def test_a_key_readable_by_others_is_refused(ca: EgressCA, folder: Path) -> None:
    (folder / "ca.key").chmod(0o640)
    with pytest.raises(TooljailError, match="chmod 600"):
        EgressCA.load_or_create(folder)


def test_a_key_owned_by_someone_else_is_refused(ca: EgressCA, folder: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(folder / "ca.key", 65534, 65534)
    with pytest.raises(TooljailError, match="owned by uid 65534"):
        EgressCA.load_or_create(folder)


def test_a_folder_owned_by_someone_else_is_refused(
    ca: EgressCA, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: folder.stat().st_uid + 1)
    with pytest.raises(TooljailError, match="chown"):
        EgressCA.load_or_create(folder)


def test_a_symlinked_folder_is_refused(ca: EgressCA, folder: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(TooljailError, match="symbolic link"):
        EgressCA.load_or_create(link)


def test_a_folder_others_can_write_is_refused(ca: EgressCA, folder: Path) -> None:
    folder.chmod(0o777)
    with pytest.raises(TooljailError, match="chmod 700"):
        EgressCA.load_or_create(folder)


def test_a_file_in_place_of_the_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(TooljailError, match="not a directory"):
        EgressCA.load_or_create(path)


@pytest.mark.parametrize("remove", ["ca.key", "ca.pem"])
def test_only_one_of_the_two_files_is_refused(ca: EgressCA, folder: Path, remove: str) -> None:
    (folder / remove).unlink()
    with pytest.raises(TooljailError, match=f"{remove} does not"):
        EgressCA.load_or_create(folder)
    assert not (folder / remove).exists()  # nothing regenerated behind the user's back


def test_a_certificate_from_another_ca_is_refused(folder: Path, tmp_path: Path) -> None:
    EgressCA.load_or_create(folder)
    other = EgressCA.load_or_create(tmp_path / "other")
    (folder / "ca.pem").write_bytes(other.certificate_pem)
    with pytest.raises(TooljailError, match="does not belong"):
        EgressCA.load_or_create(folder)


def test_concurrent_first_starts_agree_on_one_ca(folder: Path) -> None:
    folder.mkdir(mode=0o700)
    results: list[bytes] = []

    def start() -> None:
        results.append(EgressCA.load_or_create(folder).certificate_pem)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == 4
    assert len(set(results)) == 1
