"""The CLI and the MCP bridge reach a daemon's TCP listener with a bearer token or an mTLS
client certificate, and the daemon sees the principal those prove (never one the client names)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from daemon.cli import main
from tests.integration.harness import running_daemon
from tests.integration.test_service import audit_principal, free_port, make_pki

pytestmark = pytest.mark.integration

TOKEN = "cli-token-value-9f2c"


def _call(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_call_with_a_token_file_or_the_environment(
    short_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = short_tmp / "ws-cli-token"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    token_file = short_tmp / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    target = f"127.0.0.1:{port}"
    with running_daemon(
        workspace,
        short_tmp / "cli-token.sock",
        sandbox={"enabled": False},
        tcp={"address": target},
        auth={"tokens": {"cli-user": TOKEN}},
        workspaces={"tenant_defaults": "shared"},
    ) as daemon:
        read = ["Read", json.dumps({"file_path": str(workspace / "a.txt")})]
        code, out, err = _call(
            capsys, "call", "--target", target, "--token-file", str(token_file), "--json",
            "--id", "toolu_cli_file", *read,
        )  # fmt: skip
        assert code == 0, err
        assert "alpha" in out
        assert audit_principal(daemon, "toolu_cli_file") == "cli-user"

        monkeypatch.setenv("TOOLJAIL_TOKEN", TOKEN)
        code, out, err = _call(
            capsys, "call", "--target", target, "--json", "--id", "toolu_cli_env", *read
        )
        assert code == 0, err
        assert audit_principal(daemon, "toolu_cli_env") == "cli-user"

        monkeypatch.setenv("TOOLJAIL_TOKEN", "wrong")
        code, out, err = _call(capsys, "call", "--target", target, "--id", "toolu_x", *read)
        assert code == 1 and "UNAUTHENTICATED" in err

        monkeypatch.delenv("TOOLJAIL_TOKEN")
        code, out, err = _call(capsys, "tools", "--target", target)
        assert code == 1 and "UNAUTHENTICATED" in err


def test_call_status_and_anthropic_json_over_mtls(
    short_tmp: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = short_tmp / "pki-cli"
    pki.mkdir()
    make_pki(pki)
    workspace = short_tmp / "ws-cli-mtls"
    workspace.mkdir()
    (workspace / "a.txt").write_text("alpha\n")
    port = free_port()
    target = f"127.0.0.1:{port}"
    tls = ["--tls-ca", str(pki / "ca.pem"), "--tls-cert", str(pki / "client.pem"),
           "--tls-key", str(pki / "client.key")]  # fmt: skip
    with running_daemon(
        workspace,
        short_tmp / "cli-mtls.sock",
        sandbox={"enabled": False},
        tcp={
            "address": target,
            "tls_cert": pki / "server.pem",
            "tls_key": pki / "server.key",
            "client_ca": pki / "ca.pem",
        },
        workspaces={"tenant_defaults": "shared"},
    ) as daemon:
        read = ["Read", json.dumps({"file_path": str(workspace / "a.txt")})]
        code, out, err = _call(
            capsys, "call", "--target", target, *tls, "--json", "--id", "toolu_cli_mtls", *read
        )
        assert code == 0, err
        assert "alpha" in out
        assert audit_principal(daemon, "toolu_cli_mtls") == "spiffe://tooljail.test/agent-7"

        block = {"type": "tool_use", "id": "toolu_cli_json", "name": "Read",
                 "input": {"file_path": str(workspace / "a.txt")}}  # fmt: skip
        monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(block)))
        code, out, err = _call(capsys, "call", "--anthropic", "--target", target, *tls)
        assert code == 0, err
        assert json.loads(out)["content"][0]["tool_use_id"] == "toolu_cli_json"
        assert audit_principal(daemon, "toolu_cli_json") == "spiffe://tooljail.test/agent-7"

        # Without the client certificate the TLS handshake is refused.
        code, out, err = _call(
            capsys, "call", "--target", target, "--tls-ca", str(pki / "ca.pem"), *read
        )
        assert code == 1 and "UNAVAILABLE" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tls-cert", "c.pem"], "--tls-cert and --tls-key: give both or neither"),
        (["--tls-cert", "c.pem", "--tls-key", "k.pem"], "--tls-cert needs --tls-ca"),
        (["--token-file", "/nonexistent/token"], "--token-file /nonexistent/token"),
        (["--tls-ca", "/nonexistent/ca.pem"], "cannot read the TLS file /nonexistent/ca.pem"),
    ],
)
def test_connection_options_that_cannot_work_are_named(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = _call(capsys, "tools", "--target", "127.0.0.1:1", *argv)
    assert code == 2
    assert message in err


def test_a_token_is_refused_for_a_plaintext_target_off_this_machine(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLJAIL_TOKEN", "s3cret-token")
    code, _, err = _call(capsys, "tools", "--target", "daemon.example.org:50051")
    assert code == 2 and "refusing to send the bearer token in clear" in err
    assert "s3cret-token" not in err
