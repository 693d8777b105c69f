"""Where the egress sockets live: under the state folder, else (a path too long for a socket
address) the service's runtime folder, which dockerd sees at the same path; /tmp only outside
systemd (a service's /tmp is private: dockerd would not find the socket there)."""

from __future__ import annotations

from pathlib import Path

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


def test_the_temporary_folder_outside_systemd() -> None:
    parent = egress_socket_parent(LONG, "0123456789abcdef", {})
    assert parent.name == "tooljail-egress" and parent.parent != LONG
