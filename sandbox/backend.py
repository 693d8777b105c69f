"""The sandbox backend interface: start a container, run one request in it, collect, destroy.

`daemon` talks only to these types; the Docker backend (and a fake for unit tests) sit behind them.
A container runs exactly one request and is destroyed after it: never reused. The one exception
is an MCP server kept for a session (`McpSessionRequest`): its container answers `McpSessionCall`s
of that session, one at a time, until the daemon removes it.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sandbox.image import checked_reference

#: Label keys every container carries, so leftovers can always be found and reaped.
LABEL_MANAGED = "io.tooljail.managed"
LABEL_INSTANCE = "io.tooljail.instance"
LABEL_SESSION = "io.tooljail.session"
LABEL_TOOL_USE = "io.tooljail.tool_use_id"


OutputCallback = Callable[[str], None]
"""Receives chunks of a command's output while it runs. Called on the event loop; it must return
at once (append to a bounded buffer), since reading the container waits for it."""


ImageReference = Annotated[str, AfterValidator(checked_reference)]
"""A model field naming a local image ("" for the sandbox image; see `checked_reference`)."""


class SandboxError(Exception):
    """A sandboxed execution could not be started or completed (engine down, image missing...)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NetworkMode(StrEnum):
    """Network access granted to a container."""

    NONE = "none"
    EGRESS = "egress"
    """No interface but loopback; every connection goes through the daemon's egress proxy,
    which asks the policy about each one."""
    BRIDGE = "bridge"
    """The engine's default bridge: everything the host reaches (the unsafe one)."""


GIT_DIR_NAME = ".git"
"""The workspace's own repository, which `GitAccess` is about."""


class GitAccess(StrEnum):
    """What a container may do to the workspace's own repository (its `.git`)."""

    READ_ONLY = "read_only"
    """`.git` is mounted read-only and cannot be renamed or replaced: git reads (status, diff,
    log) work, commits fail, and no hook or configuration the host's git would run can be
    planted. The default."""
    WRITABLE = "writable"
    """`.git` is writable like the rest of the workspace (the policy's command rules are all
    that stands between the model and its hooks and configuration)."""


class SandboxLimits(_Frozen):
    """Resource limits of one container (already clamped to the daemon's ceilings)."""

    timeout_ms: int = Field(default=120_000, gt=0)
    """Wall-clock limit of the request; the container is killed when it passes."""
    memory_mb: int = Field(default=512, gt=0)
    """Memory limit; swap is set equal so the container cannot swap."""
    cpus: float = Field(default=1.0, gt=0)
    """CPU quota in cores."""
    pids: int = Field(default=256, gt=0)
    """Maximum number of processes/threads (contains fork bombs)."""
    network: NetworkMode = NetworkMode.NONE
    """none (default), egress or bridge, as the policy grants."""
    file_size_mb: int = Field(default=1024, gt=0)
    """RLIMIT_FSIZE for processes in the container."""
    tmpfs_mb: int = Field(default=64, gt=0)
    """Size of the writable /tmp."""
    git: GitAccess = GitAccess.READ_ONLY
    """Whether the workspace's `.git` is writable, as the policy grants."""


class PathPin(_Frozen):
    """A path of the workspace mounted over itself in the container: a mount point, it cannot be
    renamed, removed or replaced there; `read_only`, nothing in it can be written either."""

    path: str
    """Absolute, inside the workspace."""
    identity: tuple[int, int]
    """Device and inode the daemon found there: the runner refuses any request unless the same
    object is mounted at `path` (the engine follows a link swapped in for a mount's source)."""
    read_only: bool


class WayFolder(_Frozen):
    """A folder on the way to the workspace or to one of its pins, as it was when the daemon
    judged who on the host could rename it (SandboxSpec.no_root)."""

    path: str
    uid: int
    gid: int
    mode: int
    """st_mode: its type and permission bits."""
    acl: bytes = b""
    """Its POSIX access ACL as stored (sandbox.posix_acl; b"": none)."""


_Identity = tuple[int, int]
#: workspace, its identity, run_as, limits, image, read-only workspace, its repository's pins,
#: shared through its group, no root in the container
ProfileKey = tuple[
    str, _Identity, _Identity | None, SandboxLimits, str, bool, tuple[PathPin, ...], bool, bool
]


