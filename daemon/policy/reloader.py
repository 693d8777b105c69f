"""Policy reloads (SIGHUP or the Admin RPC): checked and tested before they replace anything.

A candidate that fails `opa check --strict` or `opa test` is refused and the last good policy keeps
serving; the error (file:row:col, failing tests) goes back to the operator and into the log.
Decisions keep being answered throughout: the serving policy is only replaced once the candidate
passed, and a load that still fails half-way puts the previous modules back.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import PolicyLoadError
from daemon.host.child import run_child
from daemon.policy.mask import AuditMask, MaskError
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa
from daemon.policy.revision import policy_revision
from daemon.tools.operator.definition import ToolDefinitionError

log = logging.getLogger(__name__)

ToolsLoader = Callable[[], Callable[[], None]]
"""Reads the policy folder's tools (raising ToolDefinitionError) and returns how to put them in
force, which the reload does once the policy itself is loaded."""

#: The policy input's JSON schema beside the policies: for the type checker, not data to load.
INPUT_SCHEMA = "input.schema.json"
OPA_IGNORE = ("--ignore", INPUT_SCHEMA)
_CHECK_TIMEOUT_S = 120.0
#: Only the end of the output is shown; keep enough that the end is there.
_OUTPUT_CAP_BYTES = 1 << 20


@dataclass(frozen=True)
class ReloadResult:
    """What a reload did."""

    reloaded: bool
    revision: str
    """The revision serving after the attempt."""
    error: str = ""


async def _opa(binary: Path, *args: str) -> tuple[int, str]:
    run = await run_child(
        [str(binary), *args],
        timeout_s=_CHECK_TIMEOUT_S,
        output_cap=_OUTPUT_CAP_BYTES,
        merge_stderr=True,
    )
    if run.timed_out:
        return 1, f"opa {args[0]} did not finish within {_CHECK_TIMEOUT_S:.0f} s"
    return run.exit_code or 0, run.stdout.text().strip()


async def check_policy_folder(binary: Path, folder: Path) -> str:
    """Empty when the folder compiles strictly (type-checked against its input schema, when it
    has one) and its tests pass; else what failed."""
    schema = folder / INPUT_SCHEMA
    typed = ("--schema", str(schema)) if schema.is_file() else ()
    code, output = await _opa(binary, "check", "--strict", *typed, *OPA_IGNORE, str(folder))
    if code != 0:
        return f"opa check failed:\n{output[-4000:]}"
    if any(folder.rglob("*_test.rego")):
        # Each test's own limit (5 s by default) is about the machine, not the policy: a loaded
        # machine must not turn a good policy into a refused reload.
        code, output = await _opa(binary, "test", "--timeout", "60s", *OPA_IGNORE, str(folder))
        if code != 0:
            return f"opa test failed:\n{output[-4000:]}"
    return await _mask_problem(binary, folder)


async def _mask_problem(binary: Path, folder: Path) -> str:
    """Empty when the folder's audit mask reads and compiles (see daemon.policy.mask)."""
    query = "x := [data.tooljail.authz.mask, [p | some p in data.tooljail.authz.mask_patterns]]"
    _, output = await _opa(binary, "eval", "-f", "json", *OPA_IGNORE, "-d", str(folder), query)
    try:
        fields, patterns = json.loads(output)["result"][0]["bindings"]["x"]
        AuditMask.parse(fields, patterns)
    except MaskError as exc:
        return str(exc)
    except (ValueError, KeyError, IndexError, TypeError):
        return (
            f"the policy's audit mask (data.tooljail.authz.mask) cannot be read:\n{output[-2000:]}"
        )
    return ""


class PolicyReloader:
    """Reloads the managed OPA's policy folder, one reload at a time."""

    def __init__(
        self,
        opa: ManagedOpa | None,
        engine: OpaPolicyEngine,
        binary: Path | None,
        folder: Path,
        tools: ToolsLoader | None = None,
    ) -> None:
        self._opa = opa
        self._engine = engine
        self._binary = binary
        self._folder = folder
        self._tools = tools
        self._lock = asyncio.Lock()

    async def reload(self) -> ReloadResult:
        """Check, test, then load the policy folder; refuse (keeping the old one) on any failure."""
        async with self._lock:
            current = self._engine.revision
            if self._opa is None or self._binary is None:
                return ReloadResult(
                    False, current, "this daemon uses an external OPA: reload the policy there"
                )
            use_tools: Callable[[], None] | None = None
            try:
                if self._tools is not None:
                    use_tools = self._tools()
            except ToolDefinitionError as exc:
                error = str(exc)
            else:
                error = await check_policy_folder(self._binary, self._folder)
            if not error:
                self._engine.policy_changing()
                try:
                    await self._opa.reload()
                except PolicyLoadError as exc:
                    error = str(exc)
            if error:
                log.error("policy reload refused, still serving %s: %s", current, error)
                return ReloadResult(False, current, error)
            if use_tools is not None:
                use_tools()  # the policy that decides them is in force: so are they
            revision = await policy_revision(self._folder)
            try:
                await self._engine.policy_loaded(revision)
            except MaskError as exc:  # checked above: only if the folder changed meanwhile
                log.error("policy loaded but its audit mask is malformed: %s", exc)
                return ReloadResult(False, revision, str(exc))
            log.info("policy reloaded: revision %s (was %s)", revision, current)
            return ReloadResult(True, revision)
