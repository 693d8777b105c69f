"""Service fixtures: one systemd machine per session with tooljail installed (tests/service/
harness.py says how), and a clean, stopped service before each test.

The image and install steps print their progress live (pytest's capture is suspended for them):
a first build takes minutes, and a silent test session would look hung.
"""

from __future__ import annotations

import pwd
from collections.abc import Iterator

import pytest

from tests.service.hardening import unit_fixes_drop_in
from tests.service.harness import (
    HARNESS_DROP_IN,
    SANDBOX_USER,
    Machine,
    boot,
    build_images,
    install,
    remove,
)

#: Drop-in every test but the as-shipped one runs with (see hardening.UNIT_FIXES).
FIXES_DROP_IN = "60-unit-fixes"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "service: boots a real systemd in a container and installs tooljail in it"
    )


def _sandbox_uid() -> int:
    """The host's sandbox account's uid when it has one (files in the shared workspace then
    belong to it on the host too), else the first regular uid."""
    try:
        return pwd.getpwnam(SANDBOX_USER).pw_uid
    except KeyError:
        return 1001


@pytest.fixture(scope="session")
def machine(pytestconfig: pytest.Config) -> Iterator[Machine]:
    """The booted machine with tooljail installed, shared by the session; removed at its end
    with its run folder, pass or fail."""
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n==> service tests: the images (each built only when its recipe changed)")
        image = build_images()
        print(f"==> booting {image} and installing tooljail in it (make install)")
        booted = boot(image)
        try:
            install(booted, _sandbox_uid())
        except BaseException:
            remove(booted)
            raise
    try:
        yield booted
    finally:
        leftovers = remove(booted)
    assert not leftovers, f"containers left after the service stopped (removed now): {leftovers}"


@pytest.fixture
def service(machine: Machine) -> Iterator[Machine]:
    """The machine with the service stopped and everything a test may change put back: only the
    harness's drop-in (the unit exactly as installed otherwise)."""
    machine.reset(keep=(HARNESS_DROP_IN,))
    yield machine
    machine.reset(keep=(HARNESS_DROP_IN,))


@pytest.fixture
def fixed_service(service: Machine) -> Machine:
    """The same, with what the shipped unit lacks under this systemd (hardening.UNIT_FIXES)."""
    service.set_drop_in(FIXES_DROP_IN, unit_fixes_drop_in())
    return service


@pytest.fixture
def running(fixed_service: Machine) -> Machine:
    """The service started (READY came) with a file to read in its workspace."""
    started = fixed_service.start()
    assert started.returncode == 0, started.stderr + fixed_service.systemctl(
        "status", "tooljail.service", "--no-pager", check=False
    )
    fixed_service.seed_workspace()
    return fixed_service
