"""tooljail's own certificate authority, for the destinations the egress proxy terminates TLS for.

The proxy injects a credential header into requests to configured destinations, so it must speak
TLS to the sandbox as that destination: it presents a short-lived leaf certificate signed by this
CA, which the sandbox (and nothing else) is told to trust. The CA key is the one secret here: it is
created once, never half-written (temporary name, fsync, rename), readable by its owner only, and
refused when anything about its file or folder would let another user read or swap it. A CA that
is only half there is refused too: regenerating it would silently invalidate the trust already
handed out.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import ipaddress
import os
import re
import secrets
import ssl
import stat
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from daemon.errors import TooljailError

__all__ = ["EgressCA"]

KEY_FILE = "ca.key"
CERT_FILE = "ca.pem"
CACHE_SIZE = 256
CA_VALIDITY = datetime.timedelta(days=3650)
LEAF_VALIDITY = datetime.timedelta(days=7)
BACKDATE = datetime.timedelta(hours=1)
"""Certificates start an hour early, so a client whose clock lags a little still accepts them."""
REMINT_BEFORE = datetime.timedelta(days=1)
MAX_HOST = 253
MAX_CN = 64
"""RFC 5280's upper bound for a common name; the SAN carries the full host."""

_NAME = re.compile(r"[a-z0-9.-]+")
_IP_LOOKING = re.compile(r"[0-9.]+")


def _utcnow() -> datetime.datetime:
    """The clock every validity period is computed from (one place to move in tests)."""
    return datetime.datetime.now(datetime.UTC)


def _host_entry(host: str) -> x509.GeneralName:
    """The SAN entry for `host`, after refusing anything that is not a plain name or IP literal.

    The host ends up in a certificate the sandbox trusts, so nothing is guessed at: an IP-looking
    name that is not a valid address (`999.1.1.1`, `010.0.0.1`) is refused, not minted as a name.
    """
    if not host:
        raise ValueError("the host is empty")
    if len(host) > MAX_HOST:
        raise ValueError(f"the host is longer than {MAX_HOST} characters")
    if ":" in host or _IP_LOOKING.fullmatch(host):
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"{host!r} looks like an IP address but is not a valid one") from None
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            raise ValueError(f"{host!r} has a zone index; a certificate cannot name one")
        return x509.IPAddress(address)
    name = host.lower()
    if not host.isascii() or not _NAME.fullmatch(name):
        raise ValueError(f"{host!r} is not a host name (ASCII letters, digits, '-' and '.' only)")
    if any(not 0 < len(label) <= 63 for label in name.split(".")):
        raise ValueError(f"{host!r} has an empty label or one longer than 63 characters")
    return x509.DNSName(name)


def _cache_key(entry: x509.GeneralName) -> str:
    """One key per certificate: `::1` and `0::1` are the same address."""
    return str(entry.value)


