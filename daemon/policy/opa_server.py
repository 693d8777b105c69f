"""The managed OPA: listening on a Unix socket in a directory only the daemon's user may enter,
loaded with the policy folder, supervised (restarted and reloaded if it dies, on the same socket),
stopped with the daemon.

Nobody else can reach it: its API can replace policies and data, so a loopback port (which every
local user can connect to, and take first) is not an option. The kernel checks the directory's
mode (0700) and the socket's (0600) on every connect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import stat
import time
from collections import deque
from pathlib import Path

from daemon.errors import PolicyLoadError, TooljailError
from daemon.host.child import Child
from daemon.policy.loader import (
    PolicyFiles,
    load_policy_files,
    read_policy_folder,
    write_policy_snapshot,
)
from daemon.policy.opa_client import UNIX_SCHEME, client_for

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 15.0
_RESTART_BACKOFF_S = 0.5
_MAX_KEPT_LINE = 4096


def find_opa(configured: Path | None, project_root: Path) -> Path:
    """The opa binary: configured, else the project's .tools/bin/opa, else PATH."""
    candidates = [configured] if configured else [project_root / ".tools" / "bin" / "opa"]
    for candidate in candidates:
        if candidate is not None and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("opa")
    if found:
        return Path(found)
    raise TooljailError(
        "the opa binary was not found (looked at .tools/bin/opa and PATH); run `make setup` "
        "or set opa.binary in the config"
    )


#: Longest Unix socket path the kernel takes (sun_path is 108 bytes with its NUL).
MAX_SOCKET_PATH = 107


def private_socket_dir(folder: Path) -> Path:
    """`folder`, made (or found) as a directory only this user may enter; refused when another
    user owns it or it is a symbolic link (nothing in it could be trusted then)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise TooljailError(
            f"{folder} must be a directory owned by the daemon's user (uid {os.geteuid()}) for "
            "the policy engine's socket; remove it or choose another state_dir"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        folder.chmod(0o700)
    return folder


def _dying_with_parent(argv: list[str]) -> list[str]:
    """`argv` started so that it gets SIGTERM when the daemon dies, even by SIGKILL.

    util-linux's setpriv sets the parent-death signal and then execs the command. (A Python
    preexec_fn doing the same would run Python between fork and exec, which is unsafe with the
    threads gRPC runs: a forked child was seen aborting in gRPC's poller before it could exec.)
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        log.warning("setpriv (util-linux) is missing: the managed OPA will outlive a killed daemon")
        return argv
    return [setpriv, "--pdeathsig", "TERM", "--", *argv]


def _opa_environment() -> dict[str, str]:
    """What OPA may see of the daemon's environment: nothing secret. Any Rego module (a shadow
    policy under review, say) can read OPA's environment (opa.runtime().env), and the daemon's
    may hold tokens and keys (TOOLJAIL_AUTH__TOKENS, TOOLJAIL_APPROVAL__KEY)."""
    keep = ("PATH", "HOME", "LANG", "TZ")
    return {name: os.environ[name] for name in keep if name in os.environ}


