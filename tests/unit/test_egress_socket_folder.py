"""Where the egress sockets live: under the state folder, else (a path too long for a socket
address) the service's runtime folder, which dockerd sees at the same path; /tmp only outside
systemd (a service's /tmp is private: dockerd would not find the socket there)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from daemon.app.egress import egress_socket_parent

LONG = Path("/var/lib/" + "x" * 120)


def test_the_state_folder_when_the_path_fits() -> None:
    assert egress_socket_parent(Path("/var/lib/tooljail"), "0123456789abcdef", {}) == Path(
        "/var/lib/tooljail/egress"
    )


def test_the_runtime_folder_when_the_state_folder_is_too_long() -> None:
    environment = {"RUNTIME_DIRECTORY": "/run/tooljail:/run/other"}
    parent = egress_socket_parent(LONG, "0123456789abcdef", environment)
    assert parent == Path("/run/tooljail/egress")


def test_a_fresh_temporary_folder_outside_systemd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its name cannot be guessed: another user who made `tooljail-egress` there first (or a
    symlink by that name) cannot keep the daemon from starting."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "tooljail-egress").symlink_to("/")
    first = egress_socket_parent(LONG, "0123456789abcdef", {})
    second = egress_socket_parent(LONG, "0123456789abcdef", {})
    assert first.parent == tmp_path and first.name.startswith("tooljail-egress-")
    assert first != second and first.is_dir() and not first.is_symlink()
    assert (first.stat().st_uid, first.stat().st_mode & 0o777) == (os.geteuid(), 0o700)
