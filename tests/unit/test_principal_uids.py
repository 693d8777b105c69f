"""Each principal's own sandbox uid: given once from the operator's range, kept for good, never
given twice; a range or a record that could make two tenants (or a tenant and an account of the
machine) share a uid stops the daemon (no Docker)."""

from __future__ import annotations

import json
import os
import pwd
import struct
from pathlib import Path

import pytest

from daemon.errors import Overloaded, RequestError
from daemon.host.pinned import PinnedDirectory
from daemon.sessions.principal_uids import (
    LedgerError,
    PrincipalUids,
    UidRange,
    check_range,
    open_ledger,
    subordinate_ranges,
)
from daemon.sessions.store import SessionStore
from daemon.sessions.workspaces import IdentityRule, make_workspace

FIRST = 2_000_000_000
SANDBOX_USER = "tooljail-sandbox"


def _ledger(tmp_path: Path) -> Path:
    return tmp_path / "state" / "principal-uids.json"


def test_each_principal_gets_a_uid_of_its_own_and_keeps_it(tmp_path: Path) -> None:
    uids = PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10))
    alice, bob = uids.uid_of("alice"), uids.uid_of("bob")
    assert (alice, bob) == (FIRST, FIRST + 1)
    assert uids.uid_of("alice") == alice
    # A restarted daemon reads them back: nobody's uid changes, and the next is a new one.
    again = PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10))
    assert (again.uid_of("bob"), again.uid_of("alice")) == (bob, alice)
    assert again.uid_of("carol") == FIRST + 2
    written = json.loads(_ledger(tmp_path).read_text())
    assert written["uids"] == {"alice": FIRST, "bob": FIRST + 1, "carol": FIRST + 2}
    assert _ledger(tmp_path).stat().st_mode & 0o077 == 0


def test_principals_that_differ_only_in_form_are_different_principals(tmp_path: Path) -> None:
    uids = PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10))
    names = ["alice", "Alice", "alice ", "al\u0131ce", "token:alice"]
    assert len({uids.uid_of(name) for name in names}) == len(names)


def test_a_full_range_refuses_new_principals_and_keeps_serving_known_ones(tmp_path: Path) -> None:
    uids = PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 2))
    uids.uid_of("a")
    uids.uid_of("b")
    with pytest.raises(Overloaded, match="widen the range"):
        uids.uid_of("c")
    assert uids.uid_of("a") == FIRST
    assert "c" not in json.loads(_ledger(tmp_path).read_text())["uids"]


def test_a_uid_that_could_not_be_written_down_is_not_given(tmp_path: Path) -> None:
    uids = PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10))
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    with pytest.raises(Overloaded, match="could not write down"):
        uids.uid_of("alice")
    blocker.unlink()
    assert uids.uid_of("bob") == FIRST  # the failed one took nothing
    assert uids.uid_of("alice") == FIRST + 1


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("{not json", "not JSON"),
        ('{"version": 1, "uids": []}', "not what the daemon writes"),
        ('{"version": 2, "uids": {}}', "not what the daemon writes"),
        ('{"version": 1, "uids": {"a": "2000000000"}}', "not what the daemon writes"),
        ('{"version": 1, "uids": {"a": true}}', "not what the daemon writes"),
        ('{"version": 1, "uids": {"a": 2000000000, "b": 2000000000}}', "two principals"),
        ('{"version": 1, "uids": {"a": 1001}}', "outside"),
        ('{"version": 1, "uids": {"a": 2000000010}}', "outside"),
    ],
)
def test_a_record_the_daemon_did_not_write_stops_it(tmp_path: Path, content: str, why: str) -> None:
    ledger = _ledger(tmp_path)
    ledger.parent.mkdir()
    ledger.write_text(content)
    ledger.chmod(0o600)
    with pytest.raises(LedgerError, match=why):
        PrincipalUids(ledger, UidRange(FIRST, 10))


def test_a_record_others_could_write_or_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.parent.mkdir()
    ledger.write_text('{"version": 1, "uids": {}}')
    ledger.chmod(0o666)
    with pytest.raises(LedgerError, match="others may write it"):
        PrincipalUids(ledger, UidRange(FIRST, 10))
    ledger.chmod(0o600)
    ledger.rename(tmp_path / "elsewhere.json")
    ledger.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(LedgerError, match="cannot use"):
        PrincipalUids(ledger, UidRange(FIRST, 10))


