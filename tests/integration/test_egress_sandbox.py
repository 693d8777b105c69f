"""Egress from real sandboxes (real Docker, real OPA): what the policy allows goes out through the
proxy, nothing else does; a credential is added at the edge and never enters the container.

Upstream servers listen on 127.0.0.2 (plain HTTP, TLS tunnelled untouched, TLS intercepted for a
credential); the tests' data.json lets the Unix socket's principal reach exactly them.
"""

from __future__ import annotations

import gzip
import http.server
import json
import os
import shutil
import ssl
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.config import PROJECT_ROOT
from daemon.egress.ca import EgressCA
from tests.integration.conftest import OWNER_GID, OWNER_UID
from tests.integration.harness import RunningDaemon, read_audit, running_daemon, text_of

pytestmark = pytest.mark.integration

UPSTREAM = "127.0.0.2"
SECRET = "tj-secret-" + uuid.uuid4().hex


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.startswith("/echo"):  # a server that reflects the request, as debug pages do
            auth = str(self.headers.get("Authorization"))
            body = f"you sent: {auth} quoted {urllib.parse.quote(auth, safe='')}\n".encode()
            gzipped = self.path == "/echo-gzip" or "gzip" in self.headers.get("Accept-Encoding", "")
            if gzipped:
                body = gzip.compress(body)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Echo", auth)
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/size/"):
            body = b"z" * int(self.path.removeprefix("/size/"))
        else:
            auth = self.headers.get("Authorization")
            state = "auth-ok" if auth == f"Bearer {SECRET}" else f"auth-missing={auth is None}"
            body = f"hello {self.path} {state}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _serve(context: ssl.SSLContext | None) -> tuple[http.server.ThreadingHTTPServer, int]:
    server = http.server.ThreadingHTTPServer((UPSTREAM, 0), _Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@dataclass
class Egress:
    daemon: RunningDaemon
    plain: int
    tunnel: int
    credential: int

    def bash(self, command: str, session_id: str = "") -> tuple[pb.ExecuteResponse, str]:
        tool_use_id = f"toolu_{uuid.uuid4().hex[:16]}"
        response = self.daemon.execute(
            "Bash", {"command": command, "timeout": 60000}, tool_use_id, session_id=session_id
        )
        return response, tool_use_id

    def egress_records(self, tool_use_id: str) -> list[dict[str, Any]]:
        """The call's egress audit lines (written as connections end: a download's once the
        program read it all, so not in the order they began)."""
        return [r for r in self.daemon.audit_lines("egress") if r["tool_use_id"] == tool_use_id]


def _policies(folder: Path, ports: list[int], *, rules: bool = True) -> Path:
    policies = folder / "policies"
    shutil.copytree(PROJECT_ROOT / "policies", policies)
    data = json.loads((policies / "data.json").read_text())
    data["tooljail"]["principals"]["local"] = {"network": "egress"}
    if rules:
        data["tooljail"]["egress"]["principals"]["local"] = {
            "allow": [{"hosts": [UPSTREAM], "ports": ports, "address_ranges": ["loopback"]}]
        }
    (policies / "data.json").write_text(json.dumps(data))
    return policies


def _workspace(folder: Path) -> Path:
    workspace = folder / "ws"
    workspace.mkdir()
    os.chown(workspace, OWNER_UID, OWNER_GID)
    return workspace


@pytest.fixture(scope="module")
def egress(short_tmp: Path) -> Iterator[Egress]:
    root = short_tmp / "egress"
    root.mkdir()
    upstream_ca = EgressCA.load_or_create(root / "upstream-ca")
    (root / "upstream-ca.pem").write_bytes(upstream_ca.certificate_pem)
    servers = [_serve(None), _serve(upstream_ca.server_context(UPSTREAM))]
    servers.append(_serve(upstream_ca.server_context(UPSTREAM)))
    ports = [port for _, port in servers]
    secret = root / "secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o600)
    try:
        with running_daemon(
            _workspace(root),
            root / "e.sock",
            opa={"policies_dir": str(_policies(root, ports))},
            sandbox={"pool_size": 1},
            egress={
                "upstream_ca_file": str(root / "upstream-ca.pem"),
                "credentials": [{"host": UPSTREAM, "port": ports[2], "secret_file": str(secret)}],
            },
        ) as daemon:
            if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
                pytest.skip("no Docker engine answers")
            yield Egress(daemon, *ports)
    finally:
        for server, _ in servers:
            server.shutdown()
            server.server_close()


def _python(code: str) -> str:
    return "python3 - <<'EOF'\n" + code + "\nEOF"


def test_allowed_requests_go_out_and_refused_ones_are_noted(egress: Egress) -> None:
    response, tool_use_id = egress.bash(
        _python(
            "import urllib.request, urllib.error\n"
            f"print(urllib.request.urlopen('http://{UPSTREAM}:{egress.plain}/allowed').read().decode())\n"
            "try:\n"
            f"    urllib.request.urlopen('http://127.0.0.3:{egress.plain}/refused')\n"
            "except urllib.error.HTTPError as exc:\n"
            "    print('refused', exc.code)\n"
        )
    )
    text = text_of(response)
    assert response.decision.outcome == pb.ALLOW, text
    assert "hello /allowed auth-missing=True" in text
    assert "refused 403" in text
    assert "Network (egress proxy):" in text
    assert f"127.0.0.3:{egress.plain} refused: No egress rule" in text
    records = egress.egress_records(tool_use_id)
    [allowed] = [r for r in records if r.get("decision") == "allow"]
    [refused] = [r for r in records if r.get("decision") == "deny"]
    assert allowed["decision"] == "allow" and allowed["connected_to"] == UPSTREAM
    assert allowed["principal"] == "local" and allowed["bytes_down"] > 0
    assert refused["decision"] == "deny" and refused["destination"] == f"127.0.0.3:{egress.plain}"


def test_https_is_tunnelled_untouched_and_a_credential_is_added_at_the_edge(
    egress: Egress,
) -> None:
    """The tunnelled server's certificate is the upstream CA's (the sandbox does not trust it,
    and checks nothing here); the intercepted one is verified by the sandbox against tooljail's
    CA and by the proxy against the upstream CA, and gets the header. Then the secret is looked
    for everywhere in the container: environment, files, every process's command line and
    environment, and the memory of every process the command can read (its own; the runner and
    the forwarder are the container's root and not dumpable, and only ever see ciphertext)."""
    response, tool_use_id = egress.bash(
        _python(
            "import ssl, urllib.request\n"
            "loose = ssl._create_unverified_context()\n"
            f"tunnel = 'https://{UPSTREAM}:{egress.tunnel}/t'\n"
            "print(urllib.request.urlopen(tunnel, context=loose).read().decode())\n"
            f"print(urllib.request.urlopen('https://{UPSTREAM}:{egress.credential}/c').read().decode())\n"
        )
        # One scanner, which alone ever holds the needle (put together at run time: no command
        # line holds it) and leaves its own process out.
        + "\n"
        + _python(
            "import os\n"
            f"needle = ('{SECRET[10:18]}' + '{SECRET[18:26]}').encode()\n"
            "me = str(os.getpid())\n"
            "env = sum(needle in v.encode() for v in os.environ.values())\n"
            "files = 0\n"
            "for top, dirs, names in os.walk('/'):\n"
            "    if top == '/':\n"
            "        dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'dev')]\n"
            "    for name in names:\n"
            "        path = os.path.join(top, name)\n"
            "        try:\n"
            "            with open(path, 'rb') as f:\n"
            "                files += needle in f.read(64 << 20)\n"
            "        except OSError:\n"
            "            pass\n"
            "proc = mem = regions = 0\n"
            "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "    if pid == me:\n"
            "        continue\n"
            "    for part in ('cmdline', 'environ'):\n"
            "        try:\n"
            "            proc += needle in open(f'/proc/{pid}/{part}', 'rb').read()\n"
            "        except OSError:\n"
            "            pass\n"
            "    try:\n"
            "        maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
            "        image = open(f'/proc/{pid}/mem', 'rb', 0)\n"
            "    except OSError:\n"
            "        continue\n"
            "    for line in maps:\n"
            "        start, end = (int(x, 16) for x in line.split()[0].split('-'))\n"
            "        try:\n"
            "            image.seek(start)\n"
            "            mem += image.read(end - start).count(needle)\n"
            "            regions += 1\n"
            "        except (OSError, ValueError, OverflowError):\n"
            "            pass\n"
            "print('ENV', env, 'FILES', files, 'PROC', proc, 'MEM', mem, 'regions', regions > 0)\n"
        )
    )
    text = text_of(response)
    assert "hello /t auth-missing=True" in text, text
    assert "hello /c auth-ok" in text, text
    assert "ENV 0 FILES 0 PROC 0 MEM 0 regions True" in text, f"found in the container: {text}"
    assert SECRET not in text
    records = egress.egress_records(tool_use_id)
    intercepted = [r for r in records if r.get("intercepted")]
    assert intercepted and intercepted[0]["credential"] is True
    audit_text = egress.daemon.audit_path.read_text()
    assert SECRET not in audit_text


def test_the_sandbox_has_no_way_out_but_the_proxy(egress: Egress) -> None:
    """Inspected, never tried: loopback is the only interface, there is no route, the resolver's
    nameserver is unreachable, and the proxy saw nothing of this call."""
    response, tool_use_id = egress.bash(
        "ls /sys/class/net; echo ROUTES; tail -n +2 /proc/net/route; echo V6; "
        "grep -v ' lo$' /proc/net/ipv6_route; echo RESOLV; grep nameserver /etc/resolv.conf; "
        "echo PROXY $HTTPS_PROXY $https_proxy $NO_PROXY"
    )
    text = text_of(response)
    interfaces, rest = text.split("ROUTES", 1)
    assert interfaces.split() == ["lo"], text
    routes, rest = rest.split("V6", 1)
    assert routes.strip() == "", "an IPv4 route exists"
    v6, rest = rest.split("RESOLV", 1)
    assert v6.strip() == "", "an IPv6 route other than loopback exists"
    assert "PROXY http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1" in rest
    assert egress.egress_records(tool_use_id) == []


def test_200_connections_from_20_sandboxes_at_once(egress: Egress) -> None:
    sessions = [
        egress.daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=60).id for _ in range(20)
    ]
    code = _python(
        "import urllib.request\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def get(i):\n"
        f"    return len(urllib.request.urlopen('http://{UPSTREAM}:{egress.plain}/size/20000').read())\n"
        "with ThreadPoolExecutor(10) as pool:\n"
        "    print('sizes', sorted(set(pool.map(get, range(10)))), 'count', 10)\n"
    )
    try:
        with ThreadPoolExecutor(20) as pool:
            results = list(pool.map(lambda s: egress.bash(code, session_id=s), sessions))
    finally:
        for session in sessions:
            egress.daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=60)
    for response, tool_use_id in results:
        assert "sizes [20000] count 10" in text_of(response), text_of(response)
        records = egress.egress_records(tool_use_id)
        assert len(records) == 10 and all(r["status"] == 200 for r in records)
    assert len({r[1] for r in results}) == 20