class ManagedOpa:
    """An OPA server owned by this daemon."""

    def __init__(
        self, binary: Path, policies_dir: Path, socket_path: Path, timeout_s: float = 2.0
    ) -> None:
        if len(os.fsencode(socket_path)) > MAX_SOCKET_PATH:
            raise TooljailError(
                f"the policy engine's socket path {socket_path} is longer than the kernel's "
                f"{MAX_SOCKET_PATH} bytes; choose a shorter state_dir"
            )
        self._binary = binary.absolute()  # OPA starts in its policy snapshot folder
        self._policies_dir = policies_dir
        self._timeout_s = timeout_s
        self._socket = socket_path
        self._process: Child | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._files: PolicyFiles | None = None
        self._stderr_tail: deque[str] = deque(maxlen=40)
        self._drain: asyncio.Task[None] | None = None
        self.restarts = 0
        """How often the supervisor had to restart OPA."""
        self.loading = True
        """OPA runs but does not hold the policy yet (starting or restarting): do not ask it."""

    @property
    def url(self) -> str:
        """Where the server listens (unix:///...)."""
        return UNIX_SCHEME + str(self._socket)

    @property
    def _snapshot_folder(self) -> Path:
        """Where the policy OPA starts with is written (beside the socket, as private)."""
        return self._socket.with_name(self._socket.name + ".policy")

    @property
    def pid(self) -> int | None:
        """Process id of the running server."""
        return self._process.pid if self._process else None

    async def start(self) -> None:
        """Start OPA and load the policy folder; raises PolicyLoadError on a bad policy."""
        self._files = read_policy_folder(self._policies_dir)
        await self._spawn_and_load()
        self._supervisor = asyncio.create_task(self._supervise(), name="opa-supervisor")

    async def reload(self) -> None:
        """Re-read the policy folder and load it; on failure the last good policy is put back."""
        files = read_policy_folder(self._policies_dir)
        previous = self._files
        try:
            await self._load(files, previous)
        except PolicyLoadError:
            if previous is not None:
                await self._load(previous, files)
            raise
        self._files = files

    async def _spawn_and_load(self) -> None:
        """Start OPA with the policy given on its command line (one compile; uploading module by
        module compiles the whole set once per module, which made a restart take seconds under
        load); when OPA refuses it at start, load it over REST instead, for the precise error."""
        self.loading = True
        assert self._files is not None
        try:
            process = await self._spawn(self._files)
            await self._check_modules(process, self._files)
        except TooljailError as exc:
            log.warning(
                "opa refused the policy on its command line (%s); loading it over REST", exc
            )
            process = await self._spawn(None)
            try:
                await self._load(self._files)
            except BaseException:
                await self._terminate(process)
                raise
        self.loading = False

    async def _check_modules(self, process: Child, files: PolicyFiles) -> None:
        """OPA holds exactly the snapshot's modules under their ids (it reads some file names
        its own way, a `prefix:` for one); else it goes, and the caller loads over REST."""
        async with client_for(self.url, max(self._timeout_s, 5.0)) as client:
            held = set(await client.get_policies_list())
        if held != set(files.modules):
            await self._terminate(process)
            raise TooljailError(
                f"opa loaded modules {sorted(held ^ set(files.modules))} other than the snapshot's"
            )

    async def _spawn(self, preloaded: PolicyFiles | None) -> Child:
        """Start OPA (holding `preloaded`, if given) and wait until it answers."""
        private_socket_dir(self._socket.parent)
        # Ours (in our private directory): left behind by an OPA that died, so it goes.
        self._socket.unlink(missing_ok=True)
        argv = [
            str(self._binary),
            "run",
            "--server",
            "--addr",
            self.url,
            "--unix-socket-perm",
            "600",
            "--log-level",
            "error",
            "--skip-version-check",
            # No decision logging: it costs OPA a fifth of its time per decision, and its lines
            # would only be dropped here (the audit is the record; the daemon names decisions).
        ]
        snapshot = self._snapshot_folder
        if preloaded is not None:
            argv += ["--", *write_policy_snapshot(preloaded, snapshot)]
        process = Child(
            _dying_with_parent(argv),
            cwd=snapshot if preloaded else None,
            stdout="null",
            env=_opa_environment(),
        )
        self._process = process
        self._drain = asyncio.create_task(self._drain_stderr(process), name="opa-stderr")
        try:
            await self._wait_healthy(process)
        except BaseException:
            await self._terminate(process)
            raise
        return process

    async def _wait_healthy(self, process: Child) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        async with client_for(self.url, 1.0) as client:
            while time.monotonic() < deadline:
                if process.exited:
                    if self._drain is not None:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(asyncio.shield(self._drain), 1.0)
                    raise TooljailError(
                        f"opa exited with code {process.returncode} at start: "
                        + " | ".join(self._stderr_tail)
                    )
                if await client.check_health():
                    return
                await asyncio.sleep(0.05)
        raise TooljailError(f"opa did not become healthy within {_START_TIMEOUT_S:.0f} s")

    async def _drain_stderr(self, process: Child) -> None:
        """Keep reading OPA's stderr so a full pipe can never stall it; keep the last lines."""
        pending = b""
        # Chunks, not lines: a line of OPA's (its errors quote inputs) may be far longer than any
        # line limit.
        while chunk := await process.read(process.stderr):
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-_MAX_KEPT_LINE:]
            for raw in lines:
                line = raw[:_MAX_KEPT_LINE].decode(errors="replace").rstrip()
                self._stderr_tail.append(line)
                log.warning("opa: %s", line)

    async def _load(self, files: PolicyFiles, previous: PolicyFiles | None = None) -> None:
        async with client_for(self.url, max(self._timeout_s, 5.0)) as client:
            await load_policy_files(client, files, previous)

    async def _supervise(self) -> None:
        while not self._stopping:
            process = self._process
            if process is None:
                return
            await process.wait()
            if self._stopping:
                return
            await self._terminate(process)  # releases its pipes
            self.loading = True
            log.error("managed opa exited with code %s; restarting it", process.returncode)
            while not self._stopping:
                await asyncio.sleep(_RESTART_BACKOFF_S)
                try:
                    await self._spawn_and_load()
                except (TooljailError, OSError) as exc:
                    log.error("restarting opa failed: %s", exc)
                    continue
                self.restarts += 1
                log.warning("managed opa restarted (pid %s)", self.pid)
                break

    async def _terminate(self, process: Child) -> None:
        if not process.exited:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), timeout=5)
        await process.close()
        if self._drain is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._drain, 1.0)

    async def stop(self) -> None:
        """Stop supervising and stop the server."""
        self._stopping = True
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        if self._process is not None:
            await self._terminate(self._process)
        self._socket.unlink(missing_ok=True)
        shutil.rmtree(self._snapshot_folder, ignore_errors=True)


__all__ = ["ManagedOpa", "PolicyLoadError", "find_opa"]
