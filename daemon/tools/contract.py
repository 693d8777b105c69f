"""The Tool contract: a tool is a typed runtime contract, not a function in a table.

A tool declares its name, a description written for the model, a pydantic input model (whose JSON
Schema is what ListTools advertises and what the daemon validates against), its traits, a semantic
`validate`, `call`, a mapping from its own result to tool_result content (`render`) and a line for
people (`summarize`). `analyse` says once per call what that call will do (`CallFacts`: read-only,
concurrency-safe, touched paths, facts for the policy, what a session grant covers), so nobody
asks the tool twice. Safety defaults are conservative: a tool that forgets to declare a trait is
treated as risky (not read-only, destructive, not concurrency-safe, runs in the sandbox).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict

from daemon.errors import ToolError
from daemon.host.confine import is_inside
from daemon.models import ContentBlock, TextContent
from daemon.tools.schema import ToolInputSchema

if TYPE_CHECKING:
    from daemon.sessions.session import Session
    from daemon.tools.background import BackgroundShells
    from daemon.tools.peers import PeerHandle
    from daemon.tools.registry import ToolDefinition
    from sandbox.backend import (
        McpSessionCall,
        McpSessionRequest,
        SandboxLimits,
        SandboxRequest,
        SandboxResult,
    )


class InterruptBehavior(StrEnum):
    """What a running call does when it is interrupted."""

    CANCEL = "cancel"
    """Stop at once."""
    BLOCK = "block"
    """Finish the current step (e.g. an atomic write) before stopping."""


@dataclass(frozen=True)
class ToolTraits:
    """Declared semantics of a tool; defaults are the conservative ones."""

    read_only: bool = False
    """Never changes anything outside the daemon's memory."""
    destructive: bool = True
    """May destroy data (overwrite, delete, run arbitrary commands)."""
    concurrency_safe: bool = False
    """May run in parallel with other concurrency-safe calls."""
    sandboxed: bool = True
    """Runs in a disposable container (read-only tools run on the host)."""
    interrupt: InterruptBehavior = InterruptBehavior.BLOCK
    """Behaviour on interrupt."""
    max_result_chars: int = 50_000
    """The tool's own result budget; the config cap and the policy may lower it."""
    shares_work: bool = False
    """May serve several calls of one parallel group with one piece of work (joins ctx.peers)."""
    cancels_siblings: bool = False
    """When a call of this tool fails, its still-running parallel siblings are cancelled (Bash:
    a failed command usually means the rest of the turn's plan is wrong)."""


@dataclass(frozen=True)
class ToolOrigin:
    """Where a tool comes from, as the policy sees it."""

    kind: Literal["builtin", "operator", "mcp"] = "builtin"
    """builtin: tooljail's own; operator: defined in the policy folder's tools/; mcp: a tool
    of an upstream MCP server."""
    server: str = ""
    """The MCP server's configured name (mcp only)."""
    trusted: bool = True
    """Whether the tool's own claims (an MCP server's annotations) were believed."""


PATH_MAX_CHARS = 4096
"""The longest path a tool input may name (the kernel's PATH_MAX): the daemon normalises a path
before it opens it, and a longer one (`/.` repeated) named a file the audit could not show
(attacker round 148)."""


def _within_path_max(path: str) -> str:
    if "\x00" in path:
        # No file is named with one (the kernel refuses it), and programs given the path in
        # their arguments cannot take it: Grep's glob crashed the call (CI's fuzz test).
        raise ValueError("a path cannot hold a NUL character; name the file by its real name")
    if len(path) > PATH_MAX_CHARS:
        raise ValueError(
            f"the path is too long: a path is at most {PATH_MAX_CHARS} characters, and this "
            f"one has {len(path)}; name the file by its plain absolute path"
        )
    return path


ToolPath = Annotated[str, AfterValidator(_within_path_max)]
"""A path field of a tool input (checked after parsing, so the advertised schema stays one
strict tool use accepts)."""