def test_the_shipped_rules_refuse_everything_and_loopback_needs_naming(short_tmp: Path) -> None:
    """With the shipped data.json (only the egress network granted) every destination is
    refused; a rule naming a loopback host without naming the range is refused too."""
    root = short_tmp / "egress-default"
    root.mkdir()
    server, port = _serve(None)
    try:
        policies = _policies(root, [port], rules=False)
        with running_daemon(
            _workspace(root), root / "d.sock", opa={"policies_dir": str(policies)}
        ) as daemon:
            if daemon.daemon.sandbox is None or daemon.daemon.sandbox.stats() is None:
                pytest.skip("no Docker engine answers")
            command = _python(
                "import urllib.request, urllib.error\n"
                "try:\n"
                f"    urllib.request.urlopen('http://{UPSTREAM}:{port}/x')\n"
                "except urllib.error.HTTPError as exc:\n"
                "    print('refused', exc.code)\n"
            )
            shipped = daemon.execute("Bash", {"command": command})
            data = json.loads((policies / "data.json").read_text())
            data["tooljail"]["egress"]["principals"]["local"] = {
                "allow": [{"hosts": [UPSTREAM], "ports": [port]}]
            }
            (policies / "data.json").write_text(json.dumps(data))
            daemon._run(daemon.daemon.opa.reload())  # type: ignore[union-attr]
            named = daemon.execute("Bash", {"command": command})
            records = read_audit(daemon.audit_path, "egress")
    finally:
        server.shutdown()
        server.server_close()
    assert "refused 403" in text_of(shipped) and "No egress rule" in text_of(shipped)
    assert "refused 403" in text_of(named)
    assert "resolved only to addresses the policy does not allow" in text_of(named)
    assert [r["decision"] for r in records] == ["deny", "deny"]


