"""What every test session shares: the workspaces filesystems the test daemons mounted are
unmounted at the end (a daemon leaves its own mounted, as in real use)."""

from __future__ import annotations

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