class SandboxSpec(_Frozen):
    """What a container is started for: its workspace, identity, limits and labels."""

    workspace: Path
    """Host directory bind-mounted read-write at the same absolute path; the cwd."""
    workspace_id: tuple[int, int] = (0, 0)
    """Device and inode of the pinned workspace: the runner refuses any request when the
    directory mounted at `workspace` is not this one."""
    run_as: tuple[int, int] | None = None
    """uid and gid commands run as; never root (a container without one refuses to start)."""
    limits: SandboxLimits = SandboxLimits()
    session_id: str = ""
    """Session the container serves (label only)."""
    image: str = ""
    """A local image to run instead of the backend's sandbox image (an operator's tool may
    name one); "" for the sandbox image."""
    read_only_workspace: bool = False
    """The workspace is mounted read-only (a tool declared read-only: the kernel holds it to
    that)."""
    pool_owner: str = ""
    """Whose share of the warm pool containers pre-started for this spec count against (the
    principal): one principal's many sessions cannot take every warm container."""
    git_pins: tuple[PathPin, ...] = ()
    """The workspace's repository (its `.git` and what that names inside the workspace) held
    read-only, each checked by the runner before any request runs; () when none is."""
    group_shared: bool = False
    """Other principals' sandboxes, each with a uid of its own, write the workspace through its
    group too: what commands make there is group-writable (umask 002), and git trusts
    repositories there whoever made them, as it did when they all ran as one uid."""
    no_root: bool = False
    """An account of the host (the workspace's owner, or whoever may rename a folder above
    it) can change the workspace's paths while a container is made, which no freezing of
    sandboxes stops: the engine follows links there as root, and may mount a folder of theirs
    over a program of the image the container's first process runs. The whole container then
    runs as `run_as`, with no capability and the runner as its first process: whatever they
    steer runs as the commands do."""
    host_way: tuple[WayFolder, ...] = ()
    """The folders `no_root` was judged on. A container holding the repository is made only if
    each still has its owner and mode in the set-up's turn (`sandbox.pin_check`): a sandbox
    that opened one to everyone after the judgement (chmod 0777) cannot let a host account race
    that container's mounts. Not part of the warm pool's key: a container made stays safe."""

    def profile_key(self) -> ProfileKey:
        """Containers are interchangeable exactly when this key is equal (warm pool key)."""
        return (
            str(self.workspace),
            self.workspace_id,
            self.run_as,
            self.limits,
            self.image,
            self.read_only_workspace,
            self.git_pins,
            self.group_shared,
            self.no_root,
        )


class BashRequest(_Frozen):
    """Run a shell command with bash; stdout and stderr merged."""

    kind: Literal["bash"] = "bash"
    command: str
    cwd: str
    """Absolute directory inside the workspace to start in."""
    timeout_ms: int = Field(gt=0)
    output_limit_bytes: int = Field(default=1 << 20, gt=0)
    """Bytes of output kept (head and tail); the rest is counted, not stored."""
    stop_without_host: bool = False
    """Kill the command when the daemon's connection ends (a daemon that died: nobody reads the
    answer, and the command would otherwise run on until its timeout)."""


class ExecRequest(_Frozen):
    """Run a program (no shell) with `stdin` on its standard input; stdout and stderr apart."""

    kind: Literal["exec"] = "exec"
    argv: tuple[str, ...] = Field(min_length=1)
    """The program (looked up on the image's PATH) and its arguments."""
    stdin: str = ""
    cwd: str
    """Absolute directory inside the workspace to start in."""
    timeout_ms: int = Field(gt=0)
    output_limit_bytes: int = Field(default=1 << 20, gt=0)
    """Bytes of stdout kept (head and tail); the rest is counted, not stored. Stderr keeps a
    sixteenth of it."""


class McpStdioRequest(_Frozen):
    """Start an MCP server (a program speaking MCP on its stdio) and have one exchange with it:
    list its tools, or call one."""

    kind: Literal["mcp_stdio"] = "mcp_stdio"
    argv: tuple[str, ...] = Field(min_length=1)
    cwd: str
    """Absolute directory inside the workspace to start in."""
    method: Literal["tools/list", "tools/call"]
    params: dict[str, Any] = Field(default_factory=dict)
    """tools/call: {"name": ..., "arguments": {...}}."""
    timeout_ms: int = Field(gt=0)
    output_limit_bytes: int = Field(default=16 << 20, gt=0)
    """Largest message accepted from the server."""


class McpSessionRequest(_Frozen):
    """Start an MCP server for a session and initialize it; its container then answers
    `McpSessionCall`s while the result says `session_open`."""

    kind: Literal["mcp_session"] = "mcp_session"
    argv: tuple[str, ...] = Field(min_length=1)
    cwd: str
    """Absolute directory inside the workspace to start in."""
    timeout_ms: int = Field(gt=0)
    """How long starting and initializing may take."""
    output_limit_bytes: int = Field(default=16 << 20, gt=0)
    """Largest message accepted from the server (for the whole session)."""


class McpSessionCall(_Frozen):
    """One exchange with a session's MCP server (after `McpSessionRequest`)."""

    kind: Literal["mcp_call"] = "mcp_call"
    method: Literal["tools/list", "tools/call"]
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_ms: int = Field(gt=0)
    output_limit_bytes: int = Field(default=16 << 20, gt=0)
    """As the session's: the frame the daemon accepts back."""


class WriteFileRequest(_Frozen):
    """Atomically replace (or create) one file in the workspace."""

    kind: Literal["write_file"] = "write_file"
    path: str
    """Absolute path inside the workspace."""
    content: str
    expected_sha256: str | None = None
    """sha256 the current file must have (checked just before the rename); None: must not exist."""


McpRequest = McpStdioRequest | McpSessionRequest | McpSessionCall
SandboxRequest = BashRequest | ExecRequest | McpRequest | WriteFileRequest


