"""Trust at the edges: who a caller is (mTLS names, loopback), what the audit hides and how it
writes lines, where the Unix socket is bound, and bounds that are per principal."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic import ValidationError

from daemon.calls.audit import AuditLog
from daemon.config import AuthSettings, Settings, TcpListenerSettings
from daemon.errors import NotFound, RequestError, TooljailError, Unauthenticated
from daemon.policy.approval import ApprovalAuthority, ApprovalError, ApprovalFailure
from daemon.policy.mask import (
    CLEAN_TEXT_CHARS,
    CLEAN_TEXTS,
    MASKED,
    MAX_FIELD_CHARS,
    MAX_SCANNED_CHARS,
    AuditMask,
    MaskError,
)
from daemon.policy.pending import AskState, PendingApprovals, PendingAsk, newest_per_asker
from daemon.server.identity import CallerResolver
from daemon.server.listen import ListenAddress
from tests.unit.test_approval import CALL, T0, authority, issue

# --- identity --------------------------------------------------------------------------------


class _Context:
    def __init__(self, peer: str, auth: dict[str, list[bytes]], metadata: Any = ()) -> None:
        self._peer, self._auth, self._metadata = peer, auth, metadata

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth

    def invocation_metadata(self) -> Any:
        return self._metadata


def _mtls(cn: str, *uris: str, emails: tuple[str, ...] = ()) -> _Context:
    # As gRPC reports a verified peer: every SAN together, and URI SANs apart.
    auth = {
        "transport_security_type": [b"ssl"],
        "x509_common_name": [cn.encode()],
        "x509_subject_alternative_name": [n.encode() for n in (*emails, *uris)],
        "peer_uri": [u.encode() for u in uris],
        "peer_email": [e.encode() for e in emails],
    }
    return _Context("ipv4:127.0.0.1:5000", auth)


def test_a_certificate_is_named_by_its_uri_san_never_by_its_cn_alone() -> None:
    resolver = CallerResolver(AuthSettings(admin_principals=["local"]))
    named = resolver.resolve(_mtls("local", "spiffe://corp/agent"))  # type: ignore[arg-type]
    assert (named.principal, named.admin) == ("spiffe://corp/agent", False)
    with pytest.raises(Unauthenticated, match="URI SAN"):
        resolver.resolve(_mtls("local"))  # type: ignore[arg-type]


def test_an_email_san_that_looks_like_a_uri_names_nobody() -> None:
    """Attack: an email SAN `spiffe://t/admin` was taken for a URI and made its holder admin."""
    resolver = CallerResolver(AuthSettings(admin_principals=["spiffe://t/admin"]))
    with pytest.raises(Unauthenticated):
        resolver.resolve(_mtls("mallory", emails=("spiffe://t/admin",)))  # type: ignore[arg-type]
    named = resolver.resolve(
        _mtls("mallory", "spiffe://t/alice", emails=("spiffe://t/admin",))  # type: ignore[arg-type]
    )
    assert (named.principal, named.admin) == ("spiffe://t/alice", False)


def test_a_cn_names_a_principal_only_when_enabled_and_never_an_existing_one() -> None:
    resolver = CallerResolver(AuthSettings(admin_principals=["local"], mtls_use_cn=True))
    caller = resolver.resolve(_mtls("local"))  # type: ignore[arg-type]
    assert (caller.principal, caller.admin) == ("cn:local", False)


def test_admin_principals_are_only_the_listed_ones() -> None:
    unix = _Context("unix:/run/x.sock", {})
    assert not CallerResolver(AuthSettings()).resolve(unix).admin  # type: ignore[arg-type]
    listed = CallerResolver(AuthSettings(admin_principals=["local"]))
    assert listed.resolve(unix).admin  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("[::1]:50051", True),
        ("localhost:50051", True),
        ("127.evil.example:50051", False),
        ("127.0.0.1.nip.io:50051", False),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        ("10.0.0.1:50051", False),
    ],
)
def test_loopback_is_decided_by_parsing_the_address(address: str, loopback: bool) -> None:
    assert TcpListenerSettings(address=address).loopback is loopback


# --- the audit mask --------------------------------------------------------------------------

PATTERNS = [
    r"(?i)\b[A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD)[A-Z0-9_]*=(?P<secret>[^\s'\"]+)",
    r"://[^/\s:@]+:(?P<secret>[^@\s/]+)@",
    r"\b(?P<secret>ghp_[A-Za-z0-9_]{20,})",
]


def test_secrets_in_commands_are_hidden_and_the_rest_kept() -> None:
    mask = AuditMask.parse(["content"], PATTERNS)
    command = (
        "GITHUB_TOKEN=abc123 curl -O https://bob:hunter2@forge.example/r.tgz && "
        "wget https://forge.example/x --password ghp_0123456789abcdefghijklmn"
    )
    shown = mask.apply({"command": command, "content": "file body", "nested": [{"x": command}]})
    expected = (
        f"GITHUB_TOKEN={MASKED} curl -O https://bob:{MASKED}@forge.example/r.tgz && "
        f"wget https://forge.example/x --password {MASKED}"
    )
    assert shown == {"command": expected, "content": MASKED, "nested": [{"x": expected}]}


def test_the_shipped_policy_patterns_compile_and_hide_a_bearer_token() -> None:
    patterns = _shipped_patterns()
    mask = AuditMask.parse(["content"], patterns)
    text = mask.hide_secrets("curl -H 'Authorization: Bearer eyJhbGciOi.xyz' https://x --token t0p")
    assert "eyJhbGciOi" not in text and "t0p" not in text and "curl -H" in text


@pytest.mark.parametrize(
    ("fields", "patterns", "why"),
    [
        (None, [], "set of field names"),
        (["content", 3], [], "set of field names"),
        (["content"], "x", "regular expressions"),
        (["content"], ["(unclosed"], "cannot use"),
        (["content"], ["a*"], "matches empty text"),
    ],
)
def test_a_mask_that_cannot_be_understood_is_an_error(
    fields: object, patterns: object, why: str
) -> None:
    with pytest.raises(MaskError, match=why):
        AuditMask.parse(fields, patterns)


# --- audit lines -----------------------------------------------------------------------------


def _audit_line(record: dict[str, Any]) -> str:
    stream = io.StringIO()
    log = AuditLog("-")
    log._stream = stream
    log.write(record)
    return stream.getvalue()


def test_every_line_separator_is_escaped() -> None:
    text = _audit_line({"input": "a\u2028b\u2029c\u0085d\ne\rf"})
    assert text.count("\n") == 1 and text.endswith("\n")
    assert len(text.splitlines()) == 1, "no reader may see two lines"
    assert json.loads(text)["input"] == "a\u2028b\u2029c\u0085d\ne\rf"


def test_huge_texts_are_kept_as_start_length_and_digest() -> None:
    huge = "x" * (MAX_FIELD_CHARS * 10)
    text = _audit_line({"input": {"command": huge}, "tool": "Bash"})
    assert len(text) < 2 * MAX_FIELD_CHARS
    kept = json.loads(text)["input"]["command"]
    assert kept.startswith("xxxx") and f"[{len(huge)} characters, sha256 " in kept


def test_every_top_level_field_is_bounded_whatever_its_type() -> None:
    long = "t" * (MAX_FIELD_CHARS + 1)
    record = {
        "tool_use_id": long,
        "short": "s" * MAX_FIELD_CHARS,
        "count": 3,
        "ok": True,
        "none": None,
        "ratio": 0.5,
        "list": [long],
    }
    logged = json.loads(_audit_line(record))
    shown_id = logged["tool_use_id"]
    assert shown_id.startswith("t" * 100) and "characters, sha256" in shown_id
    assert logged["short"] == record["short"]
    assert (logged["count"], logged["ok"], logged["none"], logged["ratio"]) == (3, True, None, 0.5)
    assert "characters, sha256" in logged["list"][0]


# --- the Unix socket -------------------------------------------------------------------------


def test_the_socket_is_bound_where_nobody_else_can_reach_it_then_moved(tmp_path: Path) -> None:
    import socket

    address = ListenAddress.parse(f"unix://{tmp_path / 'd.sock'}")
    address.prepare()
    target = address.bind_target().removeprefix("unix:")
    folder = Path(target).parent
    assert folder.parent == tmp_path and stat.S_IMODE(folder.stat().st_mode) == 0o700
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(target)
        server.listen()
        address.publish(0o600, "")
        published = tmp_path / "d.sock"
        assert stat.S_IMODE(published.stat().st_mode) == 0o600
        assert not folder.exists()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(published))
    address.cleanup()
    assert not (tmp_path / "d.sock").exists()


def _acl_entry(tag: int, perm: int, qualifier: int = 0xFFFFFFFF) -> bytes:
    return struct.pack("<HHI", tag, perm, qualifier)


def test_a_socket_gets_no_access_its_folder_would_hand_down(tmp_path: Path) -> None:
    """Attacker round 101: the socket's folder carried a default ACL for the user nobody; the
    socket inherited it, and nobody connected (as the admin `local`) to a socket whose mode said
    0660, group root."""
    import socket

    folder = tmp_path / "run"
    folder.mkdir(mode=0o755)
    # user::rwx, user:nobody:rwx, group::r-x, mask::rwx, other::r-x (the kernel's xattr form)
    inherited = struct.pack("<I", 2) + b"".join(
        (
            _acl_entry(0x01, 7),
            _acl_entry(0x02, 7, 65534),
            _acl_entry(0x04, 5),
            _acl_entry(0x10, 7),
            _acl_entry(0x20, 5),
        )
    )
    try:
        os.setxattr(folder, "system.posix_acl_default", inherited)
    except OSError as exc:
        pytest.skip(f"no POSIX ACLs here: {exc}")
    address = ListenAddress.parse(f"unix://{folder / 't.sock'}")
    address.prepare()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(address.bind_target().removeprefix("unix:"))
        server.listen()
        address.publish(0o660, "")
        published = folder / "t.sock"
        with pytest.raises(OSError):
            os.getxattr(published, "system.posix_acl_access", follow_symlinks=False)
        assert stat.S_IMODE(published.stat().st_mode) == 0o660
    address.cleanup()


# --- per-principal bounds --------------------------------------------------------------------


def test_used_tokens_are_bounded_per_principal() -> None:
    auth = authority(ttl_s=600, max_used=2)
    for n in range(2):
        token = issue(auth, now=T0, tool_use_id=f"toolu_m{n}", principal="mallory")
        call = {**CALL, "tool_use_id": f"toolu_m{n}", "principal": "mallory"}
        auth.consume(auth.verify(token, **call, now=T0), now=T0)
    third = issue(auth, now=T0, tool_use_id="toolu_m2", principal="mallory")
    with pytest.raises(ApprovalError) as full:
        auth.verify(third, **{**CALL, "tool_use_id": "toolu_m2", "principal": "mallory"}, now=T0)
    assert full.value.failure is ApprovalFailure.EXHAUSTED and "mallory" in str(full.value)
    # alice is not affected by mallory filling his share.
    token = issue(auth, now=T0)
    auth.consume(auth.verify(token, **CALL, now=T0), now=T0)
    auth.forget_expired(now=T0 + 601)
    assert auth.used_count == 0


def _ask(approval_id: str, principal: str, expires_at: float = T0 + 600) -> PendingAsk:
    return PendingAsk(
        approval_id, principal, "ses_1", f"toolu_{approval_id}", "Bash", "{}", 2, ("why",), T0,
        expires_at,
    )  # fmt: skip


def test_pending_asks_are_bounded_per_principal_and_expire() -> None:
    now = [T0]
    pending = PendingApprovals(max_per_principal=3, max_total=100, clock=lambda: now[0])
    for n in range(5):
        pending.add(_ask(f"m{n}", "mallory"))
    pending.add(_ask("a0", "alice"))
    ids = [a.approval_id for a in pending.listed()]
    assert ids == ["m2", "m3", "m4", "a0"], "mallory's oldest dropped, alice's kept"
    now[0] = T0 + 601
    assert pending.listed() == []


def test_colluding_askers_cannot_push_a_third_ones_asks_out() -> None:
    """Round 141's lead: asks were dropped oldest first over everyone once the daemon held its
    total, and a listing showed the newest 200 over everyone, so two tenants asking fast hid
    a third's asks from the approvers, then dropped them. Room is taken from the asker holding
    the most, and a listing shares its room among the askers, newest first."""
    pending = PendingApprovals(max_per_principal=100, max_total=150, clock=lambda: T0)
    pending.add(_ask("alice-0", "alice"))
    for n in range(100):
        pending.add(_ask(f"m{n}", "mallory"))
        pending.add(_ask(f"e{n}", "eve"))
    ids = [a.approval_id for a in pending.listed()]
    assert "alice-0" in ids and len(ids) == 150
    assert ids.count("m99") == ids.count("e99") == 1
    assert abs(sum(i.startswith("m") for i in ids) - sum(i.startswith("e") for i in ids)) <= 1
    newest = [a.approval_id for a in newest_per_asker(pending.listed(), 9)]
    assert newest[0] == "alice-0" and len(newest) == 9
    assert sorted(newest[1:]) == sorted(
        [f"m{n}" for n in range(96, 100)] + [f"e{n}" for n in range(96, 100)]
    )


def test_an_ask_is_answered_once() -> None:
    pending = PendingApprovals(clock=lambda: T0)
    pending.add(_ask("x", "bob"))
    approved = pending.decide("x", AskState.APPROVED, "alice", scope="session")
    assert (approved.decided_by, approved.scope) == ("alice", "session")
    with pytest.raises(RequestError, match="already approved by alice"):
        pending.decide("x", AskState.DENIED, "carol")
    with pytest.raises(NotFound):
        pending.decide("nope", AskState.APPROVED, "alice")


def test_a_token_verified_without_an_answer_is_a_self_approval() -> None:
    auth: ApprovalAuthority = authority()
    grant = auth.verify(issue(auth), **CALL, now=T0 + 1)
    assert grant.self_approved and grant.approved_by == CALL["principal"]
    assert grant.policy_input()["self_approved"] is True


# --- the mask under hostile input (attack F1, F3) ---------------------------------------------


def _shipped_patterns() -> list[str]:
    import subprocess

    from daemon.config import PROJECT_ROOT

    opa = PROJECT_ROOT / ".tools" / "bin" / "opa"
    if not opa.exists():
        pytest.skip("OPA is built by make setup")
    run = subprocess.run(
        [str(opa), "eval", "-f", "json", "--ignore", "input.schema.json", "-d",
         str(PROJECT_ROOT / "policies"), "data.tooljail.authz.mask_patterns"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    patterns: list[str] = json.loads(run.stdout)["result"][0]["expressions"][0]["value"]
    return patterns


@pytest.mark.parametrize("unit", ["token", "TOKEN_", "a-", "mysql ", " -u ", "://a:", "x=", "'"])
def test_the_shipped_patterns_take_linear_time_on_hostile_text(unit: str) -> None:
    """Quadratic backtracking on 200,000 characters takes minutes; linear takes milliseconds.
    Run in a child so a regression fails (after 60 s) instead of hanging the suite."""
    import subprocess
    import sys

    patterns = _shipped_patterns()
    program = (
        "import json, re, sys\n"
        "patterns = [re.compile(p) for p in json.loads(sys.argv[1])]\n"
        f"text = {unit!r} * (200_000 // {len(unit)})\n"
        "for p in patterns:\n"
        "    p.sub('x', text)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", program, json.dumps(patterns)], timeout=60, check=False
    )
    assert run.returncode == 0


def test_the_mask_scans_a_bounded_amount_of_text_whatever_the_input() -> None:
    seen: list[int] = []

    class Recording(AuditMask):
        def hide_secrets(self, text: str) -> str:
            seen.append(len(text))
            return super().hide_secrets(text)

    mask = Recording(frozenset(), AuditMask.parse([], PATTERNS).patterns)
    huge = {"command": "x" * 5_000_000, "many": ["y" * 5000] * 2000, "k" * 100_000: 1}
    shown = mask.apply(huge)
    assert max(seen) <= MAX_FIELD_CHARS and sum(seen) <= MAX_SCANNED_CHARS + MAX_FIELD_CHARS
    assert "5000000 characters, sha256" in shown["command"]
    assert all(len(key) <= MAX_FIELD_CHARS for key in shown)


class _CountingPattern:
    """A pattern that records every text it is run over."""

    def __init__(self, pattern: str) -> None:
        self._pattern = re.compile(pattern)
        self.scanned: list[str] = []

    def sub(self, replace: Any, text: str) -> str:
        self.scanned.append(text)
        return self._pattern.sub(replace, text)


def test_clean_texts_are_scanned_once_and_texts_with_secrets_every_time() -> None:
    counting = _CountingPattern(r"--token (?P<secret>\S+)")
    mask = AuditMask(frozenset(), (cast(re.Pattern[str], counting),))
    assert [mask.hide_secrets("git status") for _ in range(3)] == ["git status"] * 3
    assert counting.scanned == ["git status"]
    secret = "gh --token abc123"
    assert [mask.hide_secrets(secret) for _ in range(3)] == [f"gh --token {MASKED}"] * 3
    assert counting.scanned.count(secret) == 3
    long = "y" * (CLEAN_TEXT_CHARS + 1)
    mask.hide_secrets(long)
    mask.hide_secrets(long)
    assert counting.scanned.count(long) == 2, "long texts are not remembered"
    for index in range(CLEAN_TEXTS + 10):
        assert mask.hide_secrets(f"clean {index}") == f"clean {index}"
    assert len(mask._clean) <= CLEAN_TEXTS  # its bound is the point


@pytest.mark.parametrize(
    ("command", "secret"),
    [
        ('DB_PASSWORD="hunter2-quoted" ./migrate', "hunter2"),
        ("export API_KEY='abc.def.123'", "abc.def.123"),
        ("mysql --password 'pw-9x' db", "pw-9x"),
        ("curl -u admin:S3cretPass https://h", "S3cretPass"),
        ('curl -H "X-Api-Key: k3y-v4lue" https://h', "k3y-v4lue"),
        ("git push https://u:SuperSecretPW@host/r main", "SuperSecretPW"),
    ],
)
def test_the_shipped_patterns_hide_common_spellings(command: str, secret: str) -> None:
    mask = AuditMask.parse([], _shipped_patterns())
    assert secret not in mask.hide_secrets(command), mask.hide_secrets(command)


def test_a_masked_value_stops_at_shell_syntax_so_commands_stay_visible() -> None:
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.hide_secrets("echo deploying; export CI_TOKEN=x;>important.txt;echo done")
    assert ">important.txt;echo done" in shown, shown


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ('MY_TOKEN="$(touch pwned_dq; rm -f victim)" true', "rm -f victim"),
        ('MY_TOKEN="`rm -f victim`" true', "rm -f victim"),
        ('DB_PASSWORD="a\\"$(rm -f victim)" true', "rm -f victim"),
        ('mysql --password "$(rm -f victim)" db', "rm -f victim"),
        ("echo authorization: bearer x;rm${IFS}-f${IFS}victim", "victim"),
        ("echo X-Api-Key:k$(rm${IFS}victim)", "victim"),
        ("echo https://u:p$(rm${IFS}victim)@h/r", "victim"),
    ],
)
def test_a_masked_value_never_hides_what_runs(command: str, ran: str) -> None:
    """Attacker round 141: a double-quoted value holding `$(...)` was masked whole, and the
    header and URL patterns ran on past `;` and `$`: the audit did not show what ran."""
    mask = AuditMask.parse([], _shipped_patterns())
    assert ran in mask.hide_secrets(command), mask.hide_secrets(command)


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ("echo 'A_TOKEN='; id; echo hidden-cmd-ran; echo ''", "hidden-cmd-ran"),
        ("echo 'x --password '; touch pwned; ls; echo ''", "touch pwned"),
        ("echo \"DB_PASSWORD='$(rm -f pwned; echo gone)'\"", "rm -f pwned"),
        ("xargs 'A_TOKEN=' sh -c 'rm -rf x'", "sh -c"),
        ("echo 'MY_SECRET='\nrm -rf x\necho ''", "rm -rf x"),
    ],
)
def test_a_quote_closed_and_another_opened_is_no_masked_value(command: str, ran: str) -> None:
    """Attacker round 144: the quoted-value patterns took the closing quote of one word and the
    opening quote of a later one for one quoted secret, and masked the commands between them. A
    quoted value holding a blank, shell syntax, an expansion or an escape is never masked (one
    with a blank may be a quoted secret or two words: prefer showing it)."""
    mask = AuditMask.parse([], _shipped_patterns())
    assert ran in mask.hide_secrets(command), mask.hide_secrets(command)


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim.conf"
    victim.write_text("IMPORTANT\n")
    (tmp_path / "d.sock.lock").symlink_to(victim)
    address = ListenAddress.parse(f"unix://{tmp_path / 'd.sock'}")
    with pytest.raises(TooljailError, match="lock file"):
        address.prepare()
    assert victim.read_text() == "IMPORTANT\n"


def test_a_lock_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to make a file of another user")
    lock = tmp_path / "d.sock.lock"
    lock.write_text("")
    os.chown(lock, 65534, 65534)
    with pytest.raises(TooljailError, match="somebody else"):
        ListenAddress.parse(f"unix://{tmp_path / 'd.sock'}").prepare()


def test_the_audit_file_is_not_readable_by_others_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        log = AuditLog(str(tmp_path / "audit.jsonl"))
        log.write({"x": 1})
        log.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "audit.jsonl").stat().st_mode) == 0o640


def test_the_managed_opa_gets_none_of_the_daemons_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.policy.opa_server import _opa_environment

    monkeypatch.setenv("TOOLJAIL_AUTH__TOKENS", '{"alice": "s3cret"}')
    monkeypatch.setenv("TOOLJAIL_APPROVAL__KEY", "k" * 64)
    env = _opa_environment()
    assert set(env) <= {"PATH", "HOME", "LANG", "TZ"} and "s3cret" not in str(env)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_socket_folder_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    """Attack: in a folder another account may write, it swapped the staging folder and had
    the daemon chmod and chgrp a root-owned file of its choice."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    with pytest.raises(TooljailError, match="can be changed by other accounts"):
        ListenAddress.parse(f"unix://{shared / 'd.sock'}").prepare()


