"""One typed, frozen settings object: TOML file < environment (TOOLJAIL_...) < flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)
from tooljail.connection import loopback_host

from daemon.egress.credentials import CredentialRule
from daemon.errors import TooljailError
from daemon.hooks.config import HookList
from daemon.tools.mcp.config import McpServerSpec
from sandbox.backend import SandboxLimits
from sandbox.limits import SandboxCeilings

#: The repository (or installed package) root: policies/ and .tools/ live beside daemon/.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG_FILE = Path("/etc/tooljail/tooljail.toml")


class ConfigError(TooljailError):
    """The configuration is invalid; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class OpaSettings(_Section):
    """Where decisions come from."""

    url: str | None = None
    """An external OPA (http(s)://host:port or unix:///path/to.sock); when unset the daemon runs
    and supervises its own, on a Unix socket only the daemon's user may reach."""
    token: SecretStr | None = None
    """Bearer token for the external OPA (its --authentication=token with a system.authz policy
    that admits it); never sent to the managed one."""
    binary: Path | None = None
    """The opa executable for the managed server (default: .tools/bin/opa, then PATH)."""
    policies_dir: Path = PROJECT_ROOT / "policies"
    """Rego files (and data.json) loaded into the managed OPA."""
    timeout_s: float = Field(default=0.5, gt=0, le=10)
    """Per-decision timeout; no retries (a dead OPA must cost little, and means deny). A query
    also gets 1 s per 8 MB of its document (OPA reads tens of MB a second, a busy host fewer)."""
    shadow_policies_dir: Path | None = None
    """A candidate policy evaluated beside the serving one; differences are logged, never
    enforced (shadow mode). Needs the managed OPA."""
    decision_cache_entries: int = Field(default=4_096, ge=0)
    """Verdicts kept for reuse when the policy allows it (its decision's `cache_ttl_s`); 0
    turns reuse off."""
    decision_cache_max_ttl_s: float = Field(default=60.0, ge=0)
    """Ceiling on how long any verdict is reused, whatever the policy says."""


class SandboxSettings(_Section):
    """The disposable containers."""

    enabled: bool = True
    """Without a sandbox, non-read-only tools answer that they cannot run."""
    image: str = ""
    """Image reference (default: the locally built tooljail-sandbox image of this recipe)."""
    pool_size: int = Field(default=2, ge=0, le=32)
    """Pre-started containers per workspace and limits profile."""
    pool_max: int = Field(default=32, ge=0, le=1024)
    """Pre-started containers in all (ready plus starting)."""
    pool_per_principal: int = Field(default=8, ge=0, le=1024)
    """A principal's share of `pool_max`: its many sessions cannot keep everyone else cold."""
    idle_ttl_s: float = Field(default=60.0, gt=0)
    """Idle pooled containers are destroyed after this long."""
    defaults: SandboxLimits = SandboxLimits()
    """Limits used where the policy names none."""
    ceilings: SandboxCeilings = SandboxCeilings()
    user: str = "tooljail-sandbox"
    """The account (name or uid) sandboxes run as over workspaces that do not belong to a
    regular user (and that tooljail makes itself); created by `make setup`."""
    min_uid: int = Field(default=1000, ge=1)
    """No sandbox ever runs as a uid below this (root and system accounts)."""
    principal_uid_first: int = Field(default=2_000_000_000, ge=0, le=0xFFFF_FFFE)
    """Sandboxes over the workspaces tooljail makes (and over the default workspace, when it is
    `user`'s, shared through its group) run as a uid of their principal's own (with `user`'s
    group), given from this one on and kept for good (<state_dir>/principal-uids.json):
    the kernel counts inotify instances, pipe buffers, message queues and processes per uid, so
    one tenant cannot hold them for the others. No account, subordinate id range or the daemon
    may be in the range (checked at start). 0: all of them run as `user`, one uid for every
    tenant."""
    principal_uid_count: int = Field(default=1_000_000, ge=1)
    """How many principals may have a uid of their own (the range's length)."""
    run_as_owner: bool = True
    """Over a workspace owned by a regular user (uid >= min_uid), run as that user, so files
    made in their project stay theirs; false: always as `user`."""
    kept_servers_max: int = Field(default=16, ge=0, le=256)
    """Stdio MCP servers kept running for sessions at once, over all sessions (one container
    each); beyond it, the one idle longest is stopped (0: every call starts its server)."""
    kept_servers_per_principal: int = Field(default=4, ge=1, le=256)
    """Of those, how many one principal's sessions may keep (past it, its own server idle
    longest is stopped)."""
    kept_servers_idle_s: float = Field(default=600.0, gt=0)
    """A server kept for a session and unused for this long is stopped (started again, fresh,
    by the next call)."""
    background_max: int = Field(default=16, ge=0, le=256)
    """Background commands (Bash run_in_background) running at once over all sessions, one
    container each; the policy decides per session within it (0: none anywhere)."""
    background_per_principal: int = Field(default=4, ge=0, le=256)
    """Of those, how many one principal's sessions may run."""
    background_max_s: float = Field(default=3600.0, gt=0)
    """Ceiling on a background command's life, whatever the policy grants."""
    memory_budget_mb: int | None = Field(default=None, ge=1)
    """Memory the containers of calls may hold together: the sum of their limits, each held
    from the call's start until its container is removed (foreground, background and kept MCP
    servers alike). None: three quarters of the host's memory. A call whose container would
    pass it, or pass its principal's share, waits (`memory_wait_s`), then fails with nothing
    run; so no mix of tenants' calls can ask the host for more memory than it has."""
    memory_per_principal: float = Field(default=0.5, gt=0, le=1)
    """The fraction of that budget one principal's containers may hold together: what is left
    stays for the others."""
    memory_wait_s: float = Field(default=30.0, ge=0)
    """How long a call waits for room in the memory budget before it fails."""


