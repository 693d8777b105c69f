"""Approval tokens: what an ASK decision hands out and what a human-approved retry brings back.

A token is ``tja1.<payload>.<mac>``: URL-safe base64 (unpadded) of a compact JSON payload and of
its HMAC-SHA256. It binds one exact call (session, tool_use id, tool, canonical input hash,
principal) and expires. The payload is signed, not encrypted: the holder may read it, so it carries
nothing secret.

Using a token is split in two steps on purpose. `verify` checks a token without using it up, because
the policy decides again after verification and may still deny (or the engine may be unreachable);
burning the approval then would force the human to approve again for nothing. `consume` marks it
used just before the call runs. It has no ``await`` inside and holds a lock, so of two concurrent
calls that both verified the same token exactly one gets to run.

Used token ids are remembered in memory until they expire. Memory does not survive a restart, so
each authority also stamps its tokens with a random epoch and refuses tokens of an earlier run:
otherwise a token already used could be replayed after a restart.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from daemon.errors import ToolError

__all__ = [
    "DEFAULT_MAX_USED",
    "DEFAULT_TTL_S",
    "MAX_TOKEN_CHARS",
    "TOKEN_PREFIX",
    "ApprovalAuthority",
    "ApprovalError",
    "ApprovalFailure",
    "Grant",
    "IssuedToken",
    "Scope",
]

TOKEN_VERSION = "tja1"  # noqa: S105 - a format tag, not a secret
TOKEN_PREFIX = TOKEN_VERSION + "."
MAX_TOKEN_CHARS = 4096
"""Longer strings are refused before any decoding (a real token is well under 2 KB)."""
DEFAULT_TTL_S = 15 * 60
MAX_TTL_S = 24 * 60 * 60
DEFAULT_MAX_USED = 10_000

# Bound values longer than this are stored as a digest, so a token always fits MAX_TOKEN_CHARS.
_MAX_VERBATIM = 128
_DIGEST_PREFIX = "sha256:"
_MAC_BYTES = hashlib.sha256().digest_size
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_VERSION_SHAPE = re.compile(r"[a-z]{1,8}[0-9]{1,4}")
# Keys the token payload carries, with the bound call fields' names as the messages call them.
_BOUND_FIELDS = {
    "sid": "session",
    "tuid": "tool_use id",
    "tool": "tool name",
    "ih": "tool input",
    "prn": "principal",
}
Scope = Literal["once", "session"]
"""What an approval covers: this call only, or similar calls for the rest of the session."""
_RETRY_HINT = "Ask the user to approve the call again and retry with the new token."


class ApprovalFailure(StrEnum):
    """Why a token was refused."""

    MALFORMED = "malformed"
    """Not a token at all: wrong shape, encoding, size or version."""
    FORGED = "forged"
    """The signature does not match: altered, or not made by this daemon's key."""
    STALE = "stale"
    """Issued before the daemon last restarted, so it cannot be shown to be unused."""
    EXPIRED = "expired"
    """Past its expiry time."""
    MISMATCHED = "mismatched"
    """Issued for a different call; `ApprovalError.fields` names what differs."""
    REPLAYED = "replayed"
    """Already used once; tokens are single-use."""
    EXHAUSTED = "exhausted"
    """Too many used tokens are still live to track another one safely."""