def test_a_sticky_shared_folder_or_one_of_another_owner(tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    address = ListenAddress.parse(f"unix://{sticky / 'd.sock'}")
    address.prepare()  # others keep to their own entries there
    address.cleanup()
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(TooljailError, match="owner uid 65534"):
            ListenAddress.parse(f"unix://{theirs / 'd.sock'}").prepare()


def test_a_dropped_ask_is_remembered_until_its_token_expires() -> None:
    """Suspected by an attacker: a denied ask pushed out of the bound made the retry a
    self-approval. A dropped ask is remembered, and the gate refuses its token."""
    now = [T0]
    pending = PendingApprovals(max_per_principal=1, max_total=100, clock=lambda: now[0])
    pending.add(_ask("denied", "bob"))
    pending.decide("denied", AskState.DENIED, "alice")
    pending.add(_ask("next", "bob"))
    assert pending.get("denied") is None and pending.dropped("denied")
    now[0] = T0 + 601
    assert not pending.dropped("denied")


def test_what_the_audit_keeps_of_a_huge_structured_input_stays_bounded() -> None:
    """100,000 short strings used to become 100,000 digests (40 times the input: the attacker
    round filled the audit with tens of megabytes per call)."""
    import json

    from daemon.policy.mask import MAX_SCANNED_CHARS, AuditMask

    mask = AuditMask.parse([], [])
    many = {"items": ["ab"] * 100_000, **{f"k{i}": "v" for i in range(50_000)}}
    logged = json.dumps(mask.apply(many))
    assert len(logged) < 4 * MAX_SCANNED_CHARS
    assert "more items not logged" in logged and "more keys not logged" in logged


@pytest.mark.parametrize("empty", [{}, []], ids=["empty objects", "empty arrays"])
def test_empty_containers_count_against_what_the_audit_keeps(empty: object) -> None:
    """Three million empty objects used to be logged whole: an 11 MB audit line per call."""
    import json

    from daemon.policy.mask import MAX_SCANNED_CHARS, AuditMask

    mask = AuditMask.parse([], [])
    logged = json.dumps(mask.apply({"file_path": [empty] * 1_000_000, "deep": [[[empty]]] * 1000}))
    assert len(logged) < 4 * MAX_SCANNED_CHARS
    assert "more items not logged" in logged


@pytest.mark.parametrize(
    ("mode", "admins", "refused"),
    [
        (0o666, ["local"], True),  # every local account would be the admin
        (0o662, ["local"], True),
        (0o660, ["local"], False),  # the socket's group: chosen by the operator
        (0o666, [], False),  # open to all, but as a principal with no admin rights
    ],
)
def test_a_socket_every_local_user_may_use_is_never_an_admins(
    mode: int, admins: list[str], refused: bool
) -> None:
    """Attacker round 100: with socket_mode 0666 and the socket's principal an admin, the user
    nobody called Admin.Status, read a tenant's files and wrote in the default folder as
    `local`: the daemon cannot tell Unix-socket callers apart, and accepted it silently."""
    settings = {"socket_mode": mode, "auth": {"admin_principals": admins}}
    if refused:
        with pytest.raises(ValidationError, match="every local account"):
            Settings(**settings)  # type: ignore[arg-type]
    else:
        Settings(**settings)  # type: ignore[arg-type]


def test_a_long_field_of_the_callers_hides_no_other_field_of_an_audit_record(
    tmp_path: Path,
) -> None:
    """Attacker round 143: the audit bounded a record as a whole, with one scan budget, so a
    tool_use id of 8,150 characters early in it spent that budget and the tool, its input, its
    digest and its outcome were logged as "[6 more keys not logged]": a command ran unaudited."""
    log = AuditLog(str(tmp_path / "audit.jsonl"))
    log.write(
        {
            "event": "decided",
            "tool_use_id": "toolu_" + "A" * 8150,
            "description": "d" * 8190,
            "tool": "Bash",
            "input_sha256": "ab" * 32,
            "input": {"command": "echo HIDDEN_PAYLOAD > proof.txt", "description": "x" * 8190},
            "outcome": "allow",
        }
    )
    log.close()
    record = json.loads((tmp_path / "audit.jsonl").read_text())
    assert record["tool"] == "Bash" and record["outcome"] == "allow"
    assert record["input_sha256"] == "ab" * 32
    assert record["input"]["command"] == "echo HIDDEN_PAYLOAD > proof.txt"


@pytest.mark.parametrize("part", ["id", "name"])
def test_a_tool_use_id_or_name_past_its_length_is_refused(part: str) -> None:
    """Round 143: a 7.5 MB tool_use id was held in the replay memory (150 of them: 1.1 GB)."""
    from daemon._generated.tooljail.v1 import executor_pb2 as pb
    from daemon.server.convert import MAX_ID_CHARS, tool_use_from_proto

    fields = {"id": "toolu_1", "name": "Read", part: "x" * (MAX_ID_CHARS + 1)}
    with pytest.raises(RequestError, match=f"tool_use.{part} is longer than {MAX_ID_CHARS}"):
        tool_use_from_proto(pb.ToolUse(**fields))
    fields[part] = "x" * MAX_ID_CHARS
    assert tool_use_from_proto(pb.ToolUse(**fields)).id


def test_a_long_request_path_hides_nothing_else_of_an_egress_record(tmp_path: Path) -> None:
    """Attacker round 144: egress records were masked as a whole, with one scan budget, so a
    request path of 8,100 characters left the decision, the bytes sent and how the connection
    ended unlogged: data left through an allowed destination with no count."""
    from daemon.app.egress import audited

    log = AuditLog(str(tmp_path / "audit.jsonl"))
    mask = AuditMask.parse(["content"], _shipped_patterns())
    audited(log, mask)(
        {
            "event": "egress",
            "method": "POST",
            "path": "/" + "a" * 8100,
            "decision": "allow",
            "bytes_up": 3_000_000,
            "end": "done",
        }
    )
    log.close()
    record = json.loads((tmp_path / "audit.jsonl").read_text())
    assert record["decision"] == "allow" and record["bytes_up"] == 3_000_000
    assert record["end"] == "done" and record["path"].startswith("/aaa")


def test_keys_that_mask_alike_are_all_logged() -> None:
    """Round 144's lead: keys were masked like any text, and two that masked alike kept one
    entry, the later one's value, so a tool taking any key names could hide an input field."""
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.apply({"GITHUB_TOKEN=abc": "first", "GITHUB_TOKEN=def": "second", "x": 1})
    assert sorted(v for v in shown.values() if isinstance(v, str)) == ["first", "second"]
    assert len(shown) == 3 and "abc" not in str(shown) and "def" not in str(shown)


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ("find . -maxdepth 0 -name {A_TOKEN=x,-o,-exec,id,{},+}", "-exec,id"),
        ("mysql --password {x,-e,id} db", "-e,id"),
        ("mkdir -p A_TO\u212aEN=d; A_TO\u212aEN=d/../s.sh", "s.sh"),
        ("./A_TOKEN=d/../s.sh", "s.sh"),
        ("./sk-" + "a" * 30, "sk-" + "a" * 30),
        ("cat > A_TOKEN=d/../x", "x"),
        ("echo A_TOKEN=a*b", "a*b"),
    ],
)
def test_a_masked_value_is_a_plain_token_in_a_word_of_its_own(command: str, ran: str) -> None:
    """Attacker round 145: a value with braces ({A_TOKEN=x,-o,-exec,id,{},+} runs id under
    find), a name with the Kelvin sign (bash runs it as a program), a name or a key's shape in
    a path (the program or file is hidden) were masked. A value is made of token characters
    only, a name starts a word, and the names are ASCII."""
    mask = AuditMask.parse([], _shipped_patterns())
    assert ran in mask.hide_secrets(command), mask.hide_secrets(command)