def _check(uids: UidRange, **overrides: object) -> None:
    arguments: dict[str, object] = {
        "min_uid": 1000,
        "accounts": [("root", 0), ("tooljail-sandbox", 1001)],
        "subordinate": [("alice", 100_000, 65_536)],
        "daemon_uid": 0,
    }
    arguments.update(overrides)
    check_range(uids, **arguments)  # type: ignore[arg-type]


def test_a_range_that_could_share_a_uid_with_anything_else_is_refused() -> None:
    _check(UidRange(FIRST, 1_000_000))  # apart from everything: fine
    refusals = {
        "below the floor": (UidRange(500, 10), {}),
        "past the last uid": (UidRange(0xFFFF_FFF0, 100), {}),
        "the sandbox account": (UidRange(1000, 10), {}),
        "an account": (UidRange(FIRST, 10), {"accounts": [("nobody-else", FIRST + 9)]}),
        "a subordinate range": (UidRange(150_000, 10), {}),
        "a subordinate range's end": (UidRange(165_535, 10), {}),
        "the daemon": (UidRange(FIRST, 10), {"daemon_uid": FIRST + 3}),
    }
    for case, (uids, overrides) in refusals.items():
        with pytest.raises(LedgerError):
            _check(uids, **overrides)
            pytest.fail(f"not refused: {case}")
    _check(UidRange(165_536, 10))  # right after the subordinate range


def test_subordinate_ranges_are_read_from_both_files(tmp_path: Path) -> None:
    subuid, subgid = tmp_path / "subuid", tmp_path / "subgid"
    subuid.write_text("alice:100000:65536\n# a comment\nbroken line\n")
    subgid.write_text("bob:300000:10\n")
    found = list(subordinate_ranges([subuid, subgid, tmp_path / "missing"]))
    assert found == [("alice", 100_000, 65_536), ("bob", 300_000, 10)]


def test_this_machines_accounts_are_checked_at_open(tmp_path: Path) -> None:
    account = pwd.getpwall()[-1]
    with pytest.raises(LedgerError, match=f"the account {account.pw_name!r}"):
        open_ledger(_ledger(tmp_path), UidRange(account.pw_uid, 1), min_uid=0)
    with pytest.raises(LedgerError, match="the daemon's own uid"):
        check_range(
            UidRange(os.geteuid(), 1),
            min_uid=0,
            accounts=[],
            subordinate=[],
            daemon_uid=os.geteuid(),
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand folders to other uids")
def test_fresh_workspaces_of_two_principals_run_as_two_uids_that_can_write_them(
    tmp_path: Path,
) -> None:
    try:
        gid = pwd.getpwnam(SANDBOX_USER).pw_gid
    except KeyError:
        pytest.skip(f"the account {SANDBOX_USER} is missing (make setup creates it)")
    uids = PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10))
    rule = IdentityRule(user=SANDBOX_USER, min_uid=1000, run_as_owner=True, principal_uids=uids)
    store = SessionStore(tmp_path / "default", tmp_path / "sessions", rule)
    made = {}
    for principal in ("alice", "bob"):
        folder = tmp_path / "sessions" / f"ws_{principal}"
        make_workspace(folder, store.fresh_owner(principal))
        session = store.open(
            PinnedDirectory.pin(folder), None, owner=principal, owns_workspace=True
        )
        made[principal] = session.sandbox_as
        info = folder.stat()
        assert (info.st_uid, info.st_gid) == session.sandbox_as
        assert info.st_mode & 0o200
    assert made == {"alice": (FIRST, gid), "bob": (FIRST + 1, gid)}


def _root_rule(tmp_path: Path) -> IdentityRule:
    if os.geteuid() != 0:
        pytest.skip("needs root to hand folders to other uids")
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        pytest.skip(f"the account {SANDBOX_USER} is missing (make setup creates it)")
    return IdentityRule(
        user=SANDBOX_USER,
        min_uid=1000,
        run_as_owner=True,
        principal_uids=PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10)),
    )


