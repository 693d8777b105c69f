"""A session: its workspace and what it has Read (for read-before-write and staleness checks)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, get_args

from daemon.errors import ToolError
from daemon.host.confine import existing_directory
from daemon.host.loop_safe import NeedsThread
from daemon.host.pinned import PinnedDirectory
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.sessions.workspaces import HostLook


@dataclass(frozen=True)
class ReadRecord:
    """What a Read saw of one file."""

    mtime_ns: int
    """Modification time when it was read (0 for what the session wrote itself)."""
    sha256: str
    """Hash of the whole file's bytes when it was read."""


def file_sha256(data: bytes) -> str:
    """Hex sha256 of file content."""
    return hashlib.sha256(data).hexdigest()


Mode = Literal["default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"]
"""Permission modes a session can be in (the policy implements what each means)."""
MODES: tuple[str, ...] = get_args(Mode)
MAX_READS_KEPT = 2048
"""Files a session's read-state remembers (the most recently read): one read before that must be
read again before it is changed (attacker round 141: 30,000 distinct long paths cost the daemon
170 MB, for good in a default session)."""
MAX_READ_PATH_CHARS = 512 * 1024
"""What the paths a session's read-state remembers may hold together."""
MAX_REFUSALS_KEPT = 256
"""Refused calls a session remembers (the policy sees those within its window)."""
REFUSAL_WINDOW_S = 600.0
"""The window of the policy input's session.recent_refusals."""
VERIFY_WAIT_S = 30.0
"""How long a call waits for a workspace whose path cannot be checked from the kernel's caches."""


async def verify_pinned(root: PinnedDirectory, tenant: str) -> None:
    """`root.verify()`: from the kernel's caches on the event loop, else in one of `tenant`'s
    threads for at most VERIFY_WAIT_S (TimeoutError: a filesystem on the path hangs)."""
    try:
        root.verify_on_loop()
    except NeedsThread:
        async with asyncio.timeout(VERIFY_WAIT_S):
            await FILESYSTEM_THREADS.run(tenant, root.verify)


async def pin_off_loop(pin: Callable[[], PinnedDirectory], tenant: str) -> PinnedDirectory:
    """`pin()` in one of `tenant`'s threads (pinning asks the filesystem, which its owner may
    have made one that never answers), waited for at most VERIFY_WAIT_S (TimeoutError). A pin
    that ends after nobody waits for it any more is released then, not leaked."""
    async with asyncio.timeout(VERIFY_WAIT_S):
        return await FILESYSTEM_THREADS.run(tenant, pin, release=PinnedDirectory.close)


@dataclass(frozen=True)
class SessionGrant:
    """An approval that holds for the rest of the session (approval scope "session")."""

    tool: str
    pattern: str
    """Bash: the command prefix (words); file tools: a directory prefix ending in '/'."""
    words: tuple[str, ...]
    """Bash: the prefix as words, for exact matching by the policy."""
    approved_by: str
    granted_at: float
    reasons: tuple[str, ...] = ()
    """The asks the person was shown: the grant lifts those only."""

    def to_policy(self) -> dict[str, object]:
        """As the policy input shows it."""
        return {
            "tool": self.tool,
            "pattern": self.pattern,
            "words": list(self.words),
            "reasons": list(self.reasons),
        }


class Ongoing(Protocol):
    """A command that goes on after its call ended (a background shell)."""

    @property
    def done(self) -> bool: ...