def test_connections_show_as_progress_while_the_call_runs(egress: Egress) -> None:
    tool_use = pb.ToolUse(id=f"toolu_{uuid.uuid4().hex[:16]}", name="Bash")
    tool_use.input.update(
        {
            "command": _python(
                "import urllib.request, urllib.error\n"
                f"urllib.request.urlopen('http://{UPSTREAM}:{egress.plain}/p').read()\n"
                "try:\n"
                f"    urllib.request.urlopen('http://127.0.0.4:{egress.plain}/q')\n"
                "except urllib.error.HTTPError:\n"
                "    pass\n"
            )
        }
    )
    events = list(
        egress.daemon.stub.ExecuteStream(pb.ExecuteRequest(tool_use=tool_use), timeout=120)
    )
    messages = [e.progress.message for e in events if e.HasField("progress") and e.progress.message]
    assert any(
        m.startswith(f"egress allowed: http {UPSTREAM}:{egress.plain} GET /p") for m in messages
    ), messages
    assert any(m.startswith(f"egress refused: 127.0.0.4:{egress.plain}") for m in messages), (
        messages
    )
    assert events[-1].HasField("response")


def test_a_reflecting_server_cannot_hand_the_secret_back(egress: Egress) -> None:
    """Whatever comes back from a destination with a credential has the secret starred out
    (body and headers, same length); TRACE, which echoes requests by design, is refused."""
    response, _ = egress.bash(
        _python(
            "import http.client, ssl, urllib.request, urllib.error\n"
            f"url = 'https://{UPSTREAM}:{egress.credential}/echo'\n"
            "with urllib.request.urlopen(url) as answer:\n"
            "    print(answer.read().decode().strip(), '|', answer.headers['X-Echo'])\n"
            "asks_gzip = urllib.request.Request(url, headers={'Accept-Encoding': 'gzip'})\n"
            "with urllib.request.urlopen(asks_gzip) as answer:\n"
            "    print('encoding', answer.headers['Content-Encoding'], answer.read()[:30])\n"
            "try:\n"
            "    urllib.request.urlopen(url + '-gzip').read()\n"
            "except Exception as exc:\n"
            "    print('gzip refused', type(exc).__name__)\n"
            "try:\n"
            "    urllib.request.urlopen(urllib.request.Request(url, method='TRACE'))\n"
            "except urllib.error.HTTPError as exc:\n"
            "    print('trace', exc.code)\n"
        )
    )
    text = text_of(response)
    stars = "*" * len(SECRET)
    quoted = urllib.parse.quote(f"Bearer {SECRET}", safe="").replace(SECRET, stars)
    assert f"you sent: Bearer {stars} quoted {quoted} | Bearer {stars}" in text, text
    assert "encoding None b'you sent: Bearer ***" in text, "the proxy asked for identity"
    assert "gzip refused" in text
    assert "trace 403" in text
    assert SECRET not in text


