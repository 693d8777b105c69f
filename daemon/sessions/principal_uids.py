"""A host uid of its own for each principal's sandboxes over the workspaces tooljail makes (and
over the default workspace, when it is the sandbox account's: see SessionStore.default_for).

The kernel counts some limits per uid, not per container: inotify instances and watches, pipe
buffer pages, POSIX message-queue bytes, processes (RLIMIT_NPROC). With one sandbox account for
every tenant, one tenant holding them (a background command may, for its whole life) takes them
from all the others (attacker round 105, F3). With a uid per principal, each tenant's counts are
its own. The group stays the sandbox account's: no limit is counted per group, and a daemon that
is not root hands workspaces over through that group.

- The uids come from a range the operator sets (`sandbox.principal_uid_first`, `_count`). No
  account of the machine, no subordinate uid range and not the daemon itself may be in it: a
  sandbox must never share a uid with anything that has files or processes outside it. That is
  checked at start, and a range that fails it stops the daemon.
- A principal keeps its uid for good, and a uid is never given to anyone else, so what a
  principal's sandboxes left in its kept workspaces never becomes another's. Who has which is in
  a file of the state directory, written whole (and synced) before the first sandbox runs as it.
- That file is read at start. One that is not what the daemon wrote stops the daemon rather than
  being guessed at: a uid given twice would hand one tenant's files to another.
"""

from __future__ import annotations

import json
import os
import pwd
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import Overloaded, TooljailError
from daemon.host.private_file import replace_json

LEDGER_NAME = "principal-uids.json"
"""The file in the state directory that says which principal has which uid."""
MAX_UID = 0xFFFF_FFFE
"""The highest uid there is: (uid_t)-1 means "no change" to the kernel."""
_VERSION = 1
_SUBORDINATE_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))


class LedgerError(TooljailError):
    """The uid ledger or the range it is kept for cannot be used; the daemon does not start."""


@dataclass(frozen=True)
class UidRange:
    """The uids principals' sandboxes may be given: `count` of them from `first`."""

    first: int
    count: int

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def overlaps(self, first: int, last: int) -> bool:
        return first <= self.last and self.first <= last

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


def check_range(
    uids: UidRange,
    *,
    min_uid: int,
    accounts: Iterable[tuple[str, int]],
    subordinate: Iterable[tuple[str, int, int]],
    daemon_uid: int,
) -> None:
    """Refuse (LedgerError, naming the setting) a range that reaches below the floor or past the
    last uid, or holds an account, a subordinate range or the daemon's own uid."""
    where = f"sandbox.principal_uid_first/_count give uids {uids}"
    if uids.count < 1 or uids.first < min_uid or uids.last > MAX_UID:
        raise LedgerError(f"{where}: they must lie between sandbox.min_uid={min_uid} and {MAX_UID}")
    if daemon_uid in uids:
        raise LedgerError(f"{where}, which hold the daemon's own uid {daemon_uid}")
    for name, uid in accounts:
        if uid in uids:
            raise LedgerError(
                f"{where}, which hold the account {name!r} (uid {uid}): a sandbox would run as "
                "it; choose a range no account of this machine uses"
            )
    for owner, first, count in subordinate:
        if count > 0 and uids.overlaps(first, first + count - 1):
            raise LedgerError(
                f"{where}, which overlap the subordinate ids {first}-{first + count - 1} of "
                f"{owner!r} (/etc/subuid, /etc/subgid): a sandbox could share a uid with that "
                "user's containers; choose a range apart from them"
            )


def machine_accounts() -> Iterator[tuple[str, int]]:
    """The accounts this machine knows, by name and uid."""
    for entry in pwd.getpwall():
        yield entry.pw_name, entry.pw_uid


def subordinate_ranges(
    files: Iterable[Path] = _SUBORDINATE_FILES,
) -> Iterator[tuple[str, int, int]]:
    """The subordinate id ranges (`name:first:count` lines) of /etc/subuid and /etc/subgid."""
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        for line in text.splitlines():
            fields = line.strip().split(":")
            if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                yield fields[0], int(fields[1]), int(fields[2])


