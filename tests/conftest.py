"""What every test session shares: the workspaces filesystems the test daemons mounted are
unmounted at the end (a daemon leaves its own mounted, as in real use), and each test leaves the
root logger as it found it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from bench.processes import unmount_below
from tests.hung_mount import hung_mount  # noqa: F401 - a fixture for every test
from tests.integration.harness import STATE_DIRS


@pytest.fixture(scope="session", autouse=True)
def _unmount_test_workspaces() -> Iterator[None]:
    yield
    for state_dir in STATE_DIRS:
        if state_dir.exists():
            unmount_below(state_dir)


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """A test that runs the CLI in-process (`daemon.cli.main`) or configures logging itself
    installs a handler on the stream of that moment, which pytest's capture closes when the test
    ends: a later test's log line (a warm pool's refill thread finishing after its test) then
    failed with "Logging error ... I/O operation on closed file"."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
        root.setLevel(level)
