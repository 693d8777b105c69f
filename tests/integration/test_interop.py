"""The Go and Node client packages and their examples against a live daemon, as `make interop`
runs them."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import containers_of

# A first run builds the Go client from an empty cache and runs npm ci: minutes, not seconds.
pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.timeout(600)]

REPO_ROOT = Path(__file__).resolve().parents[2]
DAEMON_LOG = REPO_ROOT / ".tools" / "logs" / "interop-daemon.log"


@pytest.fixture(scope="module")
def interop() -> subprocess.CompletedProcess[str]:
    """One run of scripts/interop.sh (stderr folded into stdout, as a person reads it)."""
    return subprocess.run(
        ["bash", "scripts/interop.sh"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=580,
        check=False,
    )


def test_both_clients_pass(interop: subprocess.CompletedProcess[str]) -> None:
    assert interop.returncode == 0, interop.stdout
    assert "interop: 4 passed, 0 failed" in interop.stdout.splitlines()


def _section(out: str, name: str) -> str:
    """What one client's run printed (from its header to the next one)."""
    return re.split(r"^--- \S+ client$", out.split(f"--- {name} client\n", 1)[-1], flags=re.M)[0]


def test_the_go_package_ran_its_live_tests_none_skipped(
    interop: subprocess.CompletedProcess[str],
) -> None:
    section = _section(interop.stdout, "go-package")
    for test in (
        "TestLiveListTools",
        "TestLiveRead",
        "TestLiveBashStreamsProgressFromTheSandbox",
        "TestLiveBatchAnswersInRequestOrder",
        "TestLiveAskThenApproveWithTheToken",
        "TestLiveDeniedCallIsAnErrorResult",
        "TestLiveSessionRoundTrip",
        "TestLiveRestartMidCall",
    ):
        assert f"--- PASS: {test} " in section, section[-3000:]
    assert "--- SKIP" not in section and "--- FAIL" not in section
    assert re.search(r"^ok\s+github\.com/tooljail/tooljail/clients/go/tooljail\s", section, re.M)


def test_the_node_package_ran_its_live_tests_none_skipped(
    interop: subprocess.CompletedProcess[str],
) -> None:
    section = _section(interop.stdout, "node-package")
    passed = re.search(r"^# pass (\d+)$", section, re.M)
    assert passed and int(passed.group(1)) > 0, section[-3000:]
    for line in ("# fail 0", "# skipped 0", "# cancelled 0"):
        assert re.search(rf"^{line}$", section, re.M), section[-3000:]
    for test in ("restart", "approved", "denies", "session", "streams", "request order"):
        assert re.search(rf"^\s*ok \d+ - .*{test}", section, re.M | re.I), (test, section[-3000:])


@pytest.mark.parametrize("language", ["go", "node"])
def test_every_step_answered_as_expected(
    interop: subprocess.CompletedProcess[str], language: str
) -> None:
    out = interop.stdout
    section = out.split(f"--- {language} client\n", 1)[-1]
    expected_in_order = [
        r"OK listtools \d+ tools: .*\bRead\b.*\bBash\b",
        r"OK read /\S+/note\.txt: \d+ chars, first line \"1\\ttooljail interop marker \d+\"",
        rf'OK bash "hello from {language}" \(sandboxed=true, exit 0, \d+ ms\)',
        r'OK batch 1/3 Bash toolu_\S+: "batch one"',
        r'OK batch 2/3 Read toolu_\S+: "1\\ttooljail interop marker \d+"',
        r"OK batch 3/3 LS toolu_\S+: ",
        r"OK ask (toolu_\S+): ASK with an approval token; reason: .*force push",
        r"OK approve (toolu_\S+): ALLOW, ran \(sandboxed=true, exit [1-9]\d*\)",
        rf"PASS {language} client: 5 steps",
    ]
    position = 0
    for pattern in expected_in_order:
        match = re.compile(pattern).search(section, position)
        assert match, f"no line matching {pattern!r} after position {position}:\n{out}"
        position = match.end()
    # The approval went with the very tool_use that was asked about.
    ask_id = re.search(r"OK ask (\S+):", section)
    approve_id = re.search(r"OK approve (\S+):", section)
    assert ask_id and approve_id and ask_id.group(1) == approve_id.group(1)


def test_the_daemon_is_stopped_and_cleaned_up(interop: subprocess.CompletedProcess[str]) -> None:
    started = re.search(r"daemon started \(pid (\d+), unix://(\S+), log", interop.stdout)
    assert started, interop.stdout
    pid, socket_path = int(started.group(1)), Path(started.group(2))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not socket_path.parent.exists(), "the temporary workspace and socket were left behind"
    instance = re.search(r"\(instance (\S+)\)", DAEMON_LOG.read_text())
    assert instance, DAEMON_LOG.read_text()[-2000:]
    assert containers_of(instance.group(1)) == []