def test_the_paths_a_tool_touches_are_never_masked() -> None:
    """Round 145: a Write to `<ws>/A_TOKEN=x/../hidden.sh` was audited with neither its path
    nor its content. Path fields are shown as they are (bounded, not masked by patterns)."""
    mask = AuditMask.parse(["content"], _shipped_patterns())
    shown = mask.apply({"file_path": "/ws/A_TOKEN=x/../hidden.sh", "content": "id"})
    assert shown == {"file_path": "/ws/A_TOKEN=x/../hidden.sh", "content": "***masked***"}


def test_a_glob_pattern_is_shown_and_a_grep_pattern_masked() -> None:
    """Glob's `pattern` names the files it lists (shown as sent); Grep's is a regular
    expression, which may hold a secret (masked by the shipped patterns)."""
    from daemon.tools.glob.tool import GlobTool
    from daemon.tools.grep.tool import GrepTool

    mask = AuditMask.parse(["content"], _shipped_patterns())
    glob = {"pattern": "A_TOKEN=x/../**/*.sh"}
    grep = {"pattern": "A_TOKEN=hunter2", "glob": "A_TOKEN=x/*.py"}
    assert mask.apply(glob, paths=GlobTool.audit_paths) == glob
    shown = mask.apply(grep, paths=GrepTool.audit_paths)
    assert "hunter2" not in shown["pattern"] and shown["glob"] == grep["glob"]


