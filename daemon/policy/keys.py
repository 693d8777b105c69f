"""The HMAC key that signs approval tokens: given in config, or kept in a file made on first start.

Whoever can read the key can mint approvals, and whoever can write it can swap it for one they know,
so a key file must be a regular file owned by the daemon's user with no group or other permissions.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import re
import secrets
import stat
from pathlib import Path

from daemon.errors import TooljailError

__all__ = [
    "KEY_BYTES",
    "MAX_KEY_BYTES",
    "KeyMaterialError",
    "load_key",
    "load_or_create_key",
    "parse_key",
]

KEY_BYTES = 32
"""Size of a generated key, and the least a given key must have (HMAC-SHA256's block strength)."""
MAX_KEY_BYTES = 4096
"""Anything larger is almost certainly the wrong file, not a key."""

_HEX = re.compile(r"[0-9a-fA-F]+")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")


class KeyMaterialError(TooljailError):
    """The approval key is missing, unsafe or unusable; the message says how to fix it."""


def parse_key(text: str) -> bytes:
    """Decode a key given directly in config.

    Accepts ``hex:<hex>``, ``base64:<base64>`` (standard or URL-safe alphabet), or either without a
    prefix. Without a prefix, a string of an even number of hex digits is read as hex: such a string
    is also valid base64, so the explicit prefix is the way to force base64.

    Raises:
        KeyMaterialError: the text is not hex or base64, or decodes to fewer than 32 bytes.
    """
    value = text.strip()
    kind, sep, rest = value.partition(":")
    if sep and kind in ("hex", "base64"):
        value = rest.strip()
    else:
        kind = "hex" if _HEX.fullmatch(value) and len(value) % 2 == 0 else "base64"
    try:
        if kind == "hex":
            key = bytes.fromhex(value)
        else:
            if not _BASE64.fullmatch(value):
                raise ValueError("not base64")
            padded = value + "=" * (-len(value) % 4)
            key = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (ValueError, binascii.Error):
        raise KeyMaterialError(
            f"the approval key in the configuration is not valid {kind}. Give {KEY_BYTES} or more "
            f'random bytes as hex or base64, e.g. the output of "openssl rand -hex {KEY_BYTES}".'
        ) from None
    _check_length(key, "the approval key in the configuration")
    return key


def load_or_create_key(path: Path) -> bytes:
    """Read the key file, or create it with fresh random bytes if it does not exist yet.

    A new file gets mode 0600 and any missing parent folders get 0700. The file appears atomically
    with its full content, and two daemons starting at once end up sharing the first one's key.

    Raises:
        KeyMaterialError: the file is unsafe (group/other permissions, not a regular file, owned
            by another user), too short or too long, or cannot be read or written.
    """
    try:
        return _read_key_file(path)
    except FileNotFoundError:
        pass
    _make_private_dirs(path.parent)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        _publish(path, key)
    except FileExistsError:
        # Another process created it between our read and our write: use theirs.
        return _read_key_file(path)
    except OSError as exc:
        raise KeyMaterialError(
            f"cannot create the approval key file {path}: {exc.strerror or exc}. Make its folder "
            "writable by the daemon's user, or configure the key directly."
        ) from None
    return key


def load_key(configured: str | None, path: Path) -> bytes:
    """The key to sign with: the one given in config if any, else the key file's."""
    if configured:
        return parse_key(configured)
    return load_or_create_key(path)


def _check_length(key: bytes, what: str) -> None:
    if len(key) < KEY_BYTES:
        raise KeyMaterialError(
            f"{what} is {len(key)} bytes long; at least {KEY_BYTES} are needed. Replace it with "
            f'{KEY_BYTES} or more random bytes (e.g. "openssl rand {KEY_BYTES}"), or delete the '
            "key file so the daemon makes a new one."
        )
    if len(key) > MAX_KEY_BYTES:
        raise KeyMaterialError(
            f"{what} is {len(key)} bytes long, more than the {MAX_KEY_BYTES} a key can have; "
            "check that it names the right file."
        )


def _read_key_file(path: Path) -> bytes:
    # O_NOFOLLOW and fstat on the open descriptor: the checks apply to exactly what is read.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise KeyMaterialError(
            f"cannot open the approval key file {path}: {exc.strerror or exc}. It must be a "
            "regular file (not a symlink) readable by the daemon's user."
        ) from None
    try:
        _check_safe(path, os.fstat(fd))
    except KeyMaterialError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_KEY_BYTES + 1)
    _check_length(data, f"the approval key file {path}")
    return data


def _check_safe(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise KeyMaterialError(
            f"the approval key file {path} is not a regular file; point the configuration at a "
            "file (or at a path where the daemon may create one)."
        )
    if info.st_uid != os.geteuid():
        raise KeyMaterialError(
            f"the approval key file {path} is owned by uid {info.st_uid}, not by the daemon's user "
            f"(uid {os.geteuid()}); another user could replace it. Run chown on it, or delete it "
            "so the daemon makes a new one."
        )
    loose = stat.S_IMODE(info.st_mode) & 0o077
    if loose:
        raise KeyMaterialError(
            f"the approval key file {path} has mode {stat.S_IMODE(info.st_mode):04o}: other users "
            f"can read or change it, so anyone could forge approvals. Run chmod 600 {path}, and "
            "replace the key if it may have leaked."
        )


def _make_private_dirs(folder: Path) -> None:
    missing: list[Path] = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        except OSError as exc:
            raise KeyMaterialError(
                f"cannot create the folder {directory} for the approval key file: "
                f"{exc.strerror or exc}. Create it (mode 0700) or configure another key file."
            ) from None
        # mkdir's mode is filtered by the umask; only folders we made are tightened.
        directory.chmod(0o700)


def _publish(path: Path, key: bytes) -> None:
    """Write `key` to a private temporary file, then link it into place only if `path` is absent."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # the umask may have removed bits, never added any
            handle.write(key)
            handle.flush()
            os.fsync(handle.fileno())
        # link() fails if the target exists, unlike replace(): the first writer wins.
        os.link(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    # Makes the new name durable; some platforms cannot open folders, which only weakens durability.
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
