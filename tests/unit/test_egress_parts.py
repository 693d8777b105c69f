"""The egress proxy's small parts, without a network: destinations read strictly, address ranges,
the policy's answer parsed fail-closed, budgets and the result note, credential rules and their
secret files, and the container recipe of the egress network."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from daemon.app.egress import start_egress
from daemon.calls.audit import AuditLog
from daemon.config import load_settings
from daemon.egress.addresses import classify
from daemon.egress.credentials import CredentialRule, Credentials, read_secret
from daemon.egress.http_relay import Scrubber, request_headers, secret_forms
from daemon.egress.sni import tls_records
from daemon.egress.target import (
    Target,
    TargetError,
    normalize_path,
    parse_absolute_url,
    parse_authority,
)
from daemon.egress.usage import MAX_LISTED_REFUSALS, CallUsage
from daemon.errors import TooljailError
from daemon.policy.egress_verdict import parse_egress
from daemon.policy.engine import PolicyEngine
from sandbox.backend import NetworkMode, SandboxLimits, SandboxSpec
from sandbox.hardening import (
    CA_BUNDLE_TARGET,
    EGRESS_DIR,
    EgressMounts,
    container_recipe,
)
from sandbox.limits import SandboxCeilings, clamp_limits


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("93.184.216.34", "public"),
        ("2606:4700::1", "public"),
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("::1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("169.254.10.10", "link_local"),
        ("fe80::1", "link_local"),
        ("fd12:3456::1", "unique_local"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("64:ff9b::a00:1", "private"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "private"),
    ],
)
def test_address_ranges(address: str, expected: str) -> None:
    assert classify(address) == expected


@pytest.mark.parametrize(
    ("authority", "expected"),
    [
        ("PyPI.org:443", Target("pypi.org", 443)),
        ("pypi.org.:443", Target("pypi.org", 443)),
        ("[::1]:8080", Target("::1", 8080)),
        ("[0:0:0:0:0:0:0:1]:1", Target("::1", 1)),
        ("127.0.0.1:80", Target("127.0.0.1", 80)),
    ],
)
def test_authorities_are_normalized(authority: str, expected: Target) -> None:
    assert parse_authority(authority) == expected


@pytest.mark.parametrize(
    "authority",
    [
        "user@host:443",
        "host",
        "host:0",
        "host:65536",
        "host:+80",
        "host: 80",
        "[::1",
        "[::1]x",
        "[pypi.org]:443",
        "0x7f.1:80",
        "127.1:80",
        "2130706433:80",
        "a..b:1",
        "-a.b:1",
        "exa mple.com:80",
        "bücher.de:443",
        "host/x:80",
        ":80",
        "x" * 300 + ":80",
    ],
)
def test_bad_authorities_are_refused(authority: str) -> None:
    with pytest.raises(TargetError):
        parse_authority(authority)


def test_absolute_urls() -> None:
    assert parse_absolute_url("http://a.test/x?y=1") == ("http", Target("a.test", 80), "/x?y=1")
    assert parse_absolute_url("http://a.test:81") == ("http", Target("a.test", 81), "/")
    for bad in ("https://a.test/", "/x", "ftp://a.test/", "http:///x", "http://u:p@a.test/"):
        with pytest.raises(TargetError):
            parse_absolute_url(bad)


def test_forwarded_headers_drop_hop_by_hop_and_proxy_credentials() -> None:
    headers = request_headers(
        [
            (b"Host", b"evil.test"),
            (b"Proxy-Authorization", b"Basic x"),
            (b"Connection", b"keep-alive, X-Drop"),
            (b"X-Drop", b"1"),
            (b"Authorization", b"Bearer from-the-sandbox"),
            (b"Accept", b"*/*"),
        ],
        b"decided.test",
        [(b"Authorization", b"Bearer injected")],
    )
    assert headers == [
        (b"host", b"decided.test"),
        (b"Accept", b"*/*"),
        (b"accept-encoding", b"identity"),
        (b"Authorization", b"Bearer injected"),
        (b"connection", b"close"),
    ]


def test_egress_verdicts_fail_closed() -> None:
    assert not parse_egress({}).allow
    assert "undefined" in parse_egress({}).reasons[0]
    malformed = parse_egress({"result": {"allow": "yes"}})
    assert not malformed.allow and "malformed" in malformed.reasons[0]
    bad_range = parse_egress({"result": {"allow": True, "address_ranges": ["anywhere"]}})
    assert not bad_range.allow
    verdict = parse_egress(
        {
            "decision_id": "d1",
            "result": {
                "allow": True,
                "reasons": [],
                "address_ranges": ["loopback"],
                "budget": {"connections": 3, "bytes": 10},
            },
        }
    )
    assert verdict.allow and verdict.address_ranges == {"loopback"}
    assert (verdict.max_connections, verdict.max_bytes, verdict.decision_id) == (3, 10, "d1")
    assert parse_egress({"result": {"allow": True}}).address_ranges == {"public"}
    assert parse_egress({"result": {"allow": False}}).reasons


class _Writer:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_budgets_only_shrink_and_a_spent_byte_budget_closes_everything() -> None:
    usage = CallUsage(max_connections=10, max_bytes=100)
    usage.tighten(5, 1000)
    assert (usage.max_connections, usage.max_bytes) == (5, 100)
    writers = [_Writer(), _Writer()]
    for writer in writers:
        assert usage.reserve() == ""
        usage.track(writer.close)
    assert usage.add_bytes(60)
    assert not usage.add_bytes(60)
    assert all(w.closed for w in writers)
    assert "byte budget (100 bytes) is spent" in usage.reserve()
    assert "byte budget" in usage.note()


def test_the_note_lists_refusals_once_and_counts_the_rest() -> None:
    usage = CallUsage(max_connections=1, max_bytes=1)
    assert usage.note() == ""
    for i in range(MAX_LISTED_REFUSALS + 3):
        usage.refuse(f"h{i}.test:443", "no rule")
    usage.refuse("h0.test:443", "no rule")
    note = usage.note()
    assert note.count("refused: no rule") == MAX_LISTED_REFUSALS
    assert "4 more refusals not listed" in note


def _secret(tmp_path: Path, text: str = "s3cret\n", mode: int = 0o600) -> Path:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_credential_rules_match_host_port_method_and_path(tmp_path: Path) -> None:
    rule = CredentialRule(
        host="*.Forge.test", methods=("get",), path_prefix="/api/", secret_file=_secret(tmp_path)
    )
    credentials = Credentials([rule])
    assert credentials.intercepts("git.forge.test", 443)
    assert not credentials.intercepts("forge.test", 443)
    assert not credentials.intercepts("evilforge.test", 443)
    assert not credentials.intercepts("git.forge.test", 8443)
    assert credentials.headers("git.forge.test", 443, "GET", "/api/x") == [
        (b"Authorization", b"Bearer s3cret")
    ]
    assert credentials.headers("git.forge.test", 443, "POST", "/api/x") == []
    assert credentials.headers("git.forge.test", 443, "GET", "/other") == []


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"host": "*"}, "host name"),
        ({"host": "a.*.test"}, "host name"),
        ({"host": "ok.test", "header": "Bad Header"}, "header name"),
        ({"host": "ok.test", "header": "X\r\nInjected"}, "header name"),
    ],
)
def test_bad_credential_rules_are_refused(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CredentialRule(secret_file=_secret(tmp_path), **fields)


def test_secret_files_must_be_private_single_lines(tmp_path: Path) -> None:
    assert read_secret(_secret(tmp_path)) == b"s3cret"
    with pytest.raises(TooljailError, match="readable by others"):
        read_secret(_secret(tmp_path, mode=0o644))
    with pytest.raises(TooljailError, match="one non-empty line"):
        read_secret(_secret(tmp_path, "a\nb\n"))
    with pytest.raises(TooljailError, match="one non-empty line"):
        read_secret(_secret(tmp_path, "\n"))
    link = tmp_path / "link"
    link.symlink_to(_secret(tmp_path))
    with pytest.raises(TooljailError):
        read_secret(link)
    other = _secret(tmp_path)
    os.chown(other, 65534, 65534)
    with pytest.raises(TooljailError, match="owned by the daemon"):
        read_secret(other)


def test_egress_is_its_own_ceiling() -> None:
    egress = SandboxLimits(network=NetworkMode.EGRESS)
    bridge = SandboxLimits(network=NetworkMode.BRIDGE)
    assert clamp_limits(egress, SandboxCeilings()).network is NetworkMode.EGRESS
    assert clamp_limits(bridge, SandboxCeilings()).network is NetworkMode.NONE
    assert clamp_limits(egress, SandboxCeilings(allow_egress=False)).network is NetworkMode.NONE


def test_the_egress_recipe_has_no_network_but_the_proxys_folder() -> None:
    spec = SandboxSpec(
        workspace=Path("/w"), run_as=(1001, 1001), limits=SandboxLimits(network=NetworkMode.EGRESS)
    )
    mounts = EgressMounts(folder=Path("/state/egress/x"), ca_bundle=Path("/state/ca/bundle.pem"))
    recipe = container_recipe(
        spec, image="i", runner_source=Path("/r"), instance_id="t", egress=mounts
    )
    host = recipe.host_config_kwargs
    assert host["network_mode"] == "none"
    targets = {m["Target"]: m for m in host["mounts"]}
    assert targets[EGRESS_DIR]["Source"] == "/state/egress/x" and targets[EGRESS_DIR]["ReadOnly"]
    assert targets[CA_BUNDLE_TARGET]["ReadOnly"]
    env = recipe.create_kwargs["environment"]
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["SSL_CERT_FILE"] == env["PIP_CERT"] == CA_BUNDLE_TARGET
    assert recipe.create_kwargs["command"][-2:] == ["--egress-socket", f"{EGRESS_DIR}/proxy.sock"]
    with pytest.raises(ValueError, match="egress"):
        container_recipe(spec, image="i", runner_source=Path("/r"), instance_id="t")
    plain = SandboxSpec(workspace=Path("/w"), run_as=(1001, 1001))
    with pytest.raises(ValueError, match="egress"):
        container_recipe(plain, image="i", runner_source=Path("/r"), instance_id="t", egress=mounts)


def test_the_forwarder_carries_bytes_to_the_socket_and_ends_with_no_proxy(tmp_path: Path) -> None:
    """The in-container forwarder, run here on the host: bytes go both ways to the Unix socket;
    with nothing listening there, the client's connection just ends."""
    from sandbox.runner import forward

    async def scenario() -> tuple[bytes, bytes]:
        socket_path = tmp_path / "p.sock"

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"echo:" + await reader.read(100))
            await writer.drain()
            writer.close()

        server = await asyncio.start_unix_server(echo, path=str(socket_path))
        listener = forward.bind(0)
        port = listener.getsockname()[1]
        task = asyncio.create_task(forward.serve(listener, str(socket_path)))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        await writer.drain()
        first = await reader.read(-1)
        writer.close()
        server.close()
        await server.wait_closed()
        socket_path.unlink()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        second = await asyncio.wait_for(reader.read(-1), 10)
        writer.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.05)  # the forwarder's own transports close
        return first, second

    assert asyncio.run(scenario()) == (b"echo:ping", b"")


