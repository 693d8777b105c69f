"""Approval tokens approve one exact call once, before they expire; anything else is refused."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.json_values import canonical_input_hash
from daemon.policy.approval import (
    MAX_TOKEN_CHARS,
    ApprovalAuthority,
    ApprovalError,
    ApprovalFailure,
    reasons_digest,
)
from daemon.policy.keys import KeyMaterialError, load_key, load_or_create_key, parse_key

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
T0 = 1_700_000_000.0
INPUT = {"command": "rm -rf build", "description": "clean", "timeout": 60000}
CALL: dict[str, str] = {
    "session_id": "sess-1",
    "tool_use_id": "toolu_01",
    "input_hash": canonical_input_hash(INPUT),
    "principal": "alice",
    "tool_name": "Bash",
}


def authority(**kwargs: Any) -> ApprovalAuthority:
    kwargs.setdefault("epoch", "run-1")
    return ApprovalAuthority(KEY, **kwargs)


def issue(auth: ApprovalAuthority, now: float = T0, **call: str) -> str:
    return auth.issue(**{**CALL, **call}, now=now).token


def refusal(auth: ApprovalAuthority, token: str, now: float = T0 + 1, **call: str) -> ApprovalError:
    with pytest.raises(ApprovalError) as caught:
        auth.verify(token, **{**CALL, **call}, now=now)
    return caught.value


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# --- canonical input hash ---------------------------------------------------------------------


def test_input_hash_is_sha256_of_sorted_compact_utf8_json() -> None:
    tool_input = {"b": [1, {"y": True, "x": None}], "a": "naïve ✓"}
    expected = hashlib.sha256('{"a":"naïve ✓","b":[1,{"x":null,"y":true}]}'.encode()).hexdigest()
    assert canonical_input_hash(tool_input) == expected


def test_input_hash_ignores_key_order_but_not_values() -> None:
    assert canonical_input_hash({"a": 1, "b": 2}) == canonical_input_hash({"b": 2, "a": 1})
    assert canonical_input_hash({"a": 1}) != canonical_input_hash({"a": 2})
    assert canonical_input_hash({"a": 1}) != canonical_input_hash({"a": "1"})


def test_input_hash_accepts_lone_surrogates() -> None:
    assert len(canonical_input_hash({"s": "\ud800"})) == 64


# --- round trip -------------------------------------------------------------------------------


def test_round_trip_grants_exactly_the_issued_call() -> None:
    auth = authority(ttl_s=600)
    issued = auth.issue(**CALL, now=T0)
    assert issued.token.startswith("tja1.")
    _, body, mac = issued.token.split(".")
    assert len(unb64(mac)) == 32
    assert json.loads(unb64(body))["jti"] == issued.token_id
    assert issued.expires_at == int(T0) + 600

    grant = auth.verify(issued.token, **CALL, now=T0 + 599)

    assert grant.token_id == issued.token_id
    assert grant.approved_by == "alice"
    assert (grant.session_id, grant.tool_use_id, grant.tool_name) == ("sess-1", "toolu_01", "Bash")
    assert grant.policy_input() == {
        "granted": True,
        "token_id": issued.token_id,
        "approved_by": "alice",
        "self_approved": True,
        "scope": "once",
        "issued_at": int(T0),
        "expires_at": int(T0) + 600,
    }
    auth.consume(grant, now=T0 + 599)
    assert auth.used_count == 1


def test_a_token_holds_which_asks_were_shown_in_any_order() -> None:
    auth = authority()
    shown = ["Bash: `chmod -R 777 sub` lets every user write to sub;", "Bash: another ask"]
    issued = auth.issue(**CALL, reasons=shown, now=T0)
    grant = auth.verify(issued.token, **CALL, now=T0 + 1)
    assert grant.reasons == reasons_digest(list(reversed(shown)))
    assert grant.reasons != reasons_digest([*shown, "Bash: recursively deletes the workspace"])
    assert grant.reasons != reasons_digest(shown[:1])


def test_approval_ids_can_be_typed_as_command_line_arguments() -> None:
    """The id (`tooljail approvals approve <id>`) never starts with '-', which argparse reads as
    an option: a CI run met a base64url id that did, one in 64."""
    auth = authority()
    ids = [auth.issue(**CALL, now=T0).token_id for _ in range(2000)]
    assert all(len(i) == 32 and set(i) <= set("0123456789abcdef") for i in ids)


def test_default_ttl_is_fifteen_minutes_and_clock_is_used_without_now() -> None:
    now = [T0]
    auth = authority(clock=lambda: now[0])
    issued = auth.issue(**CALL)
    assert issued.expires_at - issued.issued_at == 900
    now[0] = T0 + 899
    auth.verify(issued.token, **CALL)
    now[0] = T0 + 900
    with pytest.raises(ApprovalError) as caught:
        auth.verify(issued.token, **CALL)
    assert caught.value.failure is ApprovalFailure.EXPIRED


def test_tokens_are_unique_per_issue() -> None:
    auth = authority()
    assert issue(auth) != issue(auth)


def test_long_bound_values_still_fit_and_still_bind() -> None:
    auth = authority()
    principal = "spiffe://example.org/" + "x" * 10_000
    token = issue(auth, principal=principal)
    assert len(token) < 1024
    assert auth.verify(token, **{**CALL, "principal": principal}, now=T0 + 1).approved_by == (
        principal
    )
    other = principal[:-1] + "y"
    assert refusal(auth, token, principal=other).fields == ("principal",)


def test_short_value_cannot_pose_as_a_digest_of_a_long_one() -> None:
    auth = authority()
    long_id = "s" * 500
    token = issue(auth, session_id=long_id)
    digest = "sha256:" + hashlib.sha256(long_id.encode()).hexdigest()
    assert refusal(auth, token, session_id=digest).failure is ApprovalFailure.MISMATCHED


# --- forged ----------------------------------------------------------------------------------


def flip_payload_byte(token: str, index: int) -> str:
    version, body, mac = token.split(".")
    raw = bytearray(unb64(body))
    raw[index] ^= 0x01
    return f"{version}.{b64(bytes(raw))}.{mac}"


def test_flipped_payload_byte_is_forged() -> None:
    auth = authority()
    token = issue(auth)
    for index in (0, 10, -2):
        error = refusal(auth, flip_payload_byte(token, index))
        assert error.failure is ApprovalFailure.FORGED


def test_payload_rewritten_for_another_principal_is_forged() -> None:
    auth = authority()
    version, body, mac = issue(auth).split(".")
    claims = json.loads(unb64(body))
    claims["prn"] = "mallory"
    forged = f"{version}.{b64(json.dumps(claims).encode())}.{mac}"
    assert refusal(auth, forged, principal="mallory").failure is ApprovalFailure.FORGED


def test_flipped_mac_byte_is_forged_without_saying_where() -> None:
    auth = authority()
    version, body, mac = issue(auth).split(".")
    for index in (0, 31):
        raw = bytearray(unb64(mac))
        raw[index] ^= 0x80
        error = refusal(auth, f"{version}.{body}.{b64(bytes(raw))}")
        assert error.failure is ApprovalFailure.FORGED
        assert str(error) == str(refusal(auth, f"{version}.{body}.{b64(bytes(32))}"))
        assert mac not in str(error)
        assert b64(bytes(raw)) not in str(error)


def test_token_signed_with_another_key_is_forged() -> None:
    stranger = ApprovalAuthority(OTHER_KEY, epoch="run-1")
    error = refusal(authority(), issue(stranger))
    assert error.failure is ApprovalFailure.FORGED
    assert "not issued by this daemon" in str(error)
    assert KEY.hex() not in str(error)


def test_unknown_version_is_malformed() -> None:
    auth = authority()
    _, body, mac = issue(auth).split(".")
    error = refusal(auth, f"tja2.{body}.{mac}")
    assert error.failure is ApprovalFailure.MALFORMED
    assert "version 'tja2' is not supported" in str(error)


# --- stale (issued before a restart) ---------------------------------------------------------


def test_token_from_before_a_restart_is_refused() -> None:
    before = ApprovalAuthority(KEY)
    after = ApprovalAuthority(KEY)
    error = refusal(after, issue(before))
    assert error.failure is ApprovalFailure.STALE
    assert "restarted" in str(error)


def test_fixed_epoch_survives_a_new_authority() -> None:
    token = issue(authority(epoch="shared"))
    assert authority(epoch="shared").verify(token, **CALL, now=T0 + 1).principal == "alice"


# --- expired ---------------------------------------------------------------------------------


def test_expired_token_says_when_it_expired() -> None:
    auth = authority(ttl_s=60)
    token = issue(auth)
    auth.verify(token, **CALL, now=T0 + 59)
    error = refusal(auth, token, now=T0 + 75)
    assert error.failure is ApprovalFailure.EXPIRED
    assert "expired at 2023-11-14T22:14:20Z (15 s ago)" in str(error)
    assert "approvals last 1 min" in str(error)


def test_consume_after_expiry_is_refused() -> None:
    auth = authority(ttl_s=60)
    grant = auth.verify(issue(auth), **CALL, now=T0 + 59)
    with pytest.raises(ApprovalError) as caught:
        auth.consume(grant, now=T0 + 61)
    assert caught.value.failure is ApprovalFailure.EXPIRED
    assert auth.used_count == 0


@pytest.mark.parametrize("ttl_s", [0, -5, 24 * 3600 + 1])
def test_ttl_out_of_range_is_rejected(ttl_s: int) -> None:
    with pytest.raises(ValueError, match="ttl_s"):
        ApprovalAuthority(KEY, ttl_s=ttl_s)


def test_short_key_is_rejected_by_the_authority() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        ApprovalAuthority(b"k" * 31)


# --- replayed --------------------------------------------------------------------------------


def test_verify_does_not_use_the_token_up() -> None:
    auth = authority()
    token = issue(auth)
    auth.verify(token, **CALL, now=T0 + 1)
    auth.verify(token, **CALL, now=T0 + 2)
    assert auth.used_count == 0


def test_used_token_is_replayed() -> None:
    auth = authority()
    token = issue(auth)
    auth.consume(auth.verify(token, **CALL, now=T0 + 1), now=T0 + 1)
    error = refusal(auth, token, now=T0 + 2)
    assert error.failure is ApprovalFailure.REPLAYED
    assert "already used" in str(error)


def test_second_consume_of_one_grant_is_replayed() -> None:
    auth = authority()
    grant = auth.verify(issue(auth), **CALL, now=T0 + 1)
    auth.consume(grant, now=T0 + 1)
    with pytest.raises(ApprovalError) as caught:
        auth.consume(grant, now=T0 + 1)
    assert caught.value.failure is ApprovalFailure.REPLAYED


async def test_concurrent_retries_with_one_token_run_once() -> None:
    auth = authority()
    token = issue(auth)
    ran: list[int] = []

    async def retry(n: int) -> None:
        grant = auth.verify(token, **CALL, now=T0 + 1)
        await asyncio.sleep(0)  # the policy is asked again here, letting the other retry in
        auth.consume(grant, now=T0 + 1)
        ran.append(n)

    outcomes = await asyncio.gather(*(retry(n) for n in range(5)), return_exceptions=True)

    assert len(ran) == 1
    errors = [o for o in outcomes if isinstance(o, ApprovalError)]
    assert len(errors) == 4
    assert {e.failure for e in errors} == {ApprovalFailure.REPLAYED}


def test_full_used_set_prunes_expired_then_refuses() -> None:
    auth = authority(ttl_s=60, max_used=2)
    for at in (T0, T0 + 10):
        auth.consume(auth.verify(issue(auth, now=at), **CALL, now=at), now=at)
    pending = issue(auth, now=T0 + 20)

    error = refusal(auth, pending, now=T0 + 30)
    assert error.failure is ApprovalFailure.EXHAUSTED
    assert "until 2023-11-14T22:14:20Z" in str(error)
    assert auth.used_count == 2

    # The first used token has expired by now: its slot is freed, the pending token goes through.
    auth.consume(auth.verify(pending, **CALL, now=T0 + 61), now=T0 + 61)
    assert auth.used_count == 2
    assert refusal(auth, pending, now=T0 + 62).failure is ApprovalFailure.REPLAYED


# --- mismatched ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "name"),
    [
        ("session_id", "sess-2", "session"),
        ("tool_use_id", "toolu_02", "tool_use id"),
        ("input_hash", canonical_input_hash({**INPUT, "command": "rm -rf /"}), "tool input"),
        ("principal", "mallory", "principal"),
        ("tool_name", "Write", "tool name"),
    ],
)
def test_each_bound_field_must_match(field: str, value: str, name: str) -> None:
    auth = authority()
    error = refusal(auth, issue(auth), **{field: value})
    assert error.failure is ApprovalFailure.MISMATCHED
    assert error.fields == (name,)
    assert f"its {name} does not match" in str(error)
    assert value not in str(error)
    assert CALL[field] not in str(error)


def test_all_differing_fields_are_named() -> None:
    auth = authority()
    error = refusal(auth, issue(auth), session_id="other", principal="mallory")
    assert error.fields == ("session", "principal")
    assert "its session and principal do not match" in str(error)


# --- malformed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("", "it is empty"),
        ("tja1", "does not start with 'tja1.'"),
        ("not a token", "does not start with 'tja1.'"),
        ("tja1.", "needs two parts"),
        ("tja1.abc", "needs two parts"),
        ("tja1.abc.", "needs two parts"),
        ("tja1..abc", "needs two parts"),
        ("tja9.abc.def", "version 'tja9' is not supported"),
        ("tja1.ab$c.def", "payload is not URL-safe base64"),
        ("tja1.abc.de+f", "signature is not URL-safe base64"),
        ("tja1.abc=.def", "payload is not URL-safe base64"),
        ("tja1.a.def", "payload is not URL-safe base64"),
        ("tja1.abd.def", "payload is not canonical"),
        ("tja1.abc.deg", "signature has the wrong length"),
        ("tja1.abc.def.ghi", "signature is not URL-safe base64"),
        ("TJA1.abc.def", "does not start with 'tja1.'"),
    ],
)
def test_malformed_strings(token: str, why: str) -> None:
    error = refusal(authority(), token)
    assert error.failure is ApprovalFailure.MALFORMED
    assert why in str(error)
    assert "exactly as the daemon returned it" in str(error)


def test_huge_string_is_refused_before_decoding() -> None:
    auth = authority()
    _, body, mac = issue(auth).split(".")
    huge = f"tja1.{body}{'A' * MAX_TOKEN_CHARS}.{mac}"
    error = refusal(auth, huge)
    assert error.failure is ApprovalFailure.MALFORMED
    assert f"more than {MAX_TOKEN_CHARS}" in str(error)


def signed(auth: ApprovalAuthority, payload: bytes) -> str:
    # Uses the authority's own signer: a token with a valid MAC but a body it never issues.
    body = b64(payload)
    return f"tja1.{body}.{b64(auth._mac(body))}"


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\xff\xfe", "payload is not JSON"),
        (b"{not json", "payload is not JSON"),
        (b"[1, 2]", "unknown layout"),
        (b'{"v": 2}', "unknown layout"),
        (b'{"v": 1, "jti": "x"}', "lacks the text field 'ep'"),
    ],
)
def test_signed_but_unreadable_payload_is_malformed(payload: bytes, why: str) -> None:
    auth = authority()
    error = refusal(auth, signed(auth, payload))
    assert error.failure is ApprovalFailure.MALFORMED
    assert why in str(error)


def test_signed_payload_with_a_non_integer_time_is_malformed() -> None:
    auth = authority()
    _, body, _ = issue(auth).split(".")
    claims = json.loads(unb64(body))
    claims["exp"] = True
    error = refusal(auth, signed(auth, json.dumps(claims).encode()))
    assert "lacks the time field 'exp'" in str(error)


@given(st.text(max_size=300))
def test_random_strings_only_ever_raise_approval_error(text: str) -> None:
    auth = authority()
    for candidate in (text, f"tja1.{text}", f"tja1.{text}.{text}"):
        with pytest.raises(ApprovalError):
            auth.verify(candidate, **CALL, now=T0)


@given(
    st.text(alphabet="ABCabc012-_", min_size=1, max_size=200),
    st.text(alphabet="ABCabc012-_=.", max_size=60),
)
def test_random_base64ish_tokens_only_ever_raise_approval_error(body: str, mac: str) -> None:
    with pytest.raises(ApprovalError) as caught:
        authority().verify(f"tja1.{body}.{mac}", **CALL, now=T0)
    assert caught.value.failure in (ApprovalFailure.MALFORMED, ApprovalFailure.FORGED)


# --- keys ------------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o277])
def test_key_file_is_created_private_with_private_parents(tmp_path: Path, umask: int) -> None:
    # 0o000 would let loose bits through, 0o277 would strip the owner's own bits: neither may.
    path = tmp_path / "state" / "keys" / "approval.key"
    old_umask = os.umask(umask)
    try:
        key = load_or_create_key(path)
    finally:
        os.umask(old_umask)
    assert len(key) == 32
    assert path.read_bytes() == key
    assert mode(path) == 0o600
    assert mode(path.parent) == 0o700
    assert mode(path.parent.parent) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["approval.key"]  # no temp file left behind


def test_key_file_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "approval.key"
    first = load_or_create_key(path)
    assert load_or_create_key(path) == first
    assert first != load_or_create_key(tmp_path / "another.key")


def test_existing_parent_folder_keeps_its_mode(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    load_or_create_key(tmp_path / "approval.key")
    assert mode(tmp_path) == 0o755


@pytest.mark.parametrize("loose", [0o640, 0o604, 0o620, 0o602, 0o644])
def test_key_file_readable_or_writable_by_others_is_refused(tmp_path: Path, loose: int) -> None:
    path = tmp_path / "approval.key"
    path.write_bytes(os.urandom(32))
    path.chmod(loose)
    with pytest.raises(KeyMaterialError, match=f"mode {loose:04o}.*chmod 600"):
        load_or_create_key(path)


def test_short_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "approval.key"
    path.write_bytes(b"x" * 31)
    path.chmod(0o600)
    with pytest.raises(KeyMaterialError, match="is 31 bytes long; at least 32"):
        load_or_create_key(path)
    assert path.read_bytes() == b"x" * 31  # never silently replaced


def test_oversized_key_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "approval.key"
    path.write_bytes(b"x" * 5000)
    path.chmod(0o600)
    with pytest.raises(KeyMaterialError, match="more than the 4096"):
        load_or_create_key(path)


def test_key_path_that_is_a_folder_or_symlink_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "approval.key"
    folder.mkdir(mode=0o700)
    with pytest.raises(KeyMaterialError, match="not a regular file"):
        load_or_create_key(folder)
    target = tmp_path / "real.key"
    target.write_bytes(os.urandom(32))
    target.chmod(0o600)
    link = tmp_path / "link.key"
    link.symlink_to(target)
    with pytest.raises(KeyMaterialError, match="not a symlink"):
        load_or_create_key(link)


def test_key_file_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "approval.key"
    load_or_create_key(path)
    monkeypatch.setattr(os, "geteuid", lambda: path.stat().st_uid + 1)
    with pytest.raises(KeyMaterialError, match="not by the daemon's user"):
        load_or_create_key(path)


def test_key_created_meanwhile_by_another_process_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "approval.key"
    theirs = os.urandom(32)
    real_link = os.link

    def racing_link(src: Any, dst: Any) -> None:
        path.write_bytes(theirs)
        path.chmod(0o600)
        real_link(src, dst)

    monkeypatch.setattr(os, "link", racing_link)
    assert load_or_create_key(path) == theirs
    assert [p.name for p in tmp_path.iterdir()] == ["approval.key"]


def test_unwritable_key_folder_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "link", refuse)
    with pytest.raises(KeyMaterialError, match="cannot create the approval key file"):
        load_or_create_key(tmp_path / "approval.key")
    assert list(tmp_path.iterdir()) == []


def test_configured_key_in_hex_and_base64() -> None:
    raw = os.urandom(32)
    assert parse_key(raw.hex()) == raw
    assert parse_key(f"hex:{raw.hex().upper()}") == raw
    assert parse_key(base64.b64encode(raw).decode()) == raw
    assert parse_key(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    assert parse_key(f"base64:{base64.b64encode(raw).decode()}\n") == raw
    # An even-length hex string is also base64; the prefix says which is meant.
    hexish = "ab" * 32
    assert parse_key(hexish) == bytes.fromhex(hexish)
    assert parse_key(f"base64:{hexish}") == base64.b64decode(hexish)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("ab" * 31, "is 31 bytes long; at least 32"),
        ("hex:xyz", "not valid hex"),
        ("base64:@@@@", "not valid base64"),
        ("not a key!", "not valid base64"),
        ("", "not valid base64"),
    ],
)
def test_bad_configured_key_is_refused(text: str, match: str) -> None:
    with pytest.raises(KeyMaterialError, match=match):
        parse_key(text)


def test_configured_key_wins_over_the_key_file(tmp_path: Path) -> None:
    raw = os.urandom(32)
    path = tmp_path / "approval.key"
    assert load_key(raw.hex(), path) == raw
    assert not path.exists()
    assert load_key(None, path) == path.read_bytes()
