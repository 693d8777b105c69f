"""The egress proxy as configured: ceilings, credentials with tooljail's CA, upstream roots."""

from __future__ import annotations

import shutil
import ssl
from dataclasses import dataclass
from pathlib import Path

from daemon.calls.audit import AuditLog
from daemon.config import Settings
from daemon.egress.ca import EgressCA
from daemon.egress.credentials import Credentials
from daemon.egress.proxy import EgressProxy, EgressSettings
from daemon.errors import TooljailError
from daemon.policy.engine import PolicyEngine
from daemon.policy.opa_server import private_socket_dir


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
        lambda record: audit.write(engine.audit_mask.apply(record)),
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
    root = private_socket_dir(settings.state_dir / "egress") / instance_id
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(mode=0o700)
    return Egress(proxy, root, bundle)


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