def test_the_scrubber_hides_secrets_across_chunk_boundaries() -> None:
    secret = b"s3cret-value"
    data = b"a" * 5 + secret + b"b" * 3 + secret
    for cut in range(1, len(data)):
        scrubber = Scrubber([secret])
        out = scrubber.feed(data[:cut]) + scrubber.feed(data[cut:]) + scrubber.flush()
        assert out == data.replace(secret, b"*" * len(secret)), cut
    assert Scrubber([]).feed(b"x") == b"x"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/", "/"),
        ("/v1/../admin", "/admin"),
        ("/v1/./a//b/", "/v1/a/b/"),
        ("/a/b/..", "/a/"),
        ("/..", "/"),
        ("/a?next=/../x&q=%2e", "/a?next=/../x&q=%2e"),
    ],
)
def test_paths_are_decided_as_the_server_reads_them(target: str, expected: str) -> None:
    assert normalize_path(target) == expected


@pytest.mark.parametrize(
    "target",
    [
        "/v1/%2e%2e/admin",
        "/v1/%2E./x",
        "/a%2fb",
        "/a%5cb",
        "/a\\b",
        "/a b",
        "x",
        "/a%00",
        "/api/..;/admin",
        "/a%252e%252e/x",
        "/a%u002e",
        "/a%c0%ae",
        "/a%",
        "/a%4",
    ],
)
def test_ambiguous_paths_are_refused(target: str) -> None:
    with pytest.raises(TargetError):
        normalize_path(target)


