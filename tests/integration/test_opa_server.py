"""The managed OPA: a bad policy refuses to start with OPA's file/row/col message; it listens on
a Unix socket only the daemon's user can reach (no TCP port at all); an external OPA that wants a
bearer token gets the configured one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import PROJECT_ROOT
from daemon.errors import PolicyLoadError
from daemon.policy.opa_client import client_for
from daemon.policy.opa_engine import OpaPolicyEngine
from daemon.policy.opa_server import ManagedOpa, find_opa
from sandbox.backend import SandboxLimits

pytestmark = pytest.mark.integration

NOBODY = 65534


READ_DOCUMENT = {
    "version": 1,
    "tool": {"name": "Read", "read_only": True, "destructive": False,
             "concurrency_safe": True, "sandboxed": False},
    "input": {"file_path": "/srv/ws/a.txt"},
    "paths": [{"path": "/srv/ws/a.txt", "access": "read", "inside_workspace": True}],
    "session": {"id": "default", "workspace": "/srv/ws", "mode": "default", "grants": []},
    "caller": {"principal": "local", "transport": "unix"},
}  # fmt: skip


def socket_in(folder: Path) -> Path:
    return folder / "opa" / "opa.sock"


def tcp_listeners(pid: int) -> list[str]:
    """host:port (hex, as /proc shows them) of the TCP sockets process `pid` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(fields[1])
    return found


def as_another_user(code: str) -> subprocess.CompletedProcess[str]:
    """Python `code` run by uid/gid 65534 (nobody), no groups."""
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
         sys.executable, "-I", "-c", code],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


async def test_bad_policy_is_refused_with_its_location(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    rego = policies / "tooljail" / "authz" / "authz.rego"
    rego.write_text(rego.read_text() + "\nbroken_rule if {\n  input.x ==\n}\n")
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), policies, tmp_path / "opa" / "opa.sock")
    with pytest.raises(PolicyLoadError) as failure:
        await opa.start()
    message = str(failure.value)
    assert "tooljail/authz/authz.rego:" in message
    assert "rego_parse_error" in message
    assert opa.pid is None or opa._process is None or opa._process.returncode is not None
    await opa.stop()


async def test_shipped_policy_decides_through_the_engine(tmp_path: Path) -> None:
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), PROJECT_ROOT / "policies", socket_in(tmp_path))
    await opa.start()
    engine = OpaPolicyEngine(opa.url, 10.0, SandboxLimits(), "test")
    await engine.open()
    try:
        document = READ_DOCUMENT
        verdict = await engine.decide(document)
        assert verdict.outcome.value == "allow"
        outside = dict(document, paths=[{"path": "/etc/passwd", "access": "read",
                                         "inside_workspace": False}])  # fmt: skip
        verdict = await engine.decide(outside)
        assert verdict.outcome.value == "deny"
        assert any("/etc/passwd" in r for r in verdict.reasons)
        bot = dict(document, caller={"principal": "readonly-bot", "transport": "unix"})
        visible = await engine.visible_tools(
            {
                "version": 1,
                "tools": [
                    {
                        "name": "Read",
                        "read_only": True,
                        "destructive": False,
                        "concurrency_safe": True,
                        "sandboxed": False,
                    },
                    {
                        "name": "Bash",
                        "read_only": False,
                        "destructive": True,
                        "concurrency_safe": False,
                        "sandboxed": True,
                    },
                ],
                "session": bot["session"],
                "caller": bot["caller"],
            }
        )
        assert visible == frozenset({"Read"})
    finally:
        await engine.close()
        await opa.stop()
    assert opa._process is not None and opa._process.returncode is not None


async def test_the_managed_opa_writes_no_decision_with_its_input_anywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Inputs hold what the model sent (tokens in commands); the audit masks them, OPA would not.
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), PROJECT_ROOT / "policies", socket_in(tmp_path))
    await opa.start()
    engine = OpaPolicyEngine(opa.url, 10.0, SandboxLimits(), "test")
    await engine.open()
    secret = "ghp_" + "s3cr3t" * 6
    try:
        for path in (f"/srv/ws/{secret}.txt", f"/etc/{secret}"):
            document = dict(READ_DOCUMENT, input={"file_path": path})
            verdict = await engine.decide(document)
            # Named all the same: by the daemon, since OPA keeps no decision log to name them.
            assert len(verdict.decision_id) == 32
    finally:
        await engine.close()
        await opa.stop()
    assert not [line for line in opa._stderr_tail if secret in line]
    assert not [r for r in caplog.records if secret in r.getMessage()]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another local user")
async def test_only_the_daemons_user_can_reach_the_managed_opa(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # the way in is open: the socket's own folder must keep others out
    sock = socket_in(tmp_path)
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), PROJECT_ROOT / "policies", sock)
    await opa.start()
    try:
        assert opa.pid is not None and tcp_listeners(opa.pid) == []
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        attempt = as_another_user(
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n"
            f"    s.connect({str(sock)!r})\n"
            "    s.sendall(b'GET /v1/policies HTTP/1.0\\r\\n\\r\\n')\n"
            "    print('REACHED', s.recv(200))\n"
            "except OSError as exc:\n"
            "    print('REFUSED', exc.errno)\n"
        )
        assert attempt.stdout.startswith("REFUSED 13"), attempt  # EACCES, not even a connect
        async with client_for(opa.url, 5.0) as client:  # the daemon's user gets in
            assert await client.check_health()
    finally:
        await opa.stop()
    assert not sock.exists()