class ToolInput(BaseModel):
    """Base of every tool input model: strict object, numbers/booleans may come as strings."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=False)


@dataclass(frozen=True)
class TouchedPath:
    """A path a call touches, resolved, as the policy sees it."""

    path: Path
    """Resolved absolute path (symlinks followed as far as they exist)."""
    access: Literal["read", "write"]
    inside_workspace: bool
    field: str = ""
    """The input field it was given in ("file_path", "path"); empty when the call does not
    name it (Bash's working directory)."""
    kept_output: bool = False
    """One of the session's kept outputs (a result over its budget, kept by the daemon)."""

    @classmethod
    def of(
        cls, workspace: Path, path: Path, access: Literal["read", "write"], field: str = ""
    ) -> TouchedPath:
        """A resolved path as touched by a call in `workspace`."""
        return cls(path, access, is_inside(workspace, path), field)


@dataclass(frozen=True)
class GrantPattern:
    """What a session-wide approval of a call covers."""

    pattern: str
    """Bash: the command prefix ("git push"); file tools: a directory ending in '/'."""
    words: tuple[str, ...] = ()
    """Bash: the prefix as words, for exact matching by the policy."""


@dataclass(frozen=True)
class CallFacts:
    """What one call with its input will do, as the tool says: worked out once, when the call is
    prepared, and used by the scheduler, the policy, the hooks and the call itself."""

    read_only: bool
    """Changes nothing (the tool's trait, or narrower for this input)."""
    concurrency_safe: bool
    """May run beside other concurrency-safe calls."""
    paths: tuple[TouchedPath, ...] = ()
    """Every path the call touches, resolved."""
    policy: Mapping[str, Any] = field(default_factory=dict)
    """Extra top-level facts for the policy input (Bash: the parsed command)."""
    grant: GrantPattern | None = None
    """What a session-wide approval of this call covers; None: only this exact call."""

    def path(self, name: str) -> Path:
        """The resolved path given in input field `name` (the one the policy decided on)."""
        for touched in self.paths:
            if touched.field == name:
                return touched.path
        raise KeyError(f"the call's facts have no path for field {name!r}")


@dataclass
class ToolOutput:
    """A tool's result mapped to tool_result content, plus what the execution report needs."""

    content: list[ContentBlock]
    is_error: bool = False
    exit_code: int = 0
    timed_out: bool = False
    oom_killed: bool = False
    sandbox_id: str = ""
    keep: Literal["head_tail", "head"] = "head_tail"
    """Which part survives a budget cut (head and tail for logs; head for listings)."""

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolOutput:
        """A single text block."""
        return cls(content=[TextContent(text=text)], is_error=is_error)


@dataclass(frozen=True)
class ProgressUpdate:
    """Live progress of a running call, for the person watching (never for the model)."""

    output: str = ""
    """A chunk of output as it was produced."""
    files_scanned: int = 0
    """Files looked at so far."""
    message: str = ""
    """Anything else worth showing."""


ProgressSink = Callable[[ProgressUpdate], None]
"""Receives progress; must not block (the daemon bounds and drops on its side)."""


class SandboxRunner(abc.ABC):
    """How a tool runs a request in a disposable container (provided by the daemon)."""

    @abc.abstractmethod
    async def run(
        self,
        request: SandboxRequest,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
        *,
        image: str = "",
        read_only_workspace: bool = False,
        on_start: Callable[[], None] | None = None,
    ) -> SandboxResult:
        """Run one request in a fresh container of the call's workspace and limits.

        `on_output` gets a command's output in chunks while it runs; it must not block.
        `image`: a local image instead of the sandbox image; `read_only_workspace`: the
        workspace is mounted read-only. `on_start` is told when the request goes to its
        container, which may be long after the call when none was warm (again should that
        container fail to take it and another be started).
        """

    @abc.abstractmethod
    async def converse(
        self,
        server: str,
        opening: McpSessionRequest,
        call: McpSessionCall,
        limits: SandboxLimits,
        on_output: Callable[[str], None] | None = None,
        *,
        image: str = "",
    ) -> SandboxResult:
        """`call` on the MCP server `server` kept for the call's session, started with
        `opening` in the session's workspace when it is not running (or runs with other
        limits or image); `on_output` gets its progress."""

    def notes(self) -> list[str]:
        """What the model should also know once the call ran (e.g. refused connections)."""
        return []


@dataclass(frozen=True)
class BackgroundGrant:
    """What the policy lets a call's session run in the background (Bash)."""

    shells: int = 0
    """Background commands the session may have running at once (0: none)."""
    timeout_ms: int = 0
    """How long one may run (then it is killed like a timed-out command)."""
    on_timeout: bool = False
    """A foreground command still running at its timeout moves to the background (when there
    is room) instead of being killed."""


@dataclass
class CallContext:
    """What a running call may use."""

    tool_use_id: str
    session: Session
    facts: CallFacts
    """What the call was prepared as (the resolved paths the policy decided on)."""
    limits: SandboxLimits
    """Limits the policy granted (already clamped to the daemon's ceilings)."""
    sandbox: SandboxRunner | None = None
    """None when the daemon runs without a sandbox backend."""
    progress: ProgressSink | None = None
    """Where live progress goes, when someone listens."""
    catalog: Callable[[], Awaitable[list[ToolDefinition]]] | None = None
    """The tools this caller may see, deferred ones included (for ToolSearch)."""
    peers: PeerHandle | None = None
    """The call's group of parallel siblings that may share work (shares_work tools only)."""
    shells: BackgroundShells | None = None
    """The daemon's background commands (None without a sandbox)."""
    background: BackgroundGrant = field(default_factory=BackgroundGrant)
    """What the policy lets this call's session run in the background."""
    extra: dict[str, Any] = field(default_factory=dict)

    def require_sandbox(self) -> SandboxRunner:
        """The call's sandbox runner, or a ToolError when the daemon runs without one."""
        if self.sandbox is None:
            raise ToolError(
                "The sandbox is not available, so this tool cannot run: tooljail only changes "
                "files and runs commands inside a disposable container. Use the read-only tools "
                "(Read, Glob, Grep, LS), or ask the operator to start tooljail with a sandbox "
                "backend."
            )
        return self.sandbox

    def report(self, update: ProgressUpdate) -> None:
        """Send progress if anyone listens."""
        if self.progress is not None:
            self.progress(update)

    @property
    def workspace(self) -> Path:
        """The session's workspace root (resolved)."""
        return self.session.workspace


InT = TypeVar("InT", bound=ToolInput)
OutT = TypeVar("OutT")


class Tool(abc.ABC, Generic[InT, OutT]):
    """Base of every tool. Subclasses set the class attributes and implement `call` and `render`."""

    name: ClassVar[str]
    """Name the model calls it by (^[a-zA-Z0-9_-]{1,64}$)."""
    description: ClassVar[str]
    """What it does, when to use it and its limits, written for the model."""
    input_model: ClassVar[type[ToolInput]]
    """pydantic model of the input; its JSON Schema is advertised."""
    traits: ClassVar[ToolTraits] = ToolTraits()
    """Declared semantics (conservative by default)."""
    enabled: ClassVar[bool] = True
    """Implemented but switched off tools are never exposed."""
    aliases: ClassVar[tuple[str, ...]] = ()
    """Older names still accepted (a call by alias runs this tool)."""
    search_hint: ClassVar[str] = ""
    """Keywords ToolSearch matches besides the name and the description."""
    origin: ClassVar[ToolOrigin] = ToolOrigin()
    """Where the tool comes from (the policy input says it)."""
    audit_paths: ClassVar[frozenset[str]] = frozenset()
    """Input fields of its own, besides the common path names (daemon.policy.mask.PATH_FIELDS),
    that name the files it touches: the audit shows them as sent, never masked by patterns."""
    keeps_over_budget: ClassVar[bool] = True
    """A result over its budget is kept whole for Read (daemon.calls.kept_outputs); off for
    tools whose output is already a window the caller moves (Read itself)."""
    prepares_off_loop: ClassVar[bool] = False
    """Its `validate` blocks (it waits for a checking process): always prepared in a worker
    thread, never on the event loop."""

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema the model sees (tidied: see daemon.tools.schema)."""
        return self.input_model.model_json_schema(schema_generator=ToolInputSchema)

    def validate(self, args: InT, session: Session) -> InT:
        """Semantic checks beyond the schema (raise ToolInputError); may normalise the input."""
        return args

    def analyse(self, args: InT, session: Session) -> CallFacts:
        """What this call will do (raise ToolInputError when that cannot be worked out). The
        default is the declared traits, no paths, no extra policy facts and no session grant."""
        return self.facts()

    def facts(
        self,
        *,
        read_only: bool | None = None,
        concurrency_safe: bool | None = None,
        paths: Iterable[TouchedPath] = (),
        policy: Mapping[str, Any] | None = None,
        grant: GrantPattern | None = None,
    ) -> CallFacts:
        """Facts of a call of this tool; whatever is not given comes from the traits."""
        return CallFacts(
            read_only=self.traits.read_only if read_only is None else read_only,
            concurrency_safe=(
                self.traits.concurrency_safe if concurrency_safe is None else concurrency_safe
            ),
            paths=tuple(paths),
            policy=policy or {},
            grant=grant,
        )

    @abc.abstractmethod
    async def call(self, args: InT, ctx: CallContext) -> OutT:
        """Do the work. Raise ToolError for failures the model should see."""

    @abc.abstractmethod
    def render(self, result: OutT) -> ToolOutput:
        """Map the tool's own result to tool_result content."""

    def summarize(self, args: InT, result: OutT | None, output: ToolOutput) -> str:
        """One line for people about what the call did (not what the model reads); `result` is
        None when the call failed before the tool had one (`output` then holds the error)."""
        return f"{self.name} failed" if output.is_error else f"{self.name} done"


AnyTool = Tool[Any, Any]
