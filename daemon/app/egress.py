"""The egress proxy as configured: ceilings, credentials with tooljail's CA, upstream roots."""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.calls.audit import AuditLog
from daemon.config import Settings
from daemon.egress.ca import EgressCA
from daemon.egress.credentials import Credentials
from daemon.egress.proxy import EgressProxy, EgressSettings
from daemon.errors import TooljailError
from daemon.policy.engine import PolicyEngine
from daemon.policy.mask import AuditMask
from daemon.policy.opa_server import MAX_SOCKET_PATH, private_socket_dir
from sandbox.docker_backend import CONTAINER_FOLDER_SAMPLE
from sandbox.hardening import EGRESS_SOCKET_NAME


@dataclass(frozen=True)
class Egress:
    """The proxy and what sandbox containers get to reach it."""

    proxy: EgressProxy
    root: Path
    """Private folder under which each egress container gets its socket folder."""
    ca_bundle: Path | None
    """System roots plus tooljail's CA, mounted as egress containers' trust store (only when
    some destination is intercepted)."""


def start_egress(
    settings: Settings, engine: PolicyEngine, audit: AuditLog, instance_id: str
) -> Egress | None:
    """The configured proxy (None when egress is off); raises TooljailError on a bad secret,
    CA or root file."""
    config = settings.egress
    if not config.enabled:
        return None
    credentials = Credentials(config.credentials) if config.credentials else None
    ca = None
    bundle = None
    if credentials is not None:
        ca_dir = config.ca_dir or settings.state_dir / "egress-ca"
        ca = EgressCA.load_or_create(ca_dir)
        bundle = _write_bundle(ca_dir / "bundle.pem", ca.certificate_pem)
    upstream = ssl.create_default_context()
    if config.upstream_ca_file is not None:
        try:
            upstream.load_verify_locations(cafile=str(config.upstream_ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise TooljailError(f"egress.upstream_ca_file: {exc}") from exc
    proxy = EgressProxy(
        engine,
        audited(audit, engine.audit_mask),
        settings=EgressSettings(
            max_connections=config.max_connections_per_call,
            max_bytes=config.max_bytes_per_call,
            max_open=config.max_open_per_call,
            max_open_total=config.max_open_total,
            max_refusals=config.max_refusals_per_call,
        ),
        credentials=credentials,
        ca=ca,
        upstream_tls=upstream,
    )
    # One folder per daemon instance, emptied at start: what a killed predecessor left goes.
    # Named by a hash: the instance id is free text, and "../x" must not name another folder.
    name = hashlib.sha256(instance_id.encode()).hexdigest()[:16]
    root = private_socket_dir(egress_socket_parent(settings.state_dir, name, os.environ)) / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(mode=0o700)
    return Egress(proxy, root, bundle)


def audited(audit: AuditLog, mask: AuditMask) -> Callable[[dict[str, Any]], None]:
    """Writes an egress record to the audit, each field masked on its own (attacker round 144:
    masked as a whole, a request path of 8,100 characters spent the scan budget, and the
    decision, the bytes sent and the connection's end went unlogged)."""

    def write(record: dict[str, Any]) -> None:
        audit.write({key: mask.apply(value) for key, value in record.items()})

    return write


def egress_socket_parent(state_dir: Path, name: str, environment: Mapping[str, str]) -> Path:
    """The folder of the egress sockets: `<state_dir>/egress` when the sockets' paths fit the
    kernel's socket addresses; else the service's runtime folder (RUNTIME_DIRECTORY, which
    dockerd sees at the same path); else a fresh folder in the system's temporary one (outside a
    service: a service's /tmp is its own, dockerd would not find the sockets there)."""
    candidates = [state_dir]
    runtime = environment.get("RUNTIME_DIRECTORY", "").split(":")[0]
    if runtime:
        candidates.append(Path(runtime))
    for folder in candidates:
        parent = folder / "egress"
        sample = parent / name / CONTAINER_FOLDER_SAMPLE / EGRESS_SOCKET_NAME
        if len(os.fsencode(sample)) <= MAX_SOCKET_PATH:
            return parent
    # A fresh folder with a name nobody can guess: another account cannot have made it first.
    return Path(tempfile.mkdtemp(prefix="tooljail-egress-"))


def _write_bundle(path: Path, ca_pem: bytes) -> Path:
    """The system's roots and tooljail's CA in one file (what sandboxes trust)."""
    system = ssl.get_default_verify_paths().openssl_cafile
    try:
        roots = Path(system).read_bytes()
    except OSError as exc:
        raise TooljailError(
            f"the system's CA bundle {system} cannot be read ({exc.strerror}); install "
            "ca-certificates"
        ) from exc
    path.unlink(missing_ok=True)
    path.write_bytes(roots.rstrip(b"\n") + b"\n" + ca_pem)
    path.chmod(0o644)
    return path