def test_connections_are_taken_from_the_budget_when_decided() -> None:
    usage = CallUsage(max_connections=2, max_bytes=100)
    assert usage.reserve() == "" and usage.reserve() == ""
    assert "connection budget (2) is spent" in usage.reserve()
    assert usage.connections == 2


def test_tls_record_runs() -> None:
    hello = bytes([22, 3, 1, 0, 2]) + b"ab"
    assert tls_records(hello) and tls_records(hello + bytes([23, 3, 3]))
    assert not tls_records(hello + b"SET pwned 1\r\n")
    assert not tls_records(bytes([22, 3, 1, 0xFF, 0xFF]))
    assert not tls_records(b"GET / HTTP/1.1\r\n")


def test_secret_forms_cover_url_and_json_escapes() -> None:
    forms = secret_forms([b"tok/en+x"])
    assert b"tok/en+x" in forms and b"tok%2Fen%2Bx" in forms and b"tok\\/en+x" in forms


def test_the_egress_folder_of_any_instance_id_stays_under_the_state_dir(tmp_path: Path) -> None:
    """The instance id is free text from the configuration; the folder emptied at start is
    named by its hash, so "../x" can never name (and empty) a folder elsewhere."""
    short = Path(tempfile.mkdtemp(prefix="tj-", dir="/tmp"))  # socket paths stay short
    outside = short / "x"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    state = short / "a" / "b"
    settings = load_settings(None, state_dir=state, audit_log=str(tmp_path / "audit.jsonl"))
    audit = AuditLog(str(tmp_path / "audit.jsonl"))
    try:
        egress = start_egress(settings, _NoPolicy(), audit, "../../x")
    finally:
        audit.close()
    assert egress is not None
    assert egress.root.parent == state / "egress" and egress.root.is_dir()
    assert (outside / "keep.txt").read_text() == "mine"
    assert isinstance(egress.proxy.engine, PolicyEngine)
    shutil.rmtree(short)