def test_a_long_command_is_logged_whole_up_to_what_is_analysed(tmp_path: Path) -> None:
    """Attacker round 145: a command of 8,243 characters was logged as its first 1,024, its
    length and its digest, and what ran after them (`echo LONG-TAIL-RAN`) was not shown. A
    command is logged whole up to MAX_COMMAND_BYTES (longer ones are not analysed, so the
    policy asks about them)."""
    from daemon.shell.parse import MAX_COMMAND_BYTES

    command = "echo innocent #" + "x" * 8200 + "\necho LONG-TAIL-RAN"
    log = AuditLog(str(tmp_path / "audit.jsonl"))
    mask = AuditMask.parse(["content"], _shipped_patterns())
    log.write({"tool": "Bash", "input": mask.apply({"command": command, "description": "d"})})
    log.close()
    record = json.loads((tmp_path / "audit.jsonl").read_text())
    assert record["input"]["command"] == command
    longest = "#" * MAX_COMMAND_BYTES + "x"
    assert "characters, sha256" in mask.apply({"command": longest})["command"]


def test_a_command_is_logged_whole_as_far_as_the_parser_analyses_one() -> None:
    from daemon.policy.mask import WHOLE_FIELD_CHARS
    from daemon.shell.parse import MAX_COMMAND_BYTES

    assert WHOLE_FIELD_CHARS["command"] == MAX_COMMAND_BYTES


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ("# --token\n/usr/bin/id", "/usr/bin/id"),
        ("echo authorization: bearer\n/usr/bin/whoami", "/usr/bin/whoami"),
        ("echo -u\nPATH=x:/ws/b:/usr/bin:/bin\nls", "/ws/b"),
        ("PATH=A_TOKEN=:/ws/b:/usr/bin:/bin ls", "/ws/b"),
        ('ln -s / A_TOKEN= ; "A_TOKEN=/usr/bin/id"', "A_TOKEN=/usr/bin/id"),
        ("echo secretdata > A_TOKEN=d/f.txt", "A_TOKEN=d/f.txt"),
        ("cat > n.txt << A_TOKEN=a\nA_TOKEN=b\necho RAN\nA_TOKEN=a", "<< A_TOKEN=a\n"),
        (". A_TOKEN=x", ". A_TOKEN=x"),
        ("bash sk-" + "a" * 24 + ".sh", "sk-" + "a" * 24),
    ],
)
def test_a_command_is_masked_only_where_a_secret_is_carried(command: str, ran: str) -> None:
    """Attacker round 146: a newline after `--token`, `-u` or a header name, `NAME=` after `=`
    or a quote, a redirection's target, a heredoc's delimiter and a sourced file were all
    masked, and what ran or was written was not shown. A command's secrets are hidden only when
    the masked command parses to the same commands, redirections and heredocs, differing only
    in words that carry a secret; otherwise the command is logged whole."""
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.apply({"command": command})["command"]
    assert ran in shown, shown


