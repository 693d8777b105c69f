"""The machine itself, and the unit exactly as shipped: every hardening directive on.

Where the shipped unit does not serve, the test finds which directives are the cause by turning
them off with drop-ins (a bisection: all off, then back on in halves) and says what each breaks.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tests.service import hardening
from tests.service.harness import CALLER, UNIT, Machine

pytestmark = [
    pytest.mark.service,
    pytest.mark.integration,
    pytest.mark.docker,
    pytest.mark.timeout(900),
]

BISECT_DROP_IN = "70-bisect"


def test_systemd_boots_to_running(machine: Machine) -> None:
    assert machine.boot_state == "running", machine.failed_units


def test_every_hardening_directive_of_the_unit_is_known_here(machine: Machine) -> None:
    unit = machine.run("systemctl", "cat", UNIT).stdout
    names = hardening.hardening_directives(unit)
    assert names, "no hardening section found in the installed unit"
    unknown = set(names) - set(hardening.OFF) - hardening.NOT_SWITCHES
    assert not unknown, f"add to hardening.OFF how a drop-in turns these off: {sorted(unknown)}"


def test_installed_unit_verifies_under_this_systemd(machine: Machine) -> None:
    done = machine.run("systemd-analyze", "verify", UNIT, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_shipped_unit_serves_with_its_hardening(service: Machine) -> None:
    """As shipped: every hardening directive it keeps on (those it turns off say why in the
    unit). When it does not serve, the directives to blame are found by bisection."""
    problems = hardening.serving_problems(service)
    if not problems:
        return
    unit = service.run("systemctl", "cat", UNIT).stdout
    switches = [
        name for name in hardening.hardening_directives(unit) if name not in hardening.NOT_SWITCHES
    ]

    def problems_with_off(off: Sequence[str]) -> list[str]:
        service.set_drop_in(BISECT_DROP_IN, hardening.off_drop_in(off))
        hardening.fresh_workspace(service)
        return hardening.serving_problems(service)

    with_all_off = problems_with_off(switches)
    assert not with_all_off, (
        f"the daemon does not serve even with every hardening directive off: {with_all_off}; "
        f"as shipped: {problems}"
    )
    found = hardening.culprits(switches, problems_with_off)
    evidence = {
        name: problems_with_off([other for other in found if other != name]) for name in found
    }
    report = "\n".join(f"- {name}=on alone breaks: {what}" for name, what in evidence.items())
    pytest.fail(
        f"the unit as shipped does not serve: {problems}\n"
        f"directives that must be off (or widened) for it to serve: {found}\n{report}"
    )


def test_a_fresh_session_opens_under_the_shipped_config(running: Machine) -> None:
    """OpenSession without a workspace: tooljail makes one. The service runs as tooljail, not
    root: the installed config turns the per-workspace disk budget off (it needs a mount)."""
    script = (
        "import tooljail\n"
        "jail = tooljail.Client()\n"
        "session = jail.open_session()\n"
        "print(session.id)\n"
        "jail.close_session(session.id)\n"
    )
    done = running.run(
        str(running.prefix / "lib" / "tooljail" / "bin" / "python"), "-c", script,
        user=CALLER, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-1500:]