class _NoPolicy(PolicyEngine):
    async def decide(self, document: dict[str, Any]) -> Any:
        raise AssertionError("not asked")

    async def visible_tools(self, document: dict[str, Any]) -> frozenset[str] | None:
        return None

    @property
    def revision(self) -> str:
        return "none"


def test_a_state_dir_too_long_for_sockets_gets_a_private_folder_elsewhere(tmp_path: Path) -> None:
    state = tmp_path / ("s" * 90)
    settings = load_settings(None, state_dir=state, audit_log=str(tmp_path / "audit.jsonl"))
    audit = AuditLog(str(tmp_path / "audit.jsonl"))
    try:
        egress = start_egress(settings, _NoPolicy(), audit, "long")
    finally:
        audit.close()
    assert egress is not None
    longest = egress.root / ("0" * 24) / "proxy.sock"
    assert len(os.fsencode(longest)) <= 107 and egress.root.is_dir()
    assert oct(egress.root.parent.stat().st_mode & 0o777) == "0o700"


def test_the_forwarder_takes_little_from_the_proxy_for_a_program_that_does_not_read(
    tmp_path: Path,
) -> None:
    """Bytes the forwarder drained from the proxy sat in the container's loopback TCP queues,
    outside any limit (re-check round: 1.8 MB a connection, 453 MiB for 250). It keeps a small
    send buffer, so a program that does not read leaves the bytes on the proxy's side, where the
    call's open-connection limit counts them."""
    from sandbox.runner import forward

    async def scenario() -> int:
        socket_path = tmp_path / "p.sock"
        sent = 0

        async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal sent
            with contextlib.suppress(OSError):
                while True:
                    writer.write(b"z" * 65536)
                    await writer.drain()
                    sent += 65536

        server = await asyncio.start_unix_server(flood, path=str(socket_path))
        listener = forward.bind(0)
        task = asyncio.create_task(forward.serve(listener, str(socket_path)))
        _, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
        await asyncio.sleep(1.5)  # the program never reads
        taken = sent
        writer.close()
        task.cancel()
        server.close()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.05)  # the forwarder's own transports close
        return taken

    taken = asyncio.run(scenario())
    # The program's own receive buffer (the kernel's to size) holds up to about 1-2 MB of it;
    # with the forwarder's autotuned send buffer it took 5 MB.
    assert taken < 3_000_000, f"the forwarder took {taken} bytes the program never read"


def test_every_egress_answer_has_a_decision_id_for_the_audit() -> None:
    # OPA gives one only with decision logging, which the managed OPA does not have.
    answers = [{}, {"result": {"allow": "yes"}}, {"result": {"allow": False, "reasons": ["no"]}}]
    ids = {parse_egress(answer).decision_id for answer in answers}
    assert len(ids) == 3 and "" not in ids
    assert parse_egress({"decision_id": "opa-9", "result": {"allow": False}}).decision_id == "opa-9"
