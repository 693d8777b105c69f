"""The daemon as a service: listeners and who is calling, Admin access, status, graceful SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon._generated.tooljail.v1 import executor_pb2_grpc as pb_grpc
from daemon.config import ConfigError, load_settings
from tests.integration.conftest import OWNER_GID, OWNER_UID, containers_of
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def read_call(stub: pb_grpc.ExecutorStub, path: Path, tool_use_id: str, **kw: object) -> object:
    use = pb.ToolUse(id=tool_use_id, name="Read")
    use.input.update({"file_path": str(path)})
    return stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=30, **kw)


def audit_principal(daemon: RunningDaemon, tool_use_id: str) -> str:
    record = next(r for r in daemon.audit_lines() if r["tool_use_id"] == tool_use_id)
    principal: str = record["principal"]
    return principal


def test_unix_socket_is_group_only_and_status_names_the_principal(
    host_daemon: RunningDaemon,
) -> None:
    socket_path = Path(host_daemon.target.removeprefix("unix:"))
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o660
    status = pb_grpc.AdminStub(host_daemon.channel).Status(pb.StatusRequest(), timeout=30)
    assert status.principal == "local" and status.opa_healthy
    assert status.policy_revision and status.instance_id
    result = subprocess.run(
        [sys.executable, "-m", "daemon.cli", "status", "--target", f"unix://{socket_path}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "OPA healthy" in result.stdout and "you are local" in result.stdout


def test_tcp_needs_a_token_and_the_token_is_the_principal(short_tmp: Path) -> None:
    workspace = short_tmp / "ws-token"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    port = free_port()
    with running_daemon(
        workspace,
        short_tmp / "token.sock",
        sandbox={"enabled": False},
        tcp={"address": f"127.0.0.1:{port}"},
        auth={"tokens": {"ci-bot": "s3cret-token-value"}},
    ) as daemon:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.ExecutorStub(channel)
            with pytest.raises(grpc.RpcError) as anonymous:
                read_call(stub, workspace / "a.txt", "toolu_anon")
            assert anonymous.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as wrong:
                read_call(
                    stub, workspace / "a.txt", "toolu_wrong",
                    metadata=[("authorization", "Bearer nope")],
                )  # fmt: skip
            assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
            answer = read_call(
                stub, workspace / "a.txt", "toolu_bot",
                metadata=[("authorization", "Bearer s3cret-token-value")],
            )  # fmt: skip
            assert "a" in text_of(answer)  # type: ignore[arg-type]
            admin = pb_grpc.AdminStub(channel)
            with pytest.raises(grpc.RpcError) as not_admin:
                admin.Status(
                    pb.StatusRequest(),
                    metadata=[("authorization", "Bearer s3cret-token-value")],
                    timeout=30,
                )
            assert not_admin.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert audit_principal(daemon, "toolu_bot") == "ci-bot"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_pki(folder: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate with a SPIFFE id."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=folder)  # fmt: skip
    for name, subject, san in (
        ("server", "/CN=localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "/CN=agent-7", "subjectAltName=URI:spiffe://tooljail.test/agent-7"),
    ):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", subject,
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)  # fmt: skip
        (folder / f"{name}.ext").write_text(san + "\n")
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
                 "-out", f"{name}.pem", cwd=folder)  # fmt: skip


def test_mtls_client_certificate_is_the_principal_seen_by_opa(short_tmp: Path) -> None:
    pki = short_tmp / "pki"
    pki.mkdir()
    make_pki(pki)
    workspace = short_tmp / "ws-mtls"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    port = free_port()
    with running_daemon(
        workspace,
        short_tmp / "mtls.sock",
        sandbox={"enabled": False},
        tcp={
            "address": f"127.0.0.1:{port}",
            "tls_cert": pki / "server.pem",
            "tls_key": pki / "server.key",
            "client_ca": pki / "ca.pem",
        },
    ) as daemon:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=(pki / "ca.pem").read_bytes(),
            private_key=(pki / "client.key").read_bytes(),
            certificate_chain=(pki / "client.pem").read_bytes(),
        )
        with grpc.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
            answer = read_call(pb_grpc.ExecutorStub(channel), workspace / "a.txt", "toolu_mtls")
            assert "a" in text_of(answer)  # type: ignore[arg-type]
        assert audit_principal(daemon, "toolu_mtls") == "spiffe://tooljail.test/agent-7"

        no_cert = grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{port}", no_cert) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                read_call(pb_grpc.ExecutorStub(channel), workspace / "a.txt", "toolu_nocert")
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not any(r["tool_use_id"] == "toolu_nocert" for r in daemon.audit_lines())


def test_tcp_off_loopback_without_mtls_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(None, workspace=tmp_path, tcp={"address": "0.0.0.0:7443"})
    assert "tcp.client_ca" in str(refused.value)


@pytest.mark.docker
def test_sigterm_lets_in_flight_sandboxed_calls_finish_and_leaves_no_container(
    short_tmp: Path,
) -> None:
    workspace = short_tmp / "ws-sigterm"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    socket_path = short_tmp / "sigterm.sock"
    instance = f"test-sigterm-{os.getpid()}"
    env = dict(
        os.environ,
        TOOLJAIL_INSTANCE_ID=instance,
        TOOLJAIL_STATE_DIR=str(short_tmp / "sigterm-state"),
        TOOLJAIL_AUTH__ADMIN_PRINCIPALS='["local"]',
        TOOLJAIL_AUDIT_LOG=str(short_tmp / "sigterm-audit.jsonl"),
        TOOLJAIL_SHUTDOWN_GRACE_S="60",
    )
    log_path = short_tmp / "sigterm.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "daemon.cli", "serve", "--listen", f"unix://{socket_path}",
             "--workspace", str(workspace)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.05)
        channel = grpc.insecure_channel(f"unix:{socket_path}")
        stub = pb_grpc.ExecutorStub(channel)

        def call(i: int) -> str:
            use = pb.ToolUse(id=f"toolu_term_{i}", name="Bash")
            use.input.update({"command": f"sleep 3; echo done {i}"})
            return text_of(stub.Execute(pb.ExecuteRequest(tool_use=use), timeout=120))

        with ThreadPoolExecutor(max_workers=10) as pool:
            futures = [pool.submit(call, i) for i in range(10)]
            time.sleep(1.5)
            process.send_signal(signal.SIGTERM)
            answers = [f.result(timeout=120) for f in futures]
        channel.close()
        assert process.wait(timeout=120) == 0, log_path.read_text()
        assert answers == [f"done {i}\n" for i in range(10)]
        assert containers_of(instance) == []
        assert not socket_path.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_metrics_are_scraped_and_parsed(short_tmp: Path) -> None:
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    workspace = short_tmp / "ws-metrics"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a\n")
    port = free_port()
    with running_daemon(
        workspace,
        short_tmp / "metrics.sock",
        sandbox={"enabled": False},
        metrics={"enabled": True, "listen": f"127.0.0.1:{port}"},
    ) as daemon:
        read_call(daemon.stub, workspace / "a.txt", "toolu_metric_1")
        read_call(daemon.stub, Path("/etc/passwd"), "toolu_metric_2")
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            text = response.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("tooljail_calls_total", (("outcome", "ok"), ("tool", "Read")))] >= 1
    assert samples[("tooljail_calls_total", (("outcome", "denied"), ("tool", "Read")))] >= 1
    assert samples[("tooljail_decision_duration_seconds_count", ())] >= 2
    assert ("tooljail_calls_in_flight", ()) in samples


def test_systemd_notify_socket_gets_ready_and_stopping(short_tmp: Path) -> None:
    notify_path = short_tmp / "notify.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(notify_path))
    receiver.settimeout(60)
    workspace = short_tmp / "ws-notify"
    workspace.mkdir()
    socket_path = short_tmp / "notify-daemon.sock"
    env = dict(
        os.environ,
        NOTIFY_SOCKET=str(notify_path),
        TOOLJAIL_SANDBOX__ENABLED="false",
        TOOLJAIL_STATE_DIR=str(short_tmp / "notify-state"),
        TOOLJAIL_AUDIT_LOG="/dev/null",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "daemon.cli", "serve", "--listen", f"unix://{socket_path}",
         "--workspace", str(workspace)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        ready = receiver.recv(4096).decode()
        assert "READY=1" in ready.splitlines()
        assert socket_path.exists(), "READY=1 only once the listener is up"
        process.send_signal(signal.SIGTERM)
        stopping = receiver.recv(4096).decode()
        assert "STOPPING=1" in stopping.splitlines()
        assert process.wait(timeout=60) == 0
    finally:
        receiver.close()
        if process.poll() is None:
            process.kill()
            process.wait()