def test_default_sessions_run_as_their_principals_uids_sharing_the_workspace_by_group(
    tmp_path: Path,
) -> None:
    """Attacker round 109: every default session ran as the sandbox account, so one tenant's
    default session could still hold its per-user limits (inotify, message queues, pipe pages)
    from every other's."""
    rule = _root_rule(tmp_path)
    uid, gid = rule.dedicated()
    store = SessionStore(tmp_path / "default", None, rule)
    made = (tmp_path / "default").stat()
    assert (made.st_uid, made.st_gid, made.st_mode & 0o7777) == (uid, gid, 0o1770)
    alice, bob = store.default_for("alice"), store.default_for("bob")
    assert (alice.sandbox_as, bob.sandbox_as) == ((FIRST, gid), (FIRST + 1, gid))
    assert alice.group_shared and bob.group_shared
    assert store.default_for("alice") is alice


def test_a_default_workspace_the_group_cannot_write_stops_the_daemon(tmp_path: Path) -> None:
    rule = _root_rule(tmp_path)
    folder = tmp_path / "default"
    folder.mkdir(mode=0o755)
    os.chown(folder, *rule.dedicated())  # as an older version made it
    with pytest.raises(RequestError, match=r"chmod -R g\+w"):
        SessionStore(folder, None, rule)
    folder.chmod(0o775)
    reopened = SessionStore(folder, None, rule).default_for("alice")
    assert reopened.sandbox_as == (FIRST, rule.dedicated()[1])


def test_a_regular_users_default_workspace_still_runs_as_that_user(tmp_path: Path) -> None:
    rule = _root_rule(tmp_path)
    folder = tmp_path / "default"
    folder.mkdir(mode=0o755)
    os.chown(folder, 1000, 1000)
    session = SessionStore(folder, None, rule).default_for("alice")
    assert session.sandbox_as == (1000, 1000) and not session.group_shared


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand folders to other uids")
def test_a_fresh_workspace_its_sandboxes_could_not_write_is_refused(tmp_path: Path) -> None:
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        pytest.skip(f"the account {SANDBOX_USER} is missing (make setup creates it)")
    rule = IdentityRule(
        user=SANDBOX_USER,
        min_uid=1000,
        run_as_owner=True,
        principal_uids=PrincipalUids(_ledger(tmp_path), UidRange(FIRST, 10)),
    )
    store = SessionStore(tmp_path / "default", tmp_path / "sessions", rule)
    folder = tmp_path / "sessions" / "ws_root"
    folder.mkdir(mode=0o755)  # root's, as a daemon that could not hand it over leaves it
    with pytest.raises(RequestError, match="cannot write"):
        store.open(PinnedDirectory.pin(folder), None, owner="alice", owns_workspace=True)


def test_a_folder_of_a_principals_uid_is_that_principals_alone(tmp_path: Path) -> None:
    """Attacker round 110: a session over a folder one tenant's sandbox made (owned by its uid,
    which counts as a regular user's) ran as that tenant's uid, whoever opened it."""
    rule = _root_rule(tmp_path)
    assert rule.principal_uids is not None
    alice = rule.principal_uids.uid_of("alice")
    rule.principal_uids.uid_of("bob")
    folder = tmp_path / "hers"
    folder.mkdir(mode=0o755)
    os.chown(folder, alice, rule.dedicated()[1])
    pinned = PinnedDirectory.pin(folder)
    try:
        assert rule.for_workspace(pinned, "alice") == (alice, rule.dedicated()[1])
        for other in ("bob", "carol", None):
            with pytest.raises(RequestError, match="another principal's sandboxes"):
                rule.for_workspace(pinned, other)
        assert rule.principal_uids.given("carol") is None  # asking gave nobody a uid
    finally:
        pinned.close()


def test_who_on_the_host_could_change_a_workspace_is_looked_at_for_each_container(
    tmp_path: Path,
) -> None:
    """A local account that can rename the workspace or a folder above it can swap it for a
    link while a container is made, which no freezing of sandboxes stops. Attacker round 125: a
    folder of the sandbox account's inside a user's project got a root runner, and the user's
    swap ran their code as the container's root; round 126: with no root, as the sandbox
    account; round 126 again: a tenant made its own fresh workspace 0777 after the session
    was opened, when the only look was made. Fresh and default workspaces, which only root
    and the daemon's identities can change, have no such account."""
    rule = _root_rule(tmp_path)
    store = SessionStore(tmp_path / "default", tmp_path / "sessions", rule)
    own = tmp_path / "alice-project"
    own.mkdir()
    os.chown(own, 1000, 1000)
    session = store.open(PinnedDirectory.pin(own), None, owner="alice")
    assert session.sandbox_as == (1000, 1000)
    assert session.host_changers().changers == {1000}
    inside = own / "shared"
    inside.mkdir()
    os.chown(inside, *rule.dedicated())
    session = store.open(PinnedDirectory.pin(inside), None, owner="bob")
    assert session.sandbox_as == rule.dedicated()
    assert session.host_changers().changers == {1000}
    folder = tmp_path / "sessions" / "ws_alice"
    make_workspace(folder, store.fresh_owner("alice"))
    fresh = store.open(PinnedDirectory.pin(folder), None, owner="alice", owns_workspace=True)
    assert fresh.host_changers().changers == frozenset()
    folder.chmod(0o777)
    assert fresh.host_changers().changers is None
    assert store.default_for("bob").host_changers().changers == frozenset()