class SandboxResult(_Frozen):
    """What came back from one request."""

    sandbox_id: str = ""
    exit_code: int = 0
    output: str = ""
    """Captured output (head and tail within the output limit), UTF-8 decoded with replacement;
    an exec request's stdout."""
    stderr: str = ""
    """An exec request's stderr (head and tail within its limit)."""
    output_bytes: int = 0
    """Total bytes the command produced, kept or not."""
    output_truncated: bool = False
    """Some output was counted but not kept."""
    timed_out: bool = False
    oom_killed: bool = False
    cancelled: bool = False
    error: str = ""
    """Set when the request could not be carried out (e.g. a write precondition failed)."""
    final_cwd: str = ""
    """Directory the shell ended in (bash only)."""
    cwd_reset: str = ""
    """Bash did not start (nothing ran) because its identity may not enter the cwd asked for:
    that directory and the error entering it; the next command starts at the workspace root."""
    duration_ms: int = 0
    session_open: bool = False
    """An MCP session's server is still there and takes the next `McpSessionCall`."""
    listing: str = ""
    """An MCP server that said its tools changed during the request: its tools/list answer,
    as JSON ({"tools": [...]}), read after the request's own answer."""
    leftovers: int = 0
    """Processes the command left that were still there when the runner gave up waiting for
    them (stuck in the kernel past sandbox/runner/runner.py's LEFTOVERS_WAIT_S)."""


class SandboxStartError(SandboxError):
    """No container could be started (engine down, image missing, bad workspace); nothing ran."""


SET_UP_CHANGED = (
    "the sandbox could not be set up over this workspace: the engine refused it, or a path it "
    "mounts (the workspace, or a path of its repository) changed while it was set up; nothing "
    "ran. Retry; if it goes on, the operator's log says why"
)
"""What a caller is told when the engine refuses a container, or its runner refuses the mounts
it was given. Never the engine's or the runner's own words: the engine (root) follows a link
swapped in for a mount's source, and whether it found the place it led to ("bind source path
does not exist", or a started container whose runner refused what was mounted) told a tenant
which host paths exist (attacker round 117). They go to the log."""


class SandboxNotDelivered(SandboxError):
    """The request never reached the container (it was already gone): safe to retry elsewhere."""


class EgressGate(abc.ABC):
    """The daemon's egress proxy, as one call's sandbox sees it."""

    @abc.abstractmethod
    def listen(
        self, socket_path: Path, forwarder_uid: int = 0
    ) -> contextlib.AbstractAsyncContextManager[None]:
        """Serve the call's connections arriving on `socket_path` (a Unix socket to create)
        for the duration of the context, from the container's forwarder (`forwarder_uid`: the
        container's root, or `run_as` in a container with no root); afterwards nothing listens
        there."""


class Sandbox(abc.ABC):
    """One started container, waiting for exactly one request."""

    @property
    @abc.abstractmethod
    def id(self) -> str:
        """The container id."""

    @property
    def egress_socket(self) -> Path | None:
        """Host path where the container's egress connections arrive (egress network only)."""
        return None

    @property
    def forwarder_uid(self) -> int:
        """The uid the container's egress forwarder runs as (its root, or `run_as` in a
        container with no root: SandboxSpec.no_root)."""
        return 0

    @abc.abstractmethod
    async def run(
        self, request: SandboxRequest, on_output: OutputCallback | None = None
    ) -> SandboxResult:
        """Send the request and return its answer as soon as it is complete.

        `on_output` gets a Bash command's output in chunks while it runs (coalesced by the
        runner; the result still carries the kept output in full).

        Raises SandboxNotDelivered when the container was gone before the request reached it.
        """

    @abc.abstractmethod
    async def destroy(self) -> None:
        """Kill and remove the container; idempotent, never raises."""

    @property
    def gone(self) -> bool:
        """After `destroy`: whether the container is known gone (an engine that could not
        remove it leaves it holding what it holds)."""
        return True


class SandboxBackend(abc.ABC):
    """Starts sandboxes and cleans up after them."""

    @abc.abstractmethod
    async def start(self, spec: SandboxSpec, *, tool_use_id: str = "") -> Sandbox:
        """Start a hardened container for one request.

        `tool_use_id` labels the container when the call is known at start (not for pooled ones).
        Raises SandboxStartError when no container could be started (nothing ran).
        """

    async def ping(self) -> bool:
        """Whether the engine answers (for status and health)."""
        return True

    @abc.abstractmethod
    async def reap(self) -> int:
        """Remove this backend's labelled leftovers in any state; returns how many."""

    async def reap_untracked(self) -> int:
        """Remove containers of this backend's instance that it no longer tracks (periodic safety
        net, safe while calls run); returns how many."""
        return 0

    async def exists(self, sandbox_id: str) -> bool:
        """Whether a sandbox whose removal failed is still there (True when it cannot tell)."""
        return False

    @abc.abstractmethod
    async def close(self) -> None:
        """Destroy everything this backend started and release resources."""