class ApprovalError(ToolError):
    """A token that cannot approve this call; the call is denied and the message says why."""

    def __init__(self, failure: ApprovalFailure, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.failure = failure
        """Which check refused the token."""
        self.fields = fields
        """For MISMATCHED, the differing fields ("session", "tool_use id", "tool name", ...)."""


@dataclass(frozen=True)
class IssuedToken:
    """A freshly signed token, for the ASK response and the audit log."""

    token: str
    """The string the caller sends back with the approved retry."""
    token_id: str
    """Random id of this token (its nonce); safe to log."""
    issued_at: int
    """Unix time, seconds."""
    expires_at: int
    """Unix time, seconds; the token is refused from this second on."""


@dataclass(frozen=True)
class Grant:
    """A verified token for exactly this call, not yet used up (see ApprovalAuthority.consume)."""

    token_id: str
    session_id: str
    tool_use_id: str
    tool_name: str
    input_hash: str
    principal: str
    approved_by: str
    """Who approved: an approver's principal (Admin.Approve), or the caller itself when it sends
    the token back without anyone having approved it (then `self_approved`)."""
    issued_at: int
    expires_at: int
    self_approved: bool = True
    """Nobody else approved: the caller that was asked presents its own token. Whether that
    counts is the policy's decision (input.approval.self_approved)."""
    scope: Scope = "once"
    """This call only, or similar calls for the rest of the session: fixed by the approver
    when one approved, else what the retry asked for (and the policy sees it)."""
    reasons: str = ""
    """`reasons_digest` of the asks the approver was shown: an approval covers those only."""

    def policy_input(self) -> dict[str, Any]:
        """The value of ``input.approval`` in the policy input document."""
        return {
            "granted": True,
            "token_id": self.token_id,
            "approved_by": self.approved_by,
            "self_approved": self.self_approved,
            "scope": self.scope,
            "issued_at": self.issued_at,
            "expires_at": self.expires_at,
        }


class ApprovalAuthority:
    """Issues, verifies and consumes approval tokens under one key.

    Args:
        key: The HMAC key (at least 32 bytes; see daemon.policy.keys).
        ttl_s: Lifetime of a token in seconds (1 s to 24 h).
        max_used: How many used, unexpired token ids are remembered at most per principal; when
            a principal's share is full, its new verifications are refused rather than the memory
            growing without bound (other principals are not affected).
        clock: Unix time in seconds, used whenever a call passes no explicit ``now``.
        epoch: Stamps the tokens this authority issues and is required of the ones it accepts.
            Random by default, so tokens die with the process; pass a fixed value only together
            with a used-token memory that outlives the process.
    """

    def __init__(
        self,
        key: bytes,
        *,
        ttl_s: int = DEFAULT_TTL_S,
        max_used: int = DEFAULT_MAX_USED,
        clock: Callable[[], float] = time.time,
        epoch: str | None = None,
    ) -> None:
        if len(key) < 32:
            raise ValueError(f"the approval key must have at least 32 bytes, got {len(key)}")
        if not 1 <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"ttl_s must be between 1 and {MAX_TTL_S} seconds, got {ttl_s}")
        if max_used < 1:
            raise ValueError(f"max_used must be at least 1, got {max_used}")
        # A key derived for this one purpose: the configured key may later sign other things.
        self._mac_key = hmac.digest(key, b"tooljail approval token v1", "sha256")
        self._ttl_s = ttl_s
        self._max_used = max_used
        self._clock = clock
        self._epoch = epoch if epoch is not None else secrets.token_urlsafe(9)
        self._used: dict[str, dict[str, int]] = {}
        """Used token ids (with their expiry) by the principal they were issued to."""
        self._lock = threading.Lock()

    @property
    def ttl_s(self) -> int:
        """Lifetime of the tokens this authority issues."""
        return self._ttl_s

    @property
    def used_count(self) -> int:
        """How many used token ids are currently remembered."""
        return sum(len(used) for used in self._used.values())

    def issue(
        self,
        *,
        session_id: str,
        tool_use_id: str,
        input_hash: str,
        principal: str,
        tool_name: str,
        reasons: Sequence[str] = (),
        now: float | None = None,
    ) -> IssuedToken:
        """Sign a token approving exactly this call for the asks `reasons`, valid for ``ttl_s``
        from ``now``."""
        issued_at = int(self._now(now))
        expires_at = issued_at + self._ttl_s
        # Hex: an id is typed on command lines, where one starting with "-" reads as an option.
        token_id = secrets.token_hex(16)
        payload = {
            "v": 1,
            "jti": token_id,
            "ep": self._epoch,
            "iat": issued_at,
            "exp": expires_at,
            "rs": reasons_digest(reasons),
            **self._bound(session_id, tool_use_id, input_hash, principal, tool_name),
        }
        body = _b64encode(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
        token = f"{TOKEN_PREFIX}{body}.{_b64encode(self._mac(body))}"
        return IssuedToken(token, token_id, issued_at, expires_at)

    def verify(
        self,
        token: str,
        *,
        session_id: str,
        tool_use_id: str,
        input_hash: str,
        principal: str,
        tool_name: str,
        now: float | None = None,
    ) -> Grant:
        """Check that `token` approves exactly this call, without using it up.

        Raises:
            ApprovalError: for the first check that fails, in this order: malformed, forged,
                stale, expired, mismatched, replayed, exhausted.
        """
        at = self._now(now)
        claims = self._authentic_claims(token)
        if claims["ep"] != self._epoch:
            raise ApprovalError(
                ApprovalFailure.STALE,
                "The approval token was issued before the daemon restarted; approvals do not "
                f"survive a restart. {_RETRY_HINT}",
            )
        if at >= claims["exp"]:
            raise ApprovalError(
                ApprovalFailure.EXPIRED,
                f"The approval token expired at {_iso(claims['exp'])} "
                f"({int(at - claims['exp'])} s ago); approvals last {_duration(self._ttl_s)}. "
                f"{_RETRY_HINT}",
            )
        expected = self._bound(session_id, tool_use_id, input_hash, principal, tool_name)
        differing = tuple(
            name for key, name in _BOUND_FIELDS.items() if claims[key] != expected[key]
        )
        if differing:
            raise ApprovalError(
                ApprovalFailure.MISMATCHED,
                f"The approval token was issued for a different call: its {_words(differing)} "
                f"{'does' if len(differing) == 1 else 'do'} not match this one. A token approves "
                "only the exact call the user saw (same session, tool_use id, tool, input and "
                "caller): resend that exact call with it, or ask the user to approve this call "
                "and retry with the new token.",
                differing,
            )
        with self._lock:
            self._refuse_if_used(principal, claims["jti"])
            self._make_room(principal, at)
        return Grant(
            token_id=claims["jti"],
            session_id=session_id,
            tool_use_id=tool_use_id,
            tool_name=tool_name,
            input_hash=input_hash,
            principal=principal,
            approved_by=principal,
            issued_at=claims["iat"],
            expires_at=claims["exp"],
            reasons=claims["rs"],
        )

    def consume(self, grant: Grant, *, now: float | None = None) -> None:
        """Use the token up: call it right before the approved call runs; run only if it returns.

        Raises:
            ApprovalError: REPLAYED if the token was used meanwhile (a concurrent retry won),
                EXPIRED if it expired since verification, EXHAUSTED if no room is left.
        """
        at = self._now(now)
        with self._lock:
            self._refuse_if_used(grant.principal, grant.token_id)
            if at >= grant.expires_at:
                raise ApprovalError(
                    ApprovalFailure.EXPIRED,
                    f"The approval token expired at {_iso(grant.expires_at)}, before the call "
                    f"could start. {_RETRY_HINT}",
                )
            self._make_room(grant.principal, at)
            self._used.setdefault(grant.principal, {})[grant.token_id] = grant.expires_at

    def _now(self, now: float | None) -> float:
        return self._clock() if now is None else now

    def _mac(self, body: str) -> bytes:
        # The version prefix is signed too, so a payload cannot be replayed under another version.
        return hmac.digest(self._mac_key, f"{TOKEN_PREFIX}{body}".encode("ascii"), "sha256")

    @staticmethod
    def _bound(
        session_id: str, tool_use_id: str, input_hash: str, principal: str, tool_name: str
    ) -> dict[str, str]:
        return {
            "sid": _fit(session_id),
            "tuid": _fit(tool_use_id),
            "ih": _fit(input_hash),
            "prn": _fit(principal),
            "tool": _fit(tool_name),
        }

    def _authentic_claims(self, token: str) -> dict[str, Any]:
        if not isinstance(token, str) or not token:
            raise _malformed("it is empty")
        if len(token) > MAX_TOKEN_CHARS:
            raise _malformed(f"it is {len(token)} characters long, more than {MAX_TOKEN_CHARS}")
        version, sep, rest = token.partition(".")
        if not sep:
            raise _malformed(f"it does not start with {TOKEN_PREFIX!r}")
        if version != TOKEN_VERSION:
            if _VERSION_SHAPE.fullmatch(version):
                raise _malformed(
                    f"its version {version!r} is not supported (this daemon issues {TOKEN_VERSION})"
                )
            raise _malformed(f"it does not start with {TOKEN_PREFIX!r}")
        body, sep, mac_text = rest.partition(".")
        if not sep or not body or not mac_text:
            raise _malformed("it needs two parts after the version, separated by a dot")
        payload = _b64decode(body, "payload")
        mac = _b64decode(mac_text, "signature")
        if len(mac) != _MAC_BYTES:
            raise _malformed("its signature has the wrong length")
        if not hmac.compare_digest(mac, self._mac(body)):
            raise ApprovalError(
                ApprovalFailure.FORGED,
                "The approval token's signature is not valid: it was altered or not issued by this "
                f"daemon. {_RETRY_HINT}",
            )
        return _claims(payload)

    def _refuse_if_used(self, principal: str, token_id: str) -> None:
        if token_id in self._used.get(principal, {}):
            raise ApprovalError(
                ApprovalFailure.REPLAYED,
                "The approval token was already used; each approval runs one call once. "
                f"{_RETRY_HINT}",
            )

    def _make_room(self, principal: str, at: float) -> None:
        used = self._used.get(principal)
        if used is None or len(used) < self._max_used:
            return
        used = {jti: exp for jti, exp in used.items() if exp > at}
        self._used[principal] = used
        if len(used) >= self._max_used:
            soonest = min(used.values())
            raise ApprovalError(
                ApprovalFailure.EXHAUSTED,
                f"The daemon is tracking {len(used)} used approvals of principal {principal!r}, "
                f"its limit per principal, so it cannot accept another one safely until "
                f"{_iso(soonest)}. The call did not run; retry it with the same token after that "
                "time.",
            )

    def forget_expired(self, now: float | None = None) -> None:
        """Drop used token ids past their expiry (and principals left with none)."""
        at = self._now(now)
        with self._lock:
            for principal in list(self._used):
                live = {jti: exp for jti, exp in self._used[principal].items() if exp > at}
                if live:
                    self._used[principal] = live
                else:
                    del self._used[principal]


def _claims(payload: bytes) -> dict[str, Any]:
    # Reached only with a valid signature, so a failure here means a bug or a changed format.
    try:
        claims = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _malformed("its payload is not JSON") from None
    if not isinstance(claims, dict) or claims.get("v") != 1:
        raise _malformed("its payload has an unknown layout")
    for key in ("jti", "ep", "rs", *_BOUND_FIELDS):
        if not isinstance(claims.get(key), str):
            raise _malformed(f"its payload lacks the text field {key!r}")
    for key in ("iat", "exp"):
        value = claims.get(key)
        if not isinstance(value, int) or isinstance(value, bool):
            raise _malformed(f"its payload lacks the time field {key!r}")
    return claims


def reasons_digest(reasons: Sequence[str]) -> str:
    """What a token holds of the asks its approver was shown (in any order)."""
    text = json.dumps(sorted(reasons), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _malformed(why: str) -> ApprovalError:
    return ApprovalError(
        ApprovalFailure.MALFORMED,
        f"The approval token is malformed: {why}. Send the approval_token string exactly as the "
        "daemon returned it, or leave it empty to have the call decided afresh.",
    )


def _fit(value: str) -> str:
    """The value as bound in a token: verbatim if short, else its digest (never ambiguous)."""
    if len(value) <= _MAX_VERBATIM and not value.startswith(_DIGEST_PREFIX):
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return _DIGEST_PREFIX + digest


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str, part: str) -> bytes:
    if not _B64URL.fullmatch(text):
        raise _malformed(f"its {part} is not URL-safe base64")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise _malformed(f"its {part} is not URL-safe base64") from None
    # One encoding per value: stray low bits in the last character are refused, not ignored.
    if _b64encode(data) != text:
        raise _malformed(f"its {part} is not canonical URL-safe base64")
    return data


def _iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _duration(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    if not minutes:
        return f"{rest} s"
    return f"{minutes} min" + (f" {rest} s" if rest else "")


def _words(names: tuple[str, ...]) -> str:
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + " and " + names[-1]