def test_a_folder_inside_the_workspace_on_the_way_to_a_pin_counts_too(tmp_path: Path) -> None:
    """Attacker round 127: a tenant made a folder holding a submodule world-writable inside
    its fresh workspace; a local user swapped the submodule for a link while a container was
    made, and the root runner's start was his (a root setuid shell on the host)."""
    rule = _root_rule(tmp_path)
    store = SessionStore(tmp_path / "default", tmp_path / "sessions", rule)
    folder = tmp_path / "sessions" / "ws_bob"
    make_workspace(folder, store.fresh_owner("bob"))
    fresh = store.open(PinnedDirectory.pin(folder), None, owner="bob", owns_workspace=True)
    pin = folder / "sub" / "m" / ".git"
    pin.mkdir(parents=True)
    for made in (folder / "sub", folder / "sub" / "m", pin):
        os.chown(made, *fresh.sandbox_as)
    assert fresh.host_changers([str(pin)]).changers == frozenset()
    judged = {Path(f.path): f.mode for f in fresh.host_changers([str(pin)]).way}
    assert {folder, folder / "sub", folder / "sub" / "m", pin} <= judged.keys()
    assert folder.parent in judged  # and every folder above
    (folder / "sub").chmod(0o777)
    assert fresh.host_changers([str(pin)]).changers is None
    assert fresh.host_changers([]).changers == frozenset()  # the workspace and above: as before


def test_only_the_principals_own_uids_are_the_models_not_the_sandbox_accounts(
    tmp_path: Path,
) -> None:
    """Attacker round 130: the sandbox account owns the default workspace, and an operator may
    make a repository there as that account; counted as the model's, it was neither held nor
    refused, and the model wrote its hooks. Only the principals' uids, which no person has,
    tell the model's own making."""
    rule = _root_rule(tmp_path)
    assert rule.made_by_sandboxes(FIRST + 3)
    assert not rule.made_by_sandboxes(rule.dedicated()[0])
    assert not rule.made_by_sandboxes(0)


def _grant_write(folder: Path, tag: int, who: int) -> None:
    """A POSIX access ACL giving `who` (a user: tag 2; a group: tag 8) write on `folder`, as
    `setfacl -m u:who:rwx` writes it (the group bits of its mode then show the mask)."""
    entries = [(1, 7, 0xFFFFFFFF), (tag, 7, who), (4, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF)]
    entries.append((0x20, 5, 0xFFFFFFFF))
    raw = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in sorted(entries))
    os.setxattr(folder, "system.posix_acl_access", raw)


def test_an_acl_giving_a_host_account_write_on_the_way_counts(tmp_path: Path) -> None:
    """Round 126's lead: an account an ACL lets write a folder above the workspace (root's, mode
    0775 in the group bits, which then show the ACL's mask) could rename it, and was not
    counted: its mode names no one but root."""
    rule = _root_rule(tmp_path)
    store = SessionStore(tmp_path / "default", tmp_path / "sessions", rule)
    above = tmp_path / "team"
    (above / "project").mkdir(parents=True)
    os.chown(above / "project", 1000, 1000)
    session = store.open(PinnedDirectory.pin(above / "project"), None, owner="alice")
    assert session.host_changers().changers == {1000}
    _grant_write(above, 2, 1500)
    assert above.stat().st_mode & 0o777 == 0o775
    assert session.host_changers().changers == {1000, 1500}
    assert any(folder.acl for folder in session.host_changers().way)
    _grant_write(above, 8, 1500)
    assert session.host_changers().changers is None  # a group's members: anyone might