class EgressCA:
    """A loaded CA: hands out its certificate and TLS server contexts for intercepted hosts.

    Use `load_or_create`; contexts are cached per host and safe to share between threads.
    """

    def __init__(
        self, folder: Path, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate
    ) -> None:
        self._folder = folder
        self._key = key
        self._certificate = certificate
        self._lock = threading.Lock()
        self._contexts: OrderedDict[str, tuple[ssl.SSLContext, datetime.datetime]] = OrderedDict()

    def __repr__(self) -> str:
        return f"EgressCA({self._certificate.subject.rfc4514_string()!r}, folder={self._folder})"

    @classmethod
    def load_or_create(cls, folder: Path) -> EgressCA:
        """The CA kept in `folder`, created (with the folder, 0700) the first time.

        Raises:
            TooljailError: the folder or a file in it is unsafe, only one of the two files
                exists, or they do not belong together; the message says what to fix.
        """
        try:
            folder.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # checked below, whatever it is
        except OSError as error:
            raise TooljailError(f"cannot create {folder}: {error.strerror}") from error
        dir_fd = _open_folder(folder)
        try:
            # Two daemons starting at once must not each write half a CA: one creates, one loads.
            fcntl.flock(dir_fd, fcntl.LOCK_EX)
            has_key = _exists(KEY_FILE, dir_fd)
            has_cert = _exists(CERT_FILE, dir_fd)
            if has_key and has_cert:
                key, certificate = _load(folder, dir_fd)
            elif has_key or has_cert:
                present, missing = (KEY_FILE, CERT_FILE) if has_key else (CERT_FILE, KEY_FILE)
                raise TooljailError(
                    f"{folder / present} exists but {folder / missing} does not: restore the "
                    f"missing file, or remove {present} to create a new CA (every sandbox image "
                    "or client that trusts the old CA must then be given the new certificate)"
                )
            else:
                try:
                    key, certificate = _create(dir_fd)
                except OSError as error:
                    raise TooljailError(
                        f"cannot write the egress CA into {folder}: {error}"
                    ) from error
        finally:
            os.close(dir_fd)  # also releases the lock
        return cls(folder, key, certificate)

    @property
    def certificate_pem(self) -> bytes:
        """The CA certificate, PEM: what a client must trust to accept intercepted connections."""
        return self._certificate.public_bytes(serialization.Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context (TLS 1.2 or later) presenting a fresh leaf certificate for `host`.

        The same context object comes back for the same host until its leaf is within a day of
        expiry; the 256 most recently used hosts are kept.

        Raises:
            ValueError: `host` is not a plain host name or IP literal.
            OSError: the leaf could not pass through its temporary file in the CA folder.
        """
        entry = _host_entry(host)
        key = _cache_key(entry)
        now = _utcnow()
        with self._lock:
            cached = self._contexts.get(key)
            if cached is not None and cached[1] - now > REMINT_BEFORE:
                self._contexts.move_to_end(key)
                return cached[0]
        # Minting (key generation, signing, a file) happens outside the lock so that one slow
        # host does not hold up contexts for others; a lost race just discards one leaf.
        context, not_after = self._mint(entry, now)
        with self._lock:
            cached = self._contexts.get(key)
            if cached is not None and cached[1] - now > REMINT_BEFORE:
                context = cached[0]
            else:
                self._contexts[key] = (context, not_after)
            self._contexts.move_to_end(key)
            while len(self._contexts) > CACHE_SIZE:
                self._contexts.popitem(last=False)
        return context

    def _mint(
        self, entry: x509.GeneralName, now: datetime.datetime
    ) -> tuple[ssl.SSLContext, datetime.datetime]:
        host = _cache_key(entry)
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        not_after = min(now + LEAF_VALIDITY, self._certificate.not_valid_after_utc)
        ca_ski = self._certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:MAX_CN])]))
            .issuer_name(self._certificate.subject)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([entry]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski.value),
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        pem = leaf.public_bytes(serialization.Encoding.PEM) + leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # ssl can load a certificate only from a file: a 0600 file with an unpredictable name
        # in the CA's own folder, removed as soon as OpenSSL has read it.
        fd, path = tempfile.mkstemp(prefix=".leaf-", suffix=".pem", dir=self._folder)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(pem)
            context.load_cert_chain(path)
        finally:
            Path(path).unlink()
        return context, not_after


def _open_folder(folder: Path) -> int:
    """A descriptor of `folder`, after checking it is a private directory of ours."""
    try:
        before = os.lstat(folder)
    except OSError as error:
        raise TooljailError(f"cannot use {folder} for the egress CA: {error.strerror}") from None
    if stat.S_ISLNK(before.st_mode):
        raise TooljailError(
            f"{folder} is a symbolic link: point the egress CA setting at the real directory"
        )
    if not stat.S_ISDIR(before.st_mode):
        raise TooljailError(f"{folder} is not a directory: move it away or choose another folder")
    if before.st_uid != os.geteuid():
        raise TooljailError(
            f"{folder} is owned by uid {before.st_uid}, not by tooljail's uid {os.geteuid()}: "
            "chown it to that user or choose another folder"
        )
    if before.st_mode & 0o022:
        raise TooljailError(
            f"{folder} is writable by group or others (mode {stat.S_IMODE(before.st_mode):o}), "
            f"so they could swap the CA: chmod 700 {folder}"
        )
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise TooljailError(f"cannot open {folder}: {error.strerror}") from None
    after = os.fstat(fd)
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise TooljailError(f"{folder} was replaced while it was being checked: try again")
    return fd


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _read(folder: Path, name: str, dir_fd: int, *, secret: bool) -> bytes:
    """The contents of a regular file in the folder, never through a symbolic link.

    A secret must also be ours and unreadable by anyone else.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise TooljailError(
                f"{folder / name} is a symbolic link: replace it with the file itself"
            ) from None
        raise TooljailError(f"cannot read {folder / name}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TooljailError(f"{folder / name} is not a regular file")
        if secret and info.st_uid != os.geteuid():
            raise TooljailError(
                f"{folder / name} is owned by uid {info.st_uid}, not by tooljail's uid "
                f"{os.geteuid()}: chown it to that user"
            )
        if secret and info.st_mode & 0o077:
            raise TooljailError(
                f"{folder / name} is readable or writable by group or others (mode "
                f"{stat.S_IMODE(info.st_mode):o}): chmod 600 it, and consider the key leaked "
                "if others could log in"
            )
        return file.read()


def _load(folder: Path, dir_fd: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key_pem = _read(folder, KEY_FILE, dir_fd, secret=True)
    cert_pem = _read(folder, CERT_FILE, dir_fd, secret=False)
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
        certificate = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError) as error:
        raise TooljailError(f"the egress CA in {folder} cannot be read: {error}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TooljailError(
            f"{folder / KEY_FILE} is not an EC key: remove both files to start over"
        )
    if certificate.public_key() != key.public_key():
        raise TooljailError(
            f"{folder / CERT_FILE} does not belong to {folder / KEY_FILE}: restore the matching "
            "pair, or remove both to create a new CA"
        )
    if certificate.not_valid_after_utc <= _utcnow():
        raise TooljailError(
            f"the egress CA in {folder} expired on {certificate.not_valid_after_utc:%Y-%m-%d}: "
            "remove both files to create a new one and hand out its certificate"
        )
    return key, certificate


def _create(dir_fd: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = _utcnow()
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"tooljail egress CA {secrets.token_hex(4)}")]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # The key first: a crash between the two renames leaves a key without a certificate, which
    # load_or_create refuses with advice rather than overwriting.
    _write_atomically(KEY_FILE, key_pem, 0o600, dir_fd)
    _write_atomically(
        CERT_FILE, certificate.public_bytes(serialization.Encoding.PEM), 0o644, dir_fd
    )
    os.fsync(dir_fd)  # the renames themselves survive a crash
    return key, certificate


def _write_atomically(name: str, data: bytes, mode: int, dir_fd: int) -> None:
    """`name` appears whole or not at all: written under a temporary name, fsynced, renamed."""
    temporary = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, mode, dir_fd=dir_fd)
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow it
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