@pytest.mark.parametrize(
    ("command", "secret"),
    [
        ("export GITHUB_TOKEN=abc123xyz && curl https://api.example/x", "abc123xyz"),
        ("GITHUB_TOKEN=abc123xyz curl https://api.example/x", "abc123xyz"),
        ('A_TOKEN=x9y8z7; cd app && curl -H "Authorization: Bearer $A_TOKEN" https://h', "x9y8z7"),
        ("curl https://u:p4ssw0rd@h.example/x", "p4ssw0rd"),
        ("docker login -u me --password s3cr3tpw reg.example", "s3cr3tpw"),
        ("kubectl get pods --token=t0k3nval", "t0k3nval"),
        ("curl -H 'Authorization: Bearer xyz123abc' https://h", "xyz123abc"),
        ("mysql --password pw-9x db", "pw-9x"),
        ("mysql --password=pw-9x db", "pw-9x"),
        ("curl -u admin:S3cretPass https://h", "S3cretPass"),
        ("git push https://u:SuperSecretPW@host/r main", "SuperSecretPW"),
        ("openai --api-key sk-" + "b" * 24, "sk-" + "b" * 24),
    ],
)
def test_a_secret_a_command_carries_is_still_masked(command: str, secret: str) -> None:
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.apply({"command": command})["command"]
    assert secret not in shown and MASKED in shown, shown


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ("sed -u s:x:rm:e job.txt; ls", "s:x:rm:e"),
        ("sed -E -u s:.+:id:e one.txt", "s:.+:id:e"),
        ("sed s://x:id@:e u.txt", "s://x:id@:e"),
        ("sed s://x:id@h:e u.txt", "s://x:id@h:e"),
        ("sort -u a:b", "a:b"),
        ("declare -n API_TOKEN=PATH; API_TOKEN=.; ls", "API_TOKEN=PATH"),
        ('A_TOKEN=-delete; find . -name "victim*" $A_TOKEN; ls', "A_TOKEN=-delete"),
        ("DEPLOY_TOKEN=rm%-rf%important; echo ${DEPLOY_TOKEN//%/ } > t.sh; bash t.sh", "rm%-rf"),
        ('A_TOKEN=id; printf "%s\n" $A_TOKEN > s.sh; bash s.sh', "A_TOKEN=id"),
        ('A_TOKEN=/etc/passwd; cat "$A_TOKEN"', "/etc/passwd"),
        ("A_TOKEN=-o/tmp/x; curl $A_TOKEN https://h", "-o/tmp/x"),
        ('A_TOKEN=-K/tmp/x; curl "$A_TOKEN" https://h', "-K/tmp/x"),
        (
            "export A_TOKEN=-delete; printenv | cut -d= -f2 | while read a; do find . $a; done",
            "-delete",
        ),
        ("export A_TOKEN=x1; p=A_TOKEN; find . ${!p}", "A_TOKEN=x1"),
        ("export A_TOKEN=-delete; tr '\\0' ' ' < /proc/self/environ > a; find . $(< a)", "-delete"),
        ("A_TOKEN=code sh -c 'eval $A_TOKEN'", "A_TOKEN=code"),
        ("A_TOKEN=code python3 app.py", "A_TOKEN=code"),
        ("export -n A_TOKEN=x1; curl https://h", "A_TOKEN=x1"),
        ("A_TOKEN=x1 timeout 5 curl https://h", "A_TOKEN=x1"),
        ("find proj -mindepth 1 -not -name --token -delete", "-delete"),
        ("echo x | tee -- --password src/app.py >/dev/null", "src/app.py"),
        ("rm -rf -- --token keep; ls -la", "keep"),
        ("flock -- --token rm -rf data; ls", "rm"),
        ("find proj --token=-delete", "-delete"),
        ("kubectl --token -delete get pods", "-delete"),
        (
            "MY_TOKEN=rm+-rf+w git ls-remote --upload-pack='eval \"$(printenv | "
            'sed -n s/^MY_TOK[E]N=//p | tr + " ")"\' .',
            "rm+-rf+w",
        ),
        ("A_TOKEN=x1 pip install -r r.txt", "A_TOKEN=x1"),
        ("git -C --token status", "status"),
        ("kubectl -n --token delete pod x", "delete"),
        ("git -C --token=status log", "--token=status"),
    ],
)
def test_a_masked_value_is_one_no_program_can_run_or_take_as_an_argument(
    command: str, ran: str
) -> None:
    """Attacker round 148: `-u user:password` and a URL's credentials were masked for any
    program (`sed -u s:x:rm:e` ran rm through sed's `e` flag), and a secret's assignment was
    masked wherever the variable went next (a nameref to PATH, an option of find, a script
    written from it). A value is masked only where it stays data: a user:password after curl's
    -u, credentials in the URL or header of a network client, and an assignment whose variable
    no word of the line names but such a header or URL, in a line whose programs are network
    clients only (no interpreter, no program reading the environment, no indirection)."""
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.apply({"command": command})["command"]
    assert ran in shown, shown