def open_ledger(ledger: Path, uids: UidRange, *, min_uid: int) -> PrincipalUids:
    """The principals' uids kept in `ledger`, once `uids` is checked against this machine."""
    check_range(
        uids,
        min_uid=min_uid,
        accounts=machine_accounts(),
        subordinate=subordinate_ranges(),
        daemon_uid=os.geteuid(),
    )
    return PrincipalUids(ledger, uids)


class PrincipalUids:
    """Which principal has which uid, given once and for good from the range."""

    def __init__(self, ledger: Path, uids: UidRange) -> None:
        self._ledger = ledger
        self._range = uids
        self._given = _load(ledger, uids)
        self._next = max(self._given.values(), default=uids.first - 1) + 1

    @property
    def range(self) -> UidRange:
        return self._range

    def given(self, principal: str) -> int | None:
        """The principal's uid, if it has one already."""
        return self._given.get(principal)

    def uid_of(self, principal: str) -> int:
        """The principal's uid, given now (and written down first) when it has none; Overloaded
        when the range has none left."""
        uid = self._given.get(principal)
        if uid is not None:
            return uid
        if self._next > self._range.last:
            raise Overloaded(
                f"every uid of sandbox.principal_uid_first/_count ({self._range}) belongs to a "
                "principal already, so this one's sandboxes have none of their own; the "
                "operator must widen the range"
            )
        given = {**self._given, principal: self._next}
        try:
            self._ledger.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            replace_json(self._ledger, {"version": _VERSION, "uids": given})
        except OSError as exc:
            raise Overloaded(
                f"the daemon could not write down a uid for this principal's sandboxes in "
                f"{self._ledger} ({exc.strerror}); nothing ran, retry later"
            ) from exc
        # Only once it is on disk: a daemon restarted after a failed write gives it again.
        self._given = given
        self._next += 1
        return given[principal]


def _load(ledger: Path, uids: UidRange) -> dict[str, int]:
    """The ledger's principals and uids; LedgerError for anything the daemon did not write."""
    try:
        fd = os.open(ledger, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LedgerError(_unreadable(ledger, exc.strerror or str(exc))) from exc
    with os.fdopen(fd, "rb") as stream:
        info = os.fstat(stream.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise LedgerError(_unreadable(ledger, "not a regular file of the daemon's user"))
        if stat.S_IMODE(info.st_mode) & 0o022:
            raise LedgerError(_unreadable(ledger, "others may write it"))
        try:
            found = json.loads(stream.read())
        except (UnicodeDecodeError, ValueError) as exc:
            raise LedgerError(_unreadable(ledger, f"not JSON: {exc}")) from exc
    given = found.get("uids") if isinstance(found, dict) else None
    if (
        not isinstance(found, dict)
        or found.get("version") != _VERSION
        or not isinstance(given, dict)
        or not all(type(uid) is int for uid in given.values())
    ):
        raise LedgerError(_unreadable(ledger, "not what the daemon writes"))
    if len(set(given.values())) != len(given):
        raise LedgerError(_unreadable(ledger, "it gives one uid to two principals"))
    outside = sorted(uid for uid in given.values() if uid not in uids)
    if outside:
        raise LedgerError(
            f"{ledger} gives principals uids outside sandbox.principal_uid_first/_count "
            f"({uids}), e.g. {outside[0]}: the range was changed after they were given. Put the "
            "range back, or remove the file and the workspaces of closed sessions kept (their "
            "files carry those uids) to give uids afresh"
        )
    return given


def _unreadable(ledger: Path, why: str) -> str:
    return (
        f"cannot use {ledger}, the record of which principal's sandboxes run as which uid ({why}). "
        "The daemon alone writes it: restore it from a backup, or remove it and the workspaces "
        "of closed sessions kept (their files carry the uids it gave) to give uids afresh"
    )
