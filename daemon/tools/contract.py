"""The Tool contract: a tool is a typed runtime contract, not a function in a table.

A tool declares its name, a description written for the model, a pydantic input model (whose JSON
Schema is what ListTools advertises and what the daemon validates against), its traits, a semantic
`validate`, the paths a call touches (for the policy), `call`, and a mapping from its own result to
tool_result content. Safety defaults are conservative: a tool that forgets to declare a trait is
treated as risky (not read-only, destructive, not concurrency-safe, runs in the sandbox).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from daemon.models import ContentBlock, TextContent

if TYPE_CHECKING:
    from daemon.session import Session
    from daemon.tools.peers import PeerHandle
    from daemon.tools.registry import ToolDefinition
    from sandbox.backend import SandboxLimits, SandboxRequest, SandboxResult


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
    ) -> SandboxResult:
        """Run one request in a fresh container of the call's workspace and limits.

        `on_output` gets a Bash command's output in chunks while it runs; it must not block.
        """


@dataclass
class CallContext:
    """What a running call may use."""

    tool_use_id: str
    session: Session
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
    extra: dict[str, Any] = field(default_factory=dict)

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

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema the model sees."""
        return self.input_model.model_json_schema()

    def is_read_only(self, args: InT) -> bool:
        """Read-only for this input (defaults to the declared trait)."""
        return self.traits.read_only

    def is_concurrency_safe(self, args: InT) -> bool:
        """Concurrency-safe for this input (defaults to the declared trait)."""
        return self.traits.concurrency_safe

    def validate(self, args: InT, session: Session) -> InT:
        """Semantic checks beyond the schema (raise ToolInputError); may normalise the input."""
        return args

    def policy_facts(self, args: InT, session: Session) -> dict[str, Any]:
        """Extra top-level facts for the policy input (e.g. Bash's parsed command)."""
        return {}

    def grant_pattern(self, args: InT) -> tuple[str, tuple[str, ...]] | None:
        """What a session-scoped approval of this call covers: (pattern, words); None: only
        this exact call can be approved."""
        return None

    def touched_paths(self, args: InT, session: Session) -> list[TouchedPath]:
        """Every path this call touches, resolved, for the policy input."""
        return []

    @abc.abstractmethod
    async def call(self, args: InT, ctx: CallContext) -> OutT:
        """Do the work. Raise ToolError for failures the model should see."""

    @abc.abstractmethod
    def render(self, result: OutT) -> ToolOutput:
        """Map the tool's own result to tool_result content."""

    def summarize(self, args: InT, output: ToolOutput) -> str:
        """One line for people about what the call did (not what the model reads)."""
        return f"{self.name} failed" if output.is_error else f"{self.name} done"


AnyTool = Tool[Any, Any]