def test_many_masked_names_cost_the_mask_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attacker round 149: each masked name was looked for over the whole line and every word
    of it (1,300 names in 18 KB: 1.4 s holding the GIL). The words are looked at once, however
    many names are masked."""
    from daemon.policy import command_mask
    from daemon.shell import parse as parse_module
    from daemon.shell.parse import parse_command

    # What is counted is the looks, not time: a parse stopped at its time budget on a loaded
    # machine leaves the line whole, and the masked name is not found (it failed so now and
    # then under `-n 2`).
    monkeypatch.setattr(parse_module, "TIME_BUDGET_S", 60.0)
    looked: list[str] = []
    real = command_mask._carrier

    def counting(command: Any, word: str) -> str | None:
        looked.append(word)
        return real(command, word)

    monkeypatch.setattr(command_mask, "_carrier", counting)
    exports = "; ".join(f"export a{n}TOKEN=x" for n in range(300))
    command = exports + "; curl -H 'Authorization: Bearer $a1TOKEN' " + "h " * 600
    mask = AuditMask.parse([], _shipped_patterns())
    parsed: list[Any] = []

    def parse(raw: str) -> Any:
        parsed.append(parse_command(raw))
        return parsed[-1]

    shown = command_mask.hide_in_command(command, mask.hide_secrets, MASKED, parse)
    assert "a299TOKEN=***masked***" in shown, shown[:200]
    # The words of the parse the mask used.
    words = sum(len(c.argv) for c in parsed[0].simple_commands)
    assert len(looked) <= 2 * words, (len(looked), words)


def test_a_long_command_is_not_parsed_on_the_event_loop_to_be_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attacker round 148: the mask parsed a masked command twice on the event loop, and the
    parser's time grows with the square of a pipeline's length: one 32 KB call froze every
    caller for 15 s. Without a bounded parser (given by a worker thread), only a short line is
    parsed to be masked; a longer one is logged whole."""
    from daemon.policy import command_mask

    parsed: list[int] = []
    real = command_mask.parse_command

    def counting(raw: str) -> Any:
        parsed.append(len(raw))
        return real(raw)

    monkeypatch.setattr(command_mask, "parse_command", counting)
    mask = AuditMask.parse([], _shipped_patterns())
    command = "A_TOKEN=x; " + "a|" * 16000 + "a"
    assert mask.apply({"command": command})["command"] == command
    assert all(n <= command_mask.ON_LOOP_CHARS for n in parsed), parsed
    given: list[int] = []

    def bounded(raw: str) -> Any:
        given.append(len(raw))
        return real(raw)

    long_header = "curl -H 'Authorization: Bearer " + "e" * 900 + "' https://h"
    shown = mask.apply({"command": long_header}, parse=bounded)["command"]
    assert given and "e" * 900 not in shown
    assert "e" * 900 in mask.apply({"command": long_header})["command"]