@dataclass
class Session:
    """State shared by the calls of one session."""

    id: str
    workspace: Path
    """Resolved absolute workspace root."""
    owner: str = ""
    """The principal that opened it (for a default session: whose it is); only it (and admin
    principals) may use it."""
    is_default: bool = False
    """A principal's default session (over the configured workspace or a folder of its own;
    never closed)."""
    own_folder: bool = False
    """A default session in a folder of its own (daemon.sessions.own_defaults)."""
    closed: bool = False
    """Closed (by its owner, an admin or the idle sweeper): calls still queued for it never run."""
    owns_workspace: bool = False
    """The workspace was created for this session (it may be deleted when the session closes)."""
    idle_ttl_s: float | None = None
    """Closed after this long without calls (None: never)."""
    last_used: float = field(default_factory=time.monotonic)
    """Monotonic time of the last call."""
    mode: Mode = "default"
    """Permission mode (see MODES)."""
    grants: list[SessionGrant] = field(default_factory=list)
    """Approvals that hold for the rest of the session."""
    reads: dict[Path, ReadRecord] = field(default_factory=dict)
    """What Read saw, oldest first, within MAX_READS_KEPT and MAX_READ_PATH_CHARS."""
    _read_chars: int = field(default=0, repr=False)
    cwd: Path | None = None
    """Working directory Bash starts in (the workspace until a command changes it)."""
    changes: int = 0
    """Calls that may have changed the workspace (not read-only) ended so far: a call analysed
    before one more ended is analysed again before it is judged (a link made meanwhile)."""
    ongoing: list[Ongoing] = field(default_factory=list)
    """Its commands that may still change files after their call ended (background shells):
    while one runs, what a path names on the disk may change at any time."""
    shared: Callable[[], bool] = field(default=lambda: False, repr=False)
    """Whether another open session's workspace overlaps this one's (the session store says)."""
    root: PinnedDirectory | None = None
    """The workspace held by descriptor (pinned when the session was opened, or on first use)."""
    sandbox_as: tuple[int, int] | None = None
    """uid and gid its sandboxes run as (None: no sandbox)."""
    host_changers: Callable[[Iterable[str]], HostLook] = field(
        default=lambda inside: HostLook(frozenset(), ()), repr=False
    )
    """The accounts of the host that could rename the workspace, a folder above it or one
    inside it on the way to the given paths, from outside any sandbox (None: anyone might),
    and the folders judged; looked at for every container, off the event loop
    (IdentityRule.host_changers)."""
    made_by_sandboxes: Callable[[int], bool] = field(default=lambda uid: False, repr=False)
    """Whether only sandboxes have a uid (IdentityRule.made_by_sandboxes): what it made in the
    workspace is the model's own (daemon.host.git_pins.repository_look)."""
    group_shared: bool = False
    """Its workspace is shared with other principals' sandboxes, each with a uid of its own,
    through its group (the default workspace): see SandboxSpec.group_shared."""
    disk_budget_mb: int = 0
    """The workspace's disk budget (0: none, e.g. an existing directory)."""
    disk_share_mb: int = 0
    """What its owner's fresh workspaces may fill together (0: no share of their own)."""
    kept_outputs: Path | None = None
    """Where its results too large for their budget were kept (Read may open them there);
    None until one was."""
    discovered: set[str] = field(default_factory=set)
    """Deferred tools ToolSearch found for it: ListTools shows them from then on."""
    refusals: deque[tuple[float, str, Literal["deny", "ask"], str]] = field(
        default_factory=lambda: deque(maxlen=MAX_REFUSALS_KEPT)
    )
    """Its calls the policy denied or asked about: (monotonic time, tool, outcome, the call's
    input hash)."""

    def disk_may_change(self) -> bool:
        """Whether files of its workspace may change while one of its calls is judged and runs:
        one of its commands goes on after its call, or another open session's workspace overlaps
        this one (that session's commands run whenever it likes). Safe from a worker thread: it
        only reads."""
        return any(not command.done for command in tuple(self.ongoing)) or self.shared()

    def goes_on(self, command: Ongoing) -> None:
        """Note a command that goes on after its call (on the event loop)."""
        self.ongoing[:] = [*(c for c in self.ongoing if not c.done), command]

    def pinned_root(self) -> PinnedDirectory:
        """The pinned workspace (pinned now if it was not yet)."""
        if self.closed:
            raise ToolError(
                "This session was closed before the call could run, so nothing ran. Open a new "
                "session to go on."
            )
        if self.root is None:
            self.root = PinnedDirectory.pin(self.workspace)
        return self.root

    async def verify_workspace(self) -> None:
        """ToolError unless the workspace path still names the pinned directory, without any
        symbolic link: nothing may run in a workspace moved or replaced under the session.
        From the kernel's caches on the event loop; otherwise in one of the owner's threads,
        for at most VERIFY_WAIT_S (a filesystem mounted over the path may never answer)."""
        try:
            await verify_pinned(self.pinned_root(), self.owner)
        except TimeoutError as exc:
            raise ToolError(
                f"The workspace {self.workspace} could not be checked within {VERIFY_WAIT_S:g} s: "
                "its filesystem hangs, or every thread this principal may use waits on one that "
                "does. Nothing ran. Tell the user; retry once it answers."
            ) from exc
        except OSError as exc:
            raise self._moved(exc) from exc

    async def directory_inside(self, raw: str) -> Path | None:
        """`raw` resolved (links followed) when it names a directory inside the workspace,
        else None: from the kernel's caches on the event loop, else in one of the owner's
        threads (a command may end in a directory whose filesystem takes its time)."""
        root = self.pinned_root()
        try:
            return existing_directory(root, raw, on_loop=True)
        except NeedsThread:
            look = functools.partial(existing_directory, root, raw, on_loop=False)
            return await FILESYSTEM_THREADS.run(self.owner, look)

    def check_workspace_on_loop(self) -> None:
        """`verify_workspace` as far as the kernel's caches tell, at once (ToolError when they
        show the workspace moved; nothing when they cannot tell)."""
        try:
            self.pinned_root().verify_on_loop()
        except NeedsThread:
            return
        except OSError as exc:
            raise self._moved(exc) from exc

    def _moved(self, exc: OSError) -> ToolError:
        return ToolError(
            f"The workspace {self.workspace} is no longer the directory this session was "
            f"opened on: it was moved, replaced or made a symbolic link ({exc.strerror}). "
            "Nothing ran. Tell the user; a new session is needed to go on."
        )

    def record_refusal(self, tool: str, outcome: Literal["deny", "ask"], input_hash: str) -> None:
        """Note a call the policy refused (or asked a person about)."""
        self.refusals.append((time.monotonic(), tool, outcome, input_hash))

    def recent_refusals(self, window_s: float) -> dict[str, dict[str, int]]:
        """Per tool, how many of its calls were denied and asked in the last `window_s`."""
        since = time.monotonic() - window_s
        counts: dict[str, dict[str, int]] = {}
        for at, tool, outcome, _ in self.refusals:
            if at >= since:
                tool_counts = counts.setdefault(tool, {"deny": 0, "ask": 0})
                tool_counts[outcome] += 1
        return counts

    def refusals_of(self, tool: str, input_hash: str, window_s: float) -> dict[str, int]:
        """How many times this very call (tool and input) was denied and asked lately."""
        since = time.monotonic() - window_s
        counts = {"deny": 0, "ask": 0}
        for at, name, outcome, key in self.refusals:
            if at >= since and name == tool and key == input_hash:
                counts[outcome] += 1
        return counts

    def touch(self) -> None:
        """Note activity (postpones the idle close)."""
        self.last_used = time.monotonic()

    def idle_for(self, now: float) -> float:
        """Seconds since the last call."""
        return now - self.last_used

    def record_read(
        self, path: Path, data: bytes, mtime_ns: int, sha256: str | None = None
    ) -> None:
        """Remember that `path` was Read with this content (`sha256`: its digest, when the
        caller computed it off the event loop)."""
        digest = sha256 if sha256 is not None else file_sha256(data)
        self.forget(path)  # read again: the most recent
        self.reads[path] = ReadRecord(mtime_ns=mtime_ns, sha256=digest)
        self._read_chars += len(str(path))
        while len(self.reads) > MAX_READS_KEPT or self._read_chars > MAX_READ_PATH_CHARS:
            self.forget(next(iter(self.reads)))

    def require_fresh(
        self, path: Path, current: bytes, tool: str, sha256: str | None = None
    ) -> str:
        """Refuse to modify a file not Read in this session or changed since; returns its sha256
        (`sha256`: the current content's, when the caller computed it off the event loop)."""
        record = self.reads.get(path)
        if record is None:
            raise ToolError(
                f"{path} exists but has not been read in this session. Use the Read tool on it "
                f"first, then retry the {tool}."
            )
        digest = sha256 if sha256 is not None else file_sha256(current)
        if digest != record.sha256:
            raise ToolError(
                f"{path} has been modified since it was last read (by the user, a command or "
                f"another tool). Read it again, then retry the {tool}."
            )
        return digest

    def forget(self, path: Path) -> None:
        """Forget a read (after the file was rewritten, the new content is recorded instead)."""
        if self.reads.pop(path, None) is not None:
            self._read_chars -= len(str(path))

    def record_written(self, path: Path, data: bytes, sha256: str | None = None) -> None:
        """After a successful write the session knows the file's content as if it had Read it
        (`sha256`: its digest, when the caller computed it off the event loop). The file is
        not looked at again: freshness is the hash's alone, and a stat by path on the event
        loop could wait on whatever the workspace's owner mounted there."""
        self.record_read(path, data, 0, sha256)
