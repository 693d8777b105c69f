"""`scripts/install.sh` into a temporary prefix: the layout, the rendered files, and the installed
daemon serving a call with the installed config, OPA and policies (one install for the module;
it takes about a minute)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.config import load_settings
from tests.integration.harness import serve_process

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
UNIT = "lib/systemd/system/tooljail.service"
EXAMPLE = "share/tooljail/tooljail.toml.example"


def _clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without anything that would steer the install or the daemon."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TOOLJAIL_") and k not in ("PREFIX", "DESTDIR", "VIRTUAL_ENV")
    }
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("prefix")
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "install.sh"), f"PREFIX={root}"],
        capture_output=True,
        text=True,
        timeout=840,
        env=_clean_env(),
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"install.sh failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return root


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    }


def test_layout(prefix: Path) -> None:
    link = prefix / "bin" / "tooljail"
    assert link.is_symlink()
    assert os.readlink(link) == "../lib/tooljail/bin/tooljail"  # relative: survives DESTDIR
    assert os.access(link.resolve(), os.X_OK)

    opa = prefix / "lib" / "tooljail" / "bin" / "opa"
    version = subprocess.run([str(opa), "version"], capture_output=True, text=True, check=True)
    reference = subprocess.run(
        [str(REPO / ".tools" / "bin" / "opa"), "version"], capture_output=True, text=True
    )
    assert version.stdout.splitlines()[0] == reference.stdout.splitlines()[0]

    installed = _files(prefix / "share" / "tooljail" / "policies")
    assert installed == _files(REPO / "policies")
    assert any(name.endswith("_test.rego") for name in installed)  # reloads run `opa test`

    docs = prefix / "share" / "doc" / "tooljail" / "operations.md"
    assert docs.read_bytes() == (REPO / "docs" / "operations.md").read_bytes()

    for installed_as, shipped in (
        ("lib/sysusers.d/tooljail.conf", "tooljail.sysusers"),
        ("lib/tmpfiles.d/tooljail.conf", "tooljail.tmpfiles"),
    ):
        packaged = REPO / "packaging" / "systemd" / shipped
        assert (prefix / installed_as).read_bytes() == packaged.read_bytes()


def test_the_package_is_installed_not_linked_to_the_checkout(prefix: Path) -> None:
    python = prefix / "lib" / "tooljail" / "bin" / "python"
    where = subprocess.run(
        [str(python), "-c", "import daemon, sandbox.runner; print(daemon.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=prefix,
        env=_clean_env(),
    ).stdout.strip()
    assert Path(where).is_relative_to(prefix / "lib" / "tooljail")
    # Everything the runner's folder holds is mounted into the containers: all of it installed.
    runner = Path(where).parents[1] / "sandbox" / "runner"
    source = REPO / "sandbox" / "runner"
    shipped = {p.name for p in source.iterdir() if p.suffix in {".py", ".sh"}}
    assert shipped <= {p.name for p in runner.iterdir()}


def test_example_config_points_at_the_installed_opa_and_policies(prefix: Path) -> None:
    text = (prefix / EXAMPLE).read_text()
    assert "@PREFIX@" not in text

    settings = load_settings(prefix / EXAMPLE)

    assert settings.opa.binary == prefix / "lib" / "tooljail" / "bin" / "opa"
    assert settings.opa.policies_dir == prefix / "share" / "tooljail" / "policies"
    assert settings.listen == "unix:///run/tooljail/tooljail.sock"
    assert settings.state_dir == Path("/var/lib/tooljail")


def test_unit_file_is_rendered_for_the_prefix(prefix: Path) -> None:
    unit = (prefix / UNIT).read_text()
    assert "@PREFIX@" not in unit
    lines = unit.splitlines()
    assert f"ExecStart={prefix}/bin/tooljail serve --config /etc/tooljail/tooljail.toml" in lines
    assert "Type=notify" in lines
    assert "ExecReload=/bin/kill -HUP $MAINPID" in lines


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not here")
def test_unit_file_passes_systemd_analyze_verify(prefix: Path) -> None:
    done = subprocess.run(
        ["systemd-analyze", "verify", str(prefix / UNIT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "tooljail.service" not in done.stderr, done.stderr  # no warning about our lines


@pytest.fixture
def served(prefix: Path, short_tmp: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[str]]]:
    """The installed daemon with the installed example config; paths moved to a temp folder."""
    home = short_tmp / "installed"
    workspace = home / "ws"
    workspace.mkdir(parents=True)
    socket_path = home / "tj.sock"
    env = _clean_env(
        TOOLJAIL_LISTEN=f"unix://{socket_path}",
        TOOLJAIL_WORKSPACE=str(workspace),
        TOOLJAIL_STATE_DIR=str(home / "state"),
        TOOLJAIL_AUDIT_LOG=str(home / "audit.jsonl"),
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_OPA__TIMEOUT_S="5",
    )
    argv = [str(prefix / "bin" / "tooljail"), "serve", "--config", str(prefix / EXAMPLE)]
    with serve_process(argv, env, socket_path, home / "serve.log", cwd=home) as process:
        yield home, workspace, process


def test_installed_daemon_serves_a_call(
    prefix: Path, served: tuple[Path, Path, subprocess.Popen[str]]
) -> None:
    home, workspace, process = served
    (workspace / "hello.txt").write_text("hello from the installed daemon\n")

    done = subprocess.run(
        [
            str(prefix / "bin" / "tooljail"),
            "call",
            "--target",
            f"unix://{home / 'tj.sock'}",
            "Read",
            f'{{"file_path": "{workspace / "hello.txt"}"}}',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_env(),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[ALLOW, ok]" in done.stdout
    assert "     1\thello from the installed daemon" in done.stdout

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0
    audit = (home / "audit.jsonl").read_text()
    assert '"tool":"Read"' in audit
    assert '"outcome":"allow"' in audit