class EgressConfig(_Section):
    """The egress proxy: the way out of sandboxes the policy puts on the egress network."""

    enabled: bool = True
    """Off: a call granted the egress network fails to start (nothing runs)."""
    max_connections_per_call: int = Field(default=256, ge=1)
    """Ceiling on the connections of one call, whatever the policy's budget."""
    max_bytes_per_call: int = Field(default=1 << 30, ge=1)
    """Ceiling on the bytes (both directions) of one call, whatever the policy's budget."""
    max_open_per_call: int = Field(default=64, ge=1)
    """Connections one call may hold open to the proxy at once (beyond: closed at once)."""
    max_open_total: int = Field(default=1024, ge=1)
    """The same over all calls (the daemon's descriptors and memory)."""
    max_refusals_per_call: int = Field(default=64, ge=1)
    """Refused connections after which a call's network is closed for the rest of it."""
    credentials: list[CredentialRule] = []
    """Secrets added as a header for some destinations (their TLS is then intercepted)."""
    ca_dir: Path | None = None
    """tooljail's CA for intercepted destinations (default: <state_dir>/egress-ca)."""
    upstream_ca_file: Path | None = None
    """Roots the proxy trusts for intercepted upstreams beside the system's (a private CA)."""


class WorkspaceSettings(_Section):
    """Where the workspaces tooljail makes live, and their disk budget."""

    budget_mb: int = Field(default=1024, ge=0)
    """Disk each workspace tooljail makes may use (0: no budget). They live on a filesystem of
    their own (btrfs in an image file, one subvolume with a quota each), so filling one touches
    neither the host's disk nor another session's."""
    filesystem_mb: int = Field(default=4096, ge=256)
    """Size of that filesystem, the total of all such workspaces; its space is reserved on the
    host when it is first made, so the host's disk can never run out under it."""
    keep_closed_s: float = Field(default=604_800.0, ge=0)
    """How long a fresh workspace stays after its session closed without delete_workspace (a
    week); then the daemon deletes it. 0: kept until an operator removes it."""
    max_kept_per_principal: int = Field(default=1024, ge=1)
    """How many workspaces one principal may have kept (closed without delete_workspace) and
    open sessions together: past it, a session over a fresh workspace is refused until some
    are deleted, so that every close can still keep its workspace."""
    principal_share: float = Field(default=0.5, gt=0, le=1)
    """How much of that filesystem one principal's workspaces may fill together, those of its
    open sessions and those kept after their sessions closed (a quota group over all of them):
    what is left stays for the others. 1: no share of its own (each workspace's budget only)."""
    image: Path | None = None
    """The image file (default: <state_dir>/workspaces.img)."""
    tenant_defaults: Literal["own", "shared"] = "own"
    """Where the default session (no session id) of a tenant works: a principal other than the
    Unix socket's (auth.unix_principal) and the admin principals, whose default session works
    in the configured workspace. "own": a folder of its own, made where fresh workspaces are on
    its first call, with their disk budget, found again after a restart and never deleted; no
    other tenant's sandbox mounts it, and the read-only tools are confined to it. "shared": the
    configured workspace, which every principal's default session then works in; it is no
    boundary between tenants (docs/operations.md)."""