@pytest.mark.parametrize("first", ["description", "command"])
def test_a_long_description_does_not_push_the_command_out_of_the_audit(first: str) -> None:
    """Attacker round 148: a description of 8,192 characters sent before the command spent the
    scan budget, and the record said `"…": "[1 more keys not logged]"` where `rm -rf` was."""
    mask = AuditMask.parse([], _shipped_patterns())
    fields = {"description": "a" * 8192, "command": "rm -rf keepme; echo RAN"}
    value = {first: fields[first], **fields}
    shown = mask.apply(value)
    assert shown["command"] == "rm -rf keepme; echo RAN", shown


@pytest.mark.parametrize(
    ("tool", "field"),
    [
        ("daemon.tools.files.write:WriteTool", "file_path"),
        ("daemon.tools.files.edit:EditTool", "file_path"),
        ("daemon.tools.files.multiedit:MultiEditTool", "file_path"),
        ("daemon.tools.files.notebook_edit:NotebookEditTool", "notebook_path"),
        ("daemon.tools.read:ReadTool", "file_path"),
        ("daemon.tools.ls:LsTool", "path"),
        ("daemon.tools.grep.tool:GrepTool", "path"),
        ("daemon.tools.grep.tool:GrepTool", "glob"),
        ("daemon.tools.glob.tool:GlobTool", "path"),
    ],
)
def test_a_path_longer_than_the_kernel_takes_is_refused(tool: str, field: str) -> None:
    """Attacker round 148: a Write to `<ws>` + `/.` * 5000 + `/hidden-target.sh` was made (the
    daemon normalises the path), and the audit, which keeps 1,024 characters of a text over
    8,192, did not show which file it wrote. No path longer than PATH_MAX is taken."""
    import importlib

    module, name = tool.split(":")
    model = getattr(importlib.import_module(module), name).input_model
    with pytest.raises(ValidationError, match="at most 4096"):
        model.model_validate({field: "/ws" + "/." * 2100 + "/x", "pattern": "x"})