async def test_the_managed_opa_comes_back_on_the_same_socket(tmp_path: Path) -> None:
    sock = socket_in(tmp_path)
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), PROJECT_ROOT / "policies", sock)
    await opa.start()
    try:
        first = opa.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        async with asyncio.timeout(30):
            while opa.pid == first or opa.loading:
                await asyncio.sleep(0.05)
        assert opa.url == f"unix://{sock}"
        async with client_for(opa.url, 5.0) as client:
            assert await client.check_health()
    finally:
        await opa.stop()


_FIRST = "package probe\n\nfirst := data.probe_data.value\n"
_SECOND = "package probe\n\nsecond := true\n"


async def _module_ids(opa: ManagedOpa) -> set[str]:
    async with client_for(opa.url, 5.0) as client:
        return set(await client.get_policies_list())


async def test_a_restarted_opa_holds_the_last_policy_under_the_loaders_module_ids(
    tmp_path: Path,
) -> None:
    """OPA (re)starts with the policy on its command line; the modules must keep the ids the REST
    loader uses, or a later reload would add a second copy instead of replacing (or deleting)."""
    policies = tmp_path / "policies"
    (policies / "probe").mkdir(parents=True)
    (policies / "probe" / "first.rego").write_text(_FIRST)
    (policies / "probe" / "second.rego").write_text(_SECOND)
    (policies / "data.json").write_text('{"probe_data": 7}')
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), policies, socket_in(tmp_path))
    await opa.start()
    try:
        assert await _module_ids(opa) == {"probe/first.rego", "probe/second.rego"}
        (policies / "probe" / "second.rego").unlink()
        await opa.reload()
        first = opa.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        async with asyncio.timeout(30):
            while opa.pid == first or opa.loading:
                await asyncio.sleep(0.05)
        assert await _module_ids(opa) == {"probe/first.rego"}
        async with client_for(opa.url, 5.0) as client:
            assert (await client.query_rule({}, "probe", "first")).get("result") == 7
        (policies / "probe" / "first.rego").write_text(_FIRST.replace("first", "renamed"))
        await opa.reload()
        assert await _module_ids(opa) == {"probe/first.rego"}
    finally:
        await opa.stop()
    assert list(socket_in(tmp_path).parent.iterdir()) == [], "stop leaves nothing behind"


_SYSTEM_AUTHZ = """package system.authz

default allow := false

allow if input.identity == "s3cret-token-for-the-daemon"
"""


async def test_an_external_opa_asking_for_a_token_gets_the_configured_one(tmp_path: Path) -> None:
    """`opa run --authentication=token --authorization=basic` with a system.authz policy that
    admits one token: the engine with that token decides; without it (or a wrong one) every call
    is denied, saying the policy engine could not be reached."""
    authz = tmp_path / "system_authz.rego"
    authz.write_text(_SYSTEM_AUTHZ)
    sock = tmp_path / "ext.sock"
    opa_process = subprocess.Popen(
        [str(find_opa(None, PROJECT_ROOT)), "run", "--server", "--skip-version-check",
         "--addr", f"unix://{sock}", "--authentication=token", "--authorization=basic",
         str(authz), str(PROJECT_ROOT / "policies" / "tooljail"),
         str(PROJECT_ROOT / "policies" / "data.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with asyncio.timeout(30):
            while not sock.exists():
                await asyncio.sleep(0.05)
        outcomes = {}
        for name, token in (
            ("right", "s3cret-token-for-the-daemon"),
            ("wrong", "x"),
            ("none", None),
        ):
            engine = OpaPolicyEngine(f"unix://{sock}", 10.0, SandboxLimits(), "test", token=token)
            await engine.open()
            try:
                verdict = await engine.decide(READ_DOCUMENT)
            finally:
                await engine.close()
            outcomes[name] = (verdict.outcome.value, " ".join(verdict.reasons))
        assert outcomes["right"][0] == "allow", outcomes
        for name in ("wrong", "none"):
            assert outcomes[name][0] == "deny" and "policy engine" in outcomes[name][1], outcomes
    finally:
        opa_process.terminate()
        opa_process.wait(10)


async def test_module_names_opa_would_read_its_own_way_still_load_exactly(tmp_path: Path) -> None:
    """`opa run z:b.rego` reads `z:` as a prefix and loads b.rego instead: the daemon notices
    the mismatch and loads over REST, so the module is there (a deny it holds is not lost)."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "z:b.rego").write_text("package c\n\ndeny := true\n")
    (policies / "b.rego").write_text("package a\n\nx := 1\n")
    opa = ManagedOpa(find_opa(None, PROJECT_ROOT), policies, socket_in(tmp_path))
    await opa.start()
    try:
        assert await _module_ids(opa) == {"z:b.rego", "b.rego"}
        async with client_for(opa.url, 5.0) as client:
            assert (await client.query_rule({}, "c", "deny")).get("result") is True
    finally:
        await opa.stop()