class SchedulerSettings(_Section):
    """How calls are scheduled and bounded."""

    max_parallel: int = Field(default=10, ge=1, le=100)
    """Largest group of concurrency-safe calls run in parallel."""
    max_in_flight: int = Field(default=64, ge=1)
    """Calls running at once, overall."""
    max_in_flight_per_session: int = Field(default=16, ge=1)
    """Calls running at once in one session."""
    max_in_flight_per_principal: int = Field(default=32, ge=1)
    """Calls running at once for one principal over all its sessions; keep it under
    max_in_flight, so that one principal's calls never hold every slot."""
    admin_reserve: int = Field(default=8, ge=0)
    """Calls the admin principals may run beyond max_in_flight once it is reached, so that
    tenants together never lock the operators out."""
    queue_timeout_s: float = Field(default=30.0, gt=0)
    """How long a call waits for a slot before the caller gets RESOURCE_EXHAUSTED."""
    replay_ttl_s: float = Field(default=600.0, gt=0)
    """How long answers are remembered by tool_use id (idempotent retries)."""
    replay_max_entries: int = Field(default=2_000, ge=1)
    """How many answers are remembered at most."""
    replay_max_entries_per_principal: int = Field(default=500, ge=1)
    """How many answers of one principal are remembered at most (its own oldest go first)."""


class TcpListenerSettings(_Section):
    """An optional TCP listener. Off loopback it requires mTLS."""

    address: str = ""
    """host:port; empty: no TCP listener."""
    tls_cert: Path | None = None
    """Server certificate (PEM)."""
    tls_key: Path | None = None
    """Server private key (PEM)."""
    client_ca: Path | None = None
    """CA that signs client certificates; set, clients must present one (mTLS)."""
    max_connections: int = Field(default=256, ge=1)
    """Connections a TCP listener holds at once; past it new ones are closed as they come
    (the Unix socket is not counted: it serves on while a TCP listener is full)."""
    max_streams_per_connection: int = Field(default=100, ge=1)
    """Calls one TCP connection may have open at once (HTTP/2 MAX_CONCURRENT_STREAMS); a
    client library queues the next ones until one ends."""
    idle_connection_timeout_s: float = Field(default=300.0, gt=0)
    """A TCP connection without a call for this long is closed (clients reconnect when they
    next call)."""
    handshake_timeout_s: float = Field(default=10.0, gt=0)
    """A TCP connection must finish its TLS handshake and HTTP/2 greeting within this."""

    @property
    def loopback(self) -> bool:
        """Bound to a loopback address only: an IP address the standard library parses as
        loopback (127.0.0.0/8, ::1), or "localhost"; any other name is not (it could resolve
        anywhere), nor an address like "127.evil.example"."""
        host = self.address.rpartition(":")[0]
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        return loopback_host(host)


class AuthSettings(_Section):
    """Who is calling."""

    unix_principal: str = "local"
    """Principal of callers on the Unix socket (grpcio cannot read peer credentials there)."""
    tokens: dict[str, SecretStr] = {}
    """Bearer tokens by principal name, for callers that cannot do mTLS."""
    admin_principals: list[str] = []
    """Principals allowed to call the Admin service and act on any session. None by default:
    name them (`make run` names "local", the Unix socket's default principal)."""
    mtls_use_cn: bool = False
    """With mTLS the principal is the certificate's URI SAN (e.g. a SPIFFE id); a certificate
    without one is refused. True: one without a URI SAN is "cn:" followed by its Common Name."""


class SessionLimits(_Section):
    """How many sessions may be open, and for how long: each holds a directory descriptor and
    maybe a workspace on disk, so an unbounded number would let one caller starve the daemon."""

    max_per_principal: int = Field(default=64, ge=1)
    """Open sessions of one principal (its default session not counted)."""
    max_total: int = Field(default=4_096, ge=1)
    """Open sessions of all principals together."""
    max_idle_ttl_s: float = Field(default=86_400.0, gt=0)
    """The longest idle time a caller may ask for in OpenSession."""


class MetricsSettings(_Section):
    """Prometheus metrics over HTTP."""

    enabled: bool = False
    listen: str = "127.0.0.1:9464"
    """host:port of /metrics (loopback by default: it has no authentication)."""