def test_a_globs_pattern_is_shown_as_a_path_is() -> None:
    """Round 146: Grep's glob names the files it searches."""
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.apply({"pattern": "PASSWORD=hunter2", "glob": "A_TOKEN=d/*"})
    assert shown == {"pattern": "PASSWORD=***masked***", "glob": "A_TOKEN=d/*"}


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        ("BASH_ENV='x;A_TOKEN=evil;' bash -c true", "A_TOKEN=evil"),
        ("env -C 'd;A_TOKEN=evil;' ./run.sh", "A_TOKEN=evil"),
        ("xargs -a 'x;A_TOKEN=evil;' rm -f", "A_TOKEN=evil"),
        ("f='x;A_TOKEN=evil;'; . \"./$f\"", "A_TOKEN=evil"),
        ("for f in '/tmp/x;A_TOKEN=evil;'; do . \"$f\"; done", "A_TOKEN=evil"),
        ("PATH=.:$PATH flock lk sk-" + "a" * 28, "sk-" + "a" * 28),
        ("chroot / sk-" + "a" * 28, "sk-" + "a" * 28),
        ("RESTIC_PASSWORD_COMMAND=/tmp/evil.sh restic snapshots", "/tmp/evil.sh"),
        ("RCLONE_PASSWORD_COMMAND=/tmp/evil.sh; rclone ls x", "/tmp/evil.sh"),
    ],
)
def test_a_mask_the_parsed_command_does_not_account_for_shows_it_whole(
    command: str, ran: str
) -> None:
    """Attacker round 147: masks inside quoted words after a `;` were counted as assignments
    where a command starts; wrapper options and loop lists are not in the parsed model; a
    key-shaped operand can be a program (`flock`, `chroot`); a secret-named variable can name a
    command (`RESTIC_PASSWORD_COMMAND`). Each is shown whole."""
    mask = AuditMask.parse([], _shipped_patterns())
    shown = mask.apply({"command": command})["command"]
    assert ran in shown, shown
