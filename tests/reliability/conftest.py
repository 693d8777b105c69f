"""Reliability suite: shared daemons, and the summary table (scenario, attempts, survived, lost).

Every scenario reports what it tried through the `record` fixture before it asserts, so the table
printed at the end of the run shows the figures of failing scenarios too. `lost` is what did not
survive: a call not answered, answered twice, run without an allow, an escape that worked.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from bench.processes import unmount_below
from daemon.config import PROJECT_ROOT
from tests.integration.harness import RunningDaemon, running_daemon
from tests.reliability.support import (
    CHAOS,
    container_ids,
    docker_problem,
    owned_workspace,
    settle_containers,
    unique,
)


@dataclass
class Row:
    """One scenario's figures, summed over the tests that report it."""

    scenario: str
    attempts: int = 0
    survived: int = 0
    known: int = 0
    """Lost attempts in tests marked xfail: known bugs, reported to be fixed."""

    @property
    def lost(self) -> int:
        """Attempts that did not survive."""
        return self.attempts - self.survived


_ROWS: dict[str, Row] = {}
_FIGURES: list[tuple[str, str]] = []


class Record(Protocol):
    """The `record` fixture's signature."""

    def __call__(self, scenario: str, attempts: int, survived: int) -> None: ...


class Figure(Protocol):
    """The `figure` fixture's signature."""

    def __call__(self, name: str, value: str) -> None: ...


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Record:
    """Adds to the summary table: how often a scenario was tried and how often it held."""
    known_bug = request.node.get_closest_marker("xfail") is not None

    def add(scenario: str, attempts: int, survived: int) -> None:
        row = _ROWS.setdefault(scenario, Row(scenario))
        row.attempts += attempts
        row.survived += survived
        if known_bug:
            row.known += attempts - survived

    return add


@pytest.fixture
def figure() -> Figure:
    """Adds a measured figure (a rate, a memory size) printed under the table."""

    def add(name: str, value: str) -> None:
        _FIGURES.append((name, value))

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the table of every scenario that ran, then the figures."""
    if not _ROWS and not _FIGURES:
        return
    rows = list(_ROWS.values())
    mode = "long variants (TOOLJAIL_CHAOS=1)" if CHAOS else "default case counts"
    terminalreporter.section(f"tooljail reliability summary: {mode}")
    width = max([len("scenario"), *(len(r.scenario) for r in rows)])
    header = f"{'scenario':<{width}}  {'attempts':>8}  {'survived':>8}  {'lost':>5}"
    terminalreporter.write_line(header)
    terminalreporter.write_line("-" * len(header))
    for row in rows:
        line = f"{row.scenario:<{width}}  {row.attempts:>8}  {row.survived:>8}  {row.lost:>5}"
        if row.known:
            line += f"  ({row.known} in known-bug tests marked xfail)"
        terminalreporter.write_line(line)
    terminalreporter.write_line("-" * len(header))
    lost = sum(r.lost for r in rows)
    known = sum(r.known for r in rows)
    terminalreporter.write_line(
        f"{len(rows)} scenarios, {sum(r.attempts for r in rows)} attempts, {lost} lost "
        f"({known} of them known bugs, {lost - known} unexpected)"
    )
    if _FIGURES:
        terminalreporter.write_line("")
        for name, value in _FIGURES:
            terminalreporter.write_line(f"{name}: {value}")


# --- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def rel_tmp() -> Iterator[Path]:
    """A short temporary folder (unix socket paths must stay under ~100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="tjr-") as folder:
        try:
            yield Path(folder).resolve()
        finally:
            unmount_below(Path(folder))


@pytest.fixture(scope="session")
def docker_ready() -> None:
    """Skips sandbox scenarios when no Docker engine or no sandbox image is there."""
    problem = docker_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def rel_host(rel_tmp: Path) -> Iterator[RunningDaemon]:
    """A daemon with the real OPA and no sandbox: the host-side (read-only) tools."""
    workspace = rel_tmp / "ws-host"
    workspace.mkdir()
    # The socket's stem names the instance: unique, so concurrent runs never share one.
    socket_path = rel_tmp / f"{unique('rh')}.sock"
    policies = _without_refusal_limit(rel_tmp / "rh-policies")
    with running_daemon(
        workspace, socket_path, sandbox={"enabled": False}, opa={"policies_dir": policies}
    ) as daemon:
        yield daemon


def _without_refusal_limit(folder: Path) -> Path:
    """The shipped policies, except that a call denied again and again is not stopped: the
    escape races repeat one call hundreds of times, denied whenever the link points outside."""
    shutil.copytree(PROJECT_ROOT / "policies", folder)
    data = json.loads((folder / "data.json").read_text())
    data["tooljail"]["max_refusals_per_call"] = 1_000_000
    (folder / "data.json").write_text(json.dumps(data))
    return folder


@pytest.fixture(scope="session")
def rel_sandbox(rel_tmp: Path, docker_ready: None) -> Iterator[RunningDaemon]:
    """A daemon with the real Docker sandbox over a workspace owned by a non-root user."""
    workspace = owned_workspace(rel_tmp / "ws-sbx")
    socket_path = rel_tmp / f"{unique('rs')}.sock"
    with running_daemon(
        workspace,
        socket_path,
        sandbox={"pool_size": 1, "ceilings": {"memory_mb": 128, "pids": 128}},
    ) as daemon:
        if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
            pytest.skip("the daemon found no Docker engine")
        yield daemon
    assert settle_containers(daemon.daemon.instance_id, keep=0, timeout_s=15) == 0, (
        f"containers left after the daemon stopped: {container_ids(daemon.daemon.instance_id)}"
    )


def _folder_name(test_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)[:120]


@pytest.fixture
def sbx_dir(rel_sandbox: RunningDaemon, request: pytest.FixtureRequest) -> Path:
    """A fresh folder, owned by the workspace owner, in the sandbox daemon's workspace."""
    return owned_workspace(rel_sandbox.workspace.resolve() / _folder_name(request.node.name))


@pytest.fixture
def host_dir(rel_host: RunningDaemon, request: pytest.FixtureRequest) -> Path:
    """A fresh folder in the host daemon's workspace."""
    folder = rel_host.workspace.resolve() / _folder_name(request.node.name)
    folder.mkdir()
    return folder