def test_a_background_command_keeps_its_calls_network_after_the_call(egress: Egress) -> None:
    """The egress the Bash call was granted serves its background command after the call
    answered, with the connections audited under that call."""
    gate = egress.daemon.workspace / "bg-gate"
    tool_use_id = f"toolu_{uuid.uuid4().hex[:16]}"
    command = f"while [ ! -e {gate} ]; do sleep 0.1; done\n" + _python(
        "import urllib.request\n"
        f"print(urllib.request.urlopen('http://{UPSTREAM}:{egress.plain}/later').read().decode())\n"
    )
    started = egress.daemon.execute(
        "Bash", {"command": command, "run_in_background": True}, tool_use_id
    )
    assert not started.result.is_error, text_of(started)
    shell_id = text_of(started).split("with ID: ")[1].split(".")[0]
    time.sleep(1.0)  # the call answered long ago: the command now runs on its own
    gate.write_text("")
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        text += text_of(egress.daemon.execute("BashOutput", {"bash_id": shell_id}))
        if "<status>completed</status>" in text:
            break
        time.sleep(0.2)
    assert "hello /later" in text and "<exit_code>0</exit_code>" in text, text
    [record] = egress.egress_records(tool_use_id)
    assert record["decision"] == "allow" and record["status"] == 200
