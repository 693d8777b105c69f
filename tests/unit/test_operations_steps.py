"""docs/operations.md's once-per-host steps are what the service tests run (tests/service): the
page and the harness cannot drift apart silently."""

from __future__ import annotations

from pathlib import Path

from tests.service.harness import operator_steps

PREFIX = Path("/var/lib/tooljail-svc/tjsvc-0000/prefix")


def test_the_harness_runs_the_pages_steps_with_its_own_prefix_and_uid() -> None:
    steps = operator_steps(PREFIX, 1001)
    assert steps[0] == f"systemd-sysusers {PREFIX}/lib/sysusers.d/tooljail.conf"
    assert "usermod -aG tooljail-sandbox tooljail" in steps
    assert any(s.startswith("useradd --uid 1001 --user-group ") for s in steps)
    assert f"{PREFIX}/bin/tooljail config check --config /etc/tooljail/tooljail.toml" in steps
    assert steps[-1] == "systemctl enable --now tooljail"
    assert "make image" not in steps and not any("/usr/local/" in s for s in steps)


def test_every_file_a_step_names_is_one_make_install_lays_out() -> None:
    layout = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    for relative in ("lib/sysusers.d/tooljail.conf", "lib/tmpfiles.d/tooljail.conf"):
        assert f"`{relative}`" in layout
        assert any(f"{PREFIX}/{relative}" in step for step in operator_steps(PREFIX, 1001))