class LoggingSettings(_Section):
    """The daemon's own log (the audit log is separate)."""

    format: Literal["json", "text"] = "json"
    """json: one JSON object per event (session, tool_use_id, decision_id as fields)."""
    level: Literal["debug", "info", "warning", "error", "critical"] = "info"


class ApprovalSettings(_Section):
    """Approval tokens handed out when the policy asks."""

    key: SecretStr | None = None
    """HMAC key as hex or base64 (at least 32 bytes); unset: the key file is used."""
    key_file: Path | None = None
    """Key file, created with mode 0600 on first start (default: <state_dir>/approval.key)."""
    ttl_s: int = Field(default=900, ge=1, le=86_400)
    """How long a token stays valid."""


class Settings(BaseSettings):
    """Everything the daemon is configured with."""

    model_config = SettingsConfigDict(
        env_prefix="TOOLJAIL_", env_nested_delimiter="__", frozen=True, extra="forbid"
    )

    listen: str = "unix:///run/tooljail/tooljail.sock"
    """unix:///path/to.sock or host:port."""
    socket_mode: int = Field(default=0o660, ge=0, le=0o777)
    """Permissions of the Unix socket."""
    socket_group: str = ""
    """Group that owns the Unix socket (empty: the daemon's group)."""
    tcp: TcpListenerSettings = TcpListenerSettings()
    auth: AuthSettings = AuthSettings()
    workspace: Path = Path("/var/lib/tooljail/workspace")
    """The default session's workspace directory (created if missing)."""
    audit_log: str = "-"
    """File the audit lines go to; '-' is standard output."""
    deferred_tools: list[str] = []
    """Tools left out of ListTools (found through ToolSearch), e.g. ["MultiEdit", "LS"]."""
    result_budget_chars: int = Field(default=50_000, ge=1_000)
    """Overall cap of one tool_result (a tool's own budget and the policy may lower it)."""
    turn_budget_chars: int = Field(default=200_000, ge=1_000)
    """What the results of one turn (an ExecuteBatch, or calls naming one turn_id) may hold
    together; past it the largest are kept whole and previewed (the policy may lower it)."""
    kept_outputs_mb: int = Field(default=64, ge=0)
    """A result over its budget is kept whole (in <state_dir>/outputs, for Read) and the model
    gets a preview; this much per session (0: results are cut, as the budget says)."""
    kept_outputs_total_mb: int = Field(default=1024, ge=0)
    """What all sessions' kept outputs may take of the disk together; one principal's sessions
    take at most half of it."""
    max_request_bytes: int = Field(default=16 << 20, ge=1 << 16)
    """Largest accepted gRPC message."""
    max_held_request_bytes: int = Field(default=256 << 20, ge=1 << 16)
    """What one principal's open calls may hold together: each RPC twice its requests' bytes
    (as received, then a copy the pipeline keeps), what their tool inputs hold converted, and
    room for its answers (4 bytes a character of the larger of result_budget_chars and
    turn_budget_chars), until the RPC is over. At least max_request_bytes and that room."""
    answer_take_timeout_s: float = Field(default=60.0, gt=0)
    """A stream's client that takes none of its messages for this long, while one waits, has
    the stream ended (RESOURCE_EXHAUSTED) and its calls not started yet are not run: what a
    client does not read is not held without end."""
    request_receive_timeout_s: float = Field(default=60.0, gt=0)
    """A request message must arrive whole within this once tooljail reads it, and a call
    waits at most this long for one of its principal's turns to have its request read (as many
    at once as max_held_request_bytes holds requests of max_request_bytes); past either, the
    call is ended (RESOURCE_EXHAUSTED) and what it sent of its request is let go."""
    state_dir: Path = Path("/var/lib/tooljail")
    """Where the daemon keeps its own files (the approval key)."""
    sessions_root: Path | None = None
    """Where fresh session workspaces are made (default: <state_dir>/sessions)."""
    workspaces: WorkspaceSettings = WorkspaceSettings()
    session_idle_ttl_s: float = Field(default=3_600.0, gt=0)
    """Opened sessions are closed after this long without calls (unless they ask otherwise)."""
    sessions: SessionLimits = SessionLimits()
    shutdown_grace_s: float = Field(default=20.0, ge=0)
    """On SIGTERM, how long running calls may finish before they are cancelled."""
    instance_id: str = ""
    """Names this daemon's containers (default: derived from the listen address)."""
    opa: OpaSettings = OpaSettings()
    sandbox: SandboxSettings = SandboxSettings()
    egress: EgressConfig = EgressConfig()
    scheduler: SchedulerSettings = SchedulerSettings()
    approval: ApprovalSettings = ApprovalSettings()
    metrics: MetricsSettings = MetricsSettings()
    hooks: HookList = ()
    """PreToolUse / PostToolUse / PostToolUseFailure hooks (Claude Code's protocol)."""
    mcp_servers: tuple[McpServerSpec, ...] = ()
    """Upstream MCP servers whose tools join the registry as mcp__<server>__<tool>."""
    logging: LoggingSettings = LoggingSettings()

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        if value.startswith("unix://"):
            if not value.removeprefix("unix://").startswith("/"):
                raise ValueError("a unix listener needs an absolute path: unix:///path/to.sock")
            return value
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError("expected unix:///path/to.sock or host:port")
        if not loopback_host(host.removeprefix("[").removesuffix("]")):
            raise ValueError(
                "a TCP listen address is plaintext: it must be a loopback address; off "
                "loopback, listen on a Unix socket and set tcp.address with mTLS (tcp.tls_cert, "
                "tcp.tls_key and tcp.client_ca)"
            )
        return value

    @model_validator(mode="after")
    def _check_socket(self) -> Settings:
        # The daemon cannot tell Unix-socket callers apart (they are all auth.unix_principal):
        # a socket every local account may connect to must not make them an admin (attacker
        # round 100: the user nobody called Admin.Status and worked as `local`).
        if (
            self.listen.startswith("unix://")
            and self.socket_mode & 0o002
            and self.auth.unix_principal in self.auth.admin_principals
        ):
            raise ValueError(
                f"socket_mode {self.socket_mode:#o} lets every local account use the socket, "
                f"and its principal {self.auth.unix_principal!r} is an admin: every local "
                "account would be the admin. Use 0o660 with socket_group for the accounts "
                "that may, or leave the socket's principal out of auth.admin_principals"
            )
        return self

    @property
    def answer_room(self) -> int:
        """What an RPC's answers may hold in bytes (4 a character at most), counted against its
        principal's share from the start (max_held_request_bytes)."""
        return 4 * max(self.result_budget_chars, self.turn_budget_chars)

    @property
    def receipts_per_principal(self) -> int:
        """How many of one principal's requests may be on their way in at once."""
        return max(1, self.max_held_request_bytes // self.max_request_bytes)

    @model_validator(mode="after")
    def _check_held_requests(self) -> Settings:
        needed = self.max_request_bytes + self.answer_room
        if self.max_held_request_bytes < needed:
            raise ValueError(
                f"max_held_request_bytes ({self.max_held_request_bytes}) is under "
                f"max_request_bytes with room for its answers ({needed}): a request of the "
                "largest size would always be refused; raise it, or lower max_request_bytes"
            )
        return self

    @model_validator(mode="after")
    def _check_tcp(self) -> Settings:
        tcp = self.tcp
        if not tcp.address:
            return self
        host, sep, port = tcp.address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError("tcp.address: expected host:port")
        if (tcp.tls_cert is None) != (tcp.tls_key is None):
            raise ValueError("tcp.tls_cert and tcp.tls_key: give both or neither")
        if not tcp.loopback and tcp.client_ca is None:
            raise ValueError(
                "tcp.client_ca: a TCP listener off loopback requires mTLS (tcp.tls_cert, "
                "tcp.tls_key and tcp.client_ca)"
            )
        if tcp.client_ca is not None and tcp.tls_cert is None:
            raise ValueError("tcp.tls_cert: mTLS (tcp.client_ca) needs a server certificate")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = _CONFIG_FILE_IN_USE.get("path")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


# pydantic-settings builds sources from class-level hooks; this carries the chosen file to them.
_CONFIG_FILE_IN_USE: dict[str, Path | None] = {"path": None}


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        key = ".".join(str(part) for part in error["loc"])
        lines.append(f"  {key}: {error['msg']}")
    return "invalid configuration:\n" + "\n".join(lines)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Load the settings: flags (`overrides`) win over the environment, which wins over the file."""
    if config_file is None and DEFAULT_CONFIG_FILE.is_file():
        config_file = DEFAULT_CONFIG_FILE
    if config_file is not None and not config_file.is_file():
        raise ConfigError(f"config file {config_file} does not exist")
    _CONFIG_FILE_IN_USE["path"] = config_file
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
    finally:
        _CONFIG_FILE_IN_USE["path"] = None
