"""Isolation against an attacker, tried as one would against a running daemon (real Docker, real
kernel): host privilege planted through the sandbox, the sandbox's identity, workspaces swapped
or nested under a session, answers forged from inside, Grep led outside by a tree that changes
while it walks, and a disk filled from a sandbox. Nothing outside a workspace may be read or
changed, no file may carry setuid/setgid bits or be a device, and every refusal says why."""

from __future__ import annotations

import json
import os
import shlex
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.errors import TooljailError
from tests.integration.harness import RunningDaemon, running_daemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.support import (
    OWNER_GID,
    OWNER_UID,
    bash,
    execute,
    open_session,
    owned_workspace,
    policy_with,
    scaled,
    text_of,
    unique,
)
from tests.reliability.swaps import Flipper, exchange, symlink

pytestmark = [pytest.mark.integration, pytest.mark.docker]

MARKER = "OUTSIDE-SECRET-7f1c"
"""Lives only outside every workspace: seeing it in any answer is an escape."""
FLOOR = 1000
"""The lowest uid a sandbox may run as (sandbox.min_uid)."""


@pytest.fixture(scope="module")
def iso_root(rel_tmp: Path) -> Path:
    folder = rel_tmp / "isolation"
    folder.mkdir()
    return folder


@pytest.fixture(scope="module")
def outside(iso_root: Path) -> Path:
    """A folder outside every workspace, holding the marker, writable by the workspace owner."""
    folder = owned_workspace(iso_root / "outside")
    (folder / "secret.txt").write_text(f"{MARKER}\n")
    os.chown(folder / "secret.txt", OWNER_UID, OWNER_GID)
    return folder


@pytest.fixture(scope="module")
def iso_daemon(iso_root: Path, docker_ready: None) -> Iterator[RunningDaemon]:
    """A sandbox daemon, run by root, that made its own default workspace (as under `make run`)
    and may open sessions over directories below iso_root/roots."""
    workspace = iso_root / "made-by-the-daemon"
    with running_daemon(
        workspace,
        iso_root / f"{unique('iso')}.sock",
        sandbox={"pool_size": 0, "ceilings": {"memory_mb": 256, "pids": 128}},
        opa={"policies_dir": policy_with(iso_root)},
        workspaces={"budget_mb": 64},
    ) as daemon:
        yield daemon


def privileged_files(root: Path) -> list[str]:
    """Files below `root` (from the host's point of view) with setuid/setgid bits or that are
    devices: what a local user could abuse."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            info = os.lstat(os.path.join(dirpath, name))
            if info.st_mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISDIR(info.st_mode):
                found.append(f"{name}: mode {oct(info.st_mode)} uid {info.st_uid}")
            if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
                found.append(f"{name}: device {oct(info.st_mode)}")
    return found


# Every way a program can leave a setuid/setgid file or a device node behind.
_I386_CHMOD = (
    "import ctypes, mmap\n"
    "m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40,"
    " prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
    "base = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
    "assert base < 2**32\n"
    "m[256:256 + 8] = b'i386-s\\x00\\x00'\n"
    "code = b'\\x53\\xb8\\x0f\\x00\\x00\\x00\\xbb' + (base + 256).to_bytes(4, 'little')"
    " + b'\\xb9\\xed\\x09\\x00\\x00\\xcd\\x80\\x5b\\xc3'\n"
    "m[0:len(code)] = code\n"
    "print('i386 chmod:', ctypes.CFUNCTYPE(ctypes.c_int)(base)())\n"
)


def _python_file(name: str, code: str) -> str:
    """`code` written to a file and run from it: the policy asks about inline code that
    writes files or calls the C library, and a route it asks about tests nothing."""
    return f"printf '%s' {shlex.quote(code)} > {name}.py && python3 {name}.py"


#: Copies of `ls`: a shell copied under another name asks (attacker round 193), and a route the
#: policy asks about tests nothing.
SETUID_ROUTES = {
    "chmod u+s": "cp /bin/ls s-chmod && chmod 4755 s-chmod",
    "chmod g+s": "cp /bin/ls s-chmod-g && chmod g+s s-chmod-g",
    "fchmod": _python_file(
        "fchmod",
        "import os; f=os.open('s-fchmod', os.O_CREAT|os.O_WRONLY, 0o755); os.fchmod(f, 0o4755)",
    ),
    "fchmodat": _python_file(
        "fchmodat", "import os; open('s-fchmodat','w').close(); os.chmod('s-fchmodat', 0o2755)"
    ),
    "open(O_CREAT, mode)": _python_file(
        "opencreat", "import os; os.close(os.open('s-open', os.O_CREAT|os.O_WRONLY, 0o6755))"
    ),
    "mknod regular": _python_file("mknodreg", "import os; os.mknod('s-mknod', 0o104755)"),
    "mknod device": _python_file(
        "mknoddev", "import os; os.mknod('d-null', 0o020666, os.makedev(1, 3))"
    ),
    "cp -p": "cp -p /usr/bin/passwd s-cp-p",
    # Extracted from the script: the policy asks about a tar line that extracts files.
    "tar -p": _python_file(
        "tarp",
        "import io, subprocess, tarfile; t=tarfile.open('t.tar','w'); i=tarfile.TarInfo("
        "'s-tar'); i.mode=0o4755; t.addfile(i, io.BytesIO(b'')); t.close(); "
        "subprocess.run(['tar', '-xpf', 't.tar'])",
    ),
    "install -m": "install -m 4755 /bin/ls s-install",
    "i386 int 0x80": f'printf "%s" "{_I386_CHMOD}" > i386.py && touch i386-s && python3 i386.py',
    "io_uring": _python_file(
        "iouring",
        "import ctypes; b=ctypes.create_string_buffer(120); "
        "print('io_uring', ctypes.CDLL(None).syscall(425, 8, b))",
    ),
    # renameat2(RENAME_WHITEOUT) leaves a 0:0 character device where the source was.
    "renameat2 whiteout": "echo x > w-src && "
    + _python_file(
        "whiteout",
        "import ctypes; ctypes.CDLL(None).syscall(316, -100, b'w-src', -100, b'w-dst', 4)",
    ),
}


def _every_route_in_both_sessions(
    daemon: RunningDaemon, owned: Path, routes: dict[str, str]
) -> tuple[list[pb.Session], int]:
    """Each route run in a fresh session and in one of a workspace its owner gives: the two
    sessions, and how many runs there were."""
    sessions = [open_session(daemon), open_session(daemon, str(owned))]
    for session in sessions:
        for route, command in routes.items():
            answer = bash(daemon, command, session.id)
            # A route the policy asks about never reaches the kernel's defences.
            assert answer.decision.outcome == pb.ALLOW, (route, text_of(answer))
    return sessions, len(sessions) * len(routes)


def test_no_setuid_file_or_device_reaches_the_host_by_any_route(
    iso_daemon: RunningDaemon, iso_root: Path, record: Record
) -> None:
    owned = owned_workspace(iso_root / "roots" / "setuid-owned")
    sessions, attempts = _every_route_in_both_sessions(iso_daemon, owned, SETUID_ROUTES)
    for session in sessions:
        io_uring = text_of(bash(iso_daemon, SETUID_ROUTES["io_uring"], session.id))
        assert "io_uring -1" in io_uring, f"io_uring can be set up in the sandbox: {io_uring}"
    planted = privileged_files(Path(sessions[0].workspace)) + privileged_files(owned)
    record("setuid/setgid/device planting, every route", attempts, attempts - len(planted))
    assert planted == []


def world_writable(root: Path) -> list[str]:
    """Files and folders at or below `root` (links aside) that every local user may write, by
    their mode or by an access list (the kernel reads the list's `other` entry into the mode)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        for path in [dirpath, *(os.path.join(dirpath, n) for n in (*dirnames, *filenames))]:
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and info.st_mode & stat.S_IWOTH:
                found.append(f"{os.path.relpath(path, root)}: mode {oct(info.st_mode)}")
    return sorted(set(found))


# Every way found to make the workspace, or what is already in it, writable by every user
# (attacker rounds 183 to 188), each run from a file the policy does not read: the kernel refuses
# them whatever the spelling. (A umask is the command's own: what it makes under `umask 0` is.)
OPENING_ROUTES = {
    "chmod 777 .": "printf 'chmod 777 . f; chmod o+w .' > o.sh && touch f && bash o.sh",
    "chmod(2)": _python_file("chm", "import os; open('g','w').close(); os.chmod('g', 0o666)"),
    "fchmod": _python_file("fchm", "import os; os.fchmod(os.open('.', os.O_RDONLY), 0o777)"),
    "access list": _python_file(
        "acl",
        "import os, struct; e = struct.pack('<IHHIHHIHHIHHI', 2, 1, 7, 0xFFFFFFFF, 4, 7, "
        "0xFFFFFFFF, 0x10, 7, 0xFFFFFFFF, 0x20, 7, 0xFFFFFFFF)\n"
        "for name in ('system.posix_acl_access', 'system.posix_acl_default'):\n"
        "  try: os.setxattr('.', name, e)\n  except OSError as x: print(name, x)",
    ),
    "cp -a of an open folder": "printf 'cp -a /tmp/. .; cp -a /tmp ct' > c.sh && bash c.sh",
    "git init --shared=0777": "printf 'git init -q --shared=0777 gs' > g.sh && bash g.sh",
    # A new folder install makes is made under the umask install sets itself (0): a name
    # made open, as `mkdir -m 777 new` may; the folder already there is what it may not open.
    "install -d -m 0777": "printf 'install -d -m 0777 .' > i.sh && bash i.sh",
}


def test_nothing_a_command_makes_or_changes_is_writable_by_every_user(
    iso_daemon: RunningDaemon, iso_root: Path, record: Record
) -> None:
    owned = owned_workspace(iso_root / "roots" / "opening-owned")
    sessions, attempts = _every_route_in_both_sessions(iso_daemon, owned, OPENING_ROUTES)
    opened = world_writable(Path(sessions[0].workspace)) + world_writable(owned)
    record("world-writable files and folders, every route", attempts, attempts - len(opened))
    assert opened == []


def test_the_sandbox_never_runs_as_root_or_below_the_floor(
    iso_daemon: RunningDaemon, iso_root: Path
) -> None:
    ids = "id -u; id -g; id -G"
    for session in ("", open_session(iso_daemon).id):
        answer = bash(iso_daemon, ids, session)
        assert not answer.result.is_error, text_of(answer)
        uid, gid, *groups = text_of(answer).split()
        assert int(uid) >= FLOOR and int(gid) != 0, text_of(answer)
        assert "0" not in groups
    root_owned = iso_root / "roots" / "root-owned"
    root_owned.mkdir(mode=0o755)
    with pytest.raises(grpc.RpcError) as refused:
        open_session(iso_daemon, str(root_owned))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "sandbox.user" in (refused.value.details() or "")
    # Nor is a daemon started over a workspace its sandboxes cannot use without root.
    with pytest.raises(TooljailError, match=r"sandbox\.user"):
        RunningDaemon(root_owned, iso_root / f"{unique('ro')}.sock", sandbox={"pool_size": 0})


def test_nested_and_overlapping_workspaces_are_refused(
    iso_daemon: RunningDaemon, iso_root: Path
) -> None:
    outer = owned_workspace(iso_root / "roots" / "outer")
    inner = owned_workspace(outer / "inner")
    first = open_session(iso_daemon, str(outer))
    fresh = open_session(iso_daemon)
    inside_fresh = Path(fresh.workspace) / "sub"
    bash(iso_daemon, f"mkdir -p {inside_fresh}", fresh.id)
    refusals = {
        str(inner): "overlap",
        str(outer): "overlap",
        # Refused before the disk is looked at: outside the roots, or a root itself.
        str(inside_fresh): "not inside the allowed workspace roots",
        str(iso_root / "roots"): "is a workspace root itself",
    }
    for candidate, why in refusals.items():
        with pytest.raises(grpc.RpcError) as refused:
            open_session(iso_daemon, candidate)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, candidate
        assert why in (refused.value.details() or ""), refused.value.details()
    iso_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=first.id), timeout=30)
    assert open_session(iso_daemon, str(inner)).workspace == str(inner)


def test_a_session_workspace_swapped_for_a_symlink_is_never_used(
    iso_daemon: RunningDaemon, iso_root: Path, outside: Path, record: Record, figure: Figure
) -> None:
    real = owned_workspace(iso_root / "roots" / "swapped")
    (real / "inside.txt").write_text("inside\n")
    session = open_session(iso_daemon, str(real))
    assert "inside" in text_of(bash(iso_daemon, "cat inside.txt", session.id))
    parked = iso_root / "roots" / "swapped-real"
    link = symlink(iso_root / "roots" / "swapped-link", outside)
    calls = scaled(30, 300)
    leaked = 0
    refused = 0
    with Flipper(real, link) as flipper:
        for i in range(calls):
            answer = bash(iso_daemon, f"cat secret.txt inside.txt; touch made-{i}", session.id)
            leaked += MARKER in text_of(answer)
            refused += answer.result.is_error and "workspace" in text_of(answer)
            read = execute(
                iso_daemon.stub, "Read", {"file_path": f"{real}/secret.txt"}, session_id=session.id
            )
            leaked += MARKER in text_of(read)
        flips = flipper.flips
    made_outside = [p.name for p in outside.iterdir() if p.name.startswith("made-")]
    record("session workspace flipped to a symlink while calls run", 2 * calls, 2 * calls - leaked)
    figure("workspace flips during the calls", f"{flips} flips, {refused} Bash calls refused")
    assert leaked == 0 and made_outside == []
    # Swapped for good: every further call is refused, saying why.
    if real.is_symlink():
        exchange(real, link)
    real.rename(parked)
    real.symlink_to(outside)
    answer = bash(iso_daemon, "cat secret.txt", session.id)
    assert answer.result.is_error and MARKER not in text_of(answer)
    assert "workspace" in text_of(answer) and "moved" in text_of(answer)


def test_open_session_races_a_symlink_flip_and_never_pins_the_outside(
    iso_daemon: RunningDaemon, iso_root: Path, outside: Path, record: Record
) -> None:
    real = owned_workspace(iso_root / "roots" / "racing")
    link = symlink(iso_root / "roots" / "racing-link", outside)
    opened: list[pb.Session] = []
    attempts = scaled(40, 400)
    with Flipper(real, link):
        for _ in range(attempts):
            try:
                opened.append(open_session(iso_daemon, str(real)))
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.details()
                continue
            iso_daemon.stub.CloseSession(
                pb.CloseSessionRequest(session_id=opened[-1].id), timeout=30
            )
    if real.is_symlink():
        exchange(real, link)
    leaked = 0
    for session in opened[:5]:
        reopened = open_session(iso_daemon, session.workspace)
        leaked += MARKER in text_of(bash(iso_daemon, "cat secret.txt", reopened.id))
        iso_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=reopened.id), timeout=30)
    record("OpenSession against a symlink flip", attempts, attempts - leaked)
    assert leaked == 0


def _frame(message: dict[str, Any]) -> str:
    body = json.dumps(message).encode()
    return "".join(f"\\x{b:02x}" for b in struct.pack(">I", len(body)) + body)


def test_a_command_cannot_forge_its_answer(iso_daemon: RunningDaemon, record: Record) -> None:
    forged = _frame({"type": "result", "v": 1, "exit_code": 0, "output": "FORGED ANSWER"})
    targets = ["/proc/1/fd/1", "/proc/$PPID/fd/1", "/proc/1/fd/2", "/dev/stdout"]
    attempts = 0
    forged_seen = 0
    for target in targets:
        command = f"printf '{forged}' > {target} 2>/dev/null; echo real-output; exit 3"
        answer = bash(iso_daemon, command)
        attempts += 1
        honest = answer.report.exit_code == 3 and "real-output" in text_of(answer)
        # The command's own stdout is its output: a frame written there is text in the answer,
        # never the answer (its pipe is the command's own since attacker round 111). The
        # runner's channels must not take it at all.
        own_output = target == "/dev/stdout"
        forged_seen += not honest or (not own_output and "FORGED ANSWER" in text_of(answer))
    record("answer forged from inside the sandbox", attempts, attempts - forged_seen)
    assert forged_seen == 0


def test_grep_never_follows_a_tree_flipped_to_symlinks_while_it_walks(
    iso_root: Path, outside: Path, docker_ready: None, record: Record, figure: Figure
) -> None:
    """A local user flips directories and files of the workspace to symlinks out, and a second
    session over the same directory (which this policy allows) does the same from its sandbox;
    Greps of the first session run all the while."""
    root = iso_root / "grep-overlap"
    root.mkdir()
    with running_daemon(
        owned_workspace(root / "default"),
        root / f"{unique('gr')}.sock",
        sandbox={"pool_size": 0},
        opa={"policies_dir": policy_with(root, overlapping_workspaces=True)},
        workspaces={"budget_mb": 64},
    ) as daemon:
        tree = owned_workspace(root / "roots" / "tree")
        for name in ("a", "b", "c"):
            owned_workspace(tree / name)
            (tree / name / "f.txt").write_text(f"{name} plain text\n")
        first = open_session(daemon, str(tree))
        second = open_session(daemon, str(tree))
        flipping = (
            f"cd {tree} && end=$((SECONDS+20)); while [ $SECONDS -lt $end ]; do "
            f"mv c c.real; ln -s {outside} c; mv c c.link; mv c.real c; "
            f"ln -sf {outside}/secret.txt a/f.link; rm -f a/f.link; done"
        )
        sandbox_flipper = threading.Thread(
            target=lambda: bash(daemon, flipping, second.id), daemon=True
        )
        sandbox_flipper.start()
        link = symlink(root / "roots" / "b-link", outside)
        leaked = searches = 0
        started = time.monotonic()
        with Flipper(tree / "b", link) as flipper:
            while time.monotonic() - started < 15:
                for mode in ("content", "files_with_matches"):
                    answer = execute(
                        daemon.stub,
                        "Grep",
                        {"pattern": "SECRET|plain", "path": str(tree), "output_mode": mode},
                        session_id=first.id,
                    )
                    searches += 1
                    leaked += MARKER in text_of(answer) or "secret.txt" in text_of(answer)
            flips = flipper.flips
        sandbox_flipper.join(60)
    record("Grep while the tree flips to symlinks out", searches, searches - leaked)
    figure("Grep against flips", f"{searches} searches, {flips} host flips")
    assert leaked == 0


def test_filling_the_disk_stops_at_the_session_budget(
    iso_daemon: RunningDaemon, iso_root: Path, record: Record
) -> None:
    fresh = open_session(iso_daemon)
    other = open_session(iso_daemon)
    # The host's free space moves with every other test running beside this one; the room the
    # workspaces take on the host is their image's, reserved up front: it must not grow.
    image = iso_daemon.settings.state_dir / "workspaces.img"
    reserved = image.stat().st_blocks
    answer = bash(iso_daemon, "dd if=/dev/zero of=big bs=1M count=200 2>&1", fresh.id)
    used = sum(f.stat().st_size for f in Path(fresh.workspace).glob("big*"))
    text = text_of(answer)
    held = answer.result.is_error and used <= 64 << 20 and "disk budget" in text
    record("disk filled from a sandbox", 1, int(held))
    assert held, text
    assert image.stat().st_blocks <= reserved
    still = bash(iso_daemon, "echo fine > ok.txt && cat ok.txt", other.id)
    assert "fine" in text_of(still) and not still.result.is_error


def test_grep_never_reads_ignore_files_or_git_redirections_outside(
    iso_daemon: RunningDaemon, iso_root: Path, outside: Path, record: Record
) -> None:
    """ripgrep reads .ignore, .gitignore and a .git file's `gitdir:` on its own; pointed outside
    (whose lines ripgrep would echo in its errors), they are refused by the kernel."""
    bad_lines = outside / "bad-globs"
    bad_lines.write_text(f"{MARKER}[\n{{{MARKER}\n")
    fake_git = owned_workspace(outside / "fake-git")
    owned_workspace(fake_git / "info")
    (fake_git / "info" / "exclude").write_text(f"{MARKER}[\n")
    tree = owned_workspace(iso_root / "roots" / "ignores")
    (tree / "found.txt").write_text("needle\n")
    symlink(tree / ".ignore", bad_lines)
    symlink(tree / ".rgignore", bad_lines)
    sub = owned_workspace(tree / "sub")
    (sub / ".git").write_text(f"gitdir: {fake_git}\n")
    symlink(sub / ".gitignore", bad_lines)
    (sub / "also.txt").write_text("needle\n")
    session = open_session(iso_daemon, str(tree))
    seen = []
    for mode in ("content", "files_with_matches", "count"):
        answer = execute(
            iso_daemon.stub,
            "Grep",
            {"pattern": "needle", "path": str(tree), "output_mode": mode},
            session_id=session.id,
        )
        seen.append(text_of(answer))
    leaked = sum(MARKER in text for text in seen)
    record("Grep and ignore files pointing outside", len(seen), len(seen) - leaked)
    assert leaked == 0, seen
    assert all("found.txt" in text or "needle" in text or ":" in text for text in seen)


SYSTEM_MARKERS = ("PRETTY_NAME", "ABSOLUTELY NO WARRANTY")
"""Lines of system files (/usr/lib/os-release, /usr/share/base-files/motd): outside every
workspace, though in the folders ripgrep's own program and libraries come from."""


def test_grep_never_reads_system_files_through_a_file_or_folder_flipped_to_them(
    iso_daemon: RunningDaemon, iso_root: Path, record: Record, figure: Figure
) -> None:
    """Grep of a file, and of a folder, flipped between the real thing and a symlink into /usr
    while ripgrep opens them: only the workspace may ever be read."""
    tree = owned_workspace(iso_root / "roots" / "system-flip")
    (tree / "f").write_text("decoy plain\n")
    owned_workspace(tree / "d" / "sub")
    (tree / "d" / "sub" / "g").write_text("plain\n")
    file_link = symlink(iso_root / "roots" / "system-flip-f", "/usr/lib/os-release")
    folder_link = symlink(iso_root / "roots" / "system-flip-d", "/usr/share/base-files")
    session = open_session(iso_daemon, str(tree))
    leaked = searches = 0
    with Flipper(tree / "f", file_link) as files, Flipper(tree / "d" / "sub", folder_link) as dirs:
        for _ in range(scaled(200, 2000)):
            for path in (tree / "f", tree / "d"):
                answer = execute(
                    iso_daemon.stub,
                    "Grep",
                    {
                        "pattern": "|".join((*SYSTEM_MARKERS, "plain")),
                        "path": str(path),
                        "output_mode": "content",
                    },
                    session_id=session.id,
                )
                searches += 1
                leaked += any(marker in text_of(answer) for marker in SYSTEM_MARKERS)
        flips = files.flips + dirs.flips
    record("Grep of a file or folder flipped into /usr", searches, searches - leaked)
    figure("Grep against flips into /usr", f"{searches} searches, {flips} flips")
    assert leaked == 0


NESTED_SUBVOLUME = (
    "python3 -c \"import fcntl, os, struct; fd = os.open('.', os.O_RDONLY); "
    "fcntl.ioctl(fd, 0x5000940e, bytearray(struct.pack('q4088s', 0, b'nested')), True)\""
)
"""BTRFS_IOC_SUBVOL_CREATE, which any user may call: a subvolume has a quota group of its own."""


def test_a_nested_subvolume_neither_escapes_the_budget_nor_blocks_deletion(
    iso_daemon: RunningDaemon, record: Record
) -> None:
    fresh = open_session(iso_daemon)
    # Nested subvolumes made by someone else (an operator, an older version) must not keep the
    # workspace from being deleted either.
    for nested in ("by-operator", "by-operator/deeper"):
        subprocess.run(
            ["btrfs", "subvolume", "create", f"{fresh.workspace}/{nested}"],
            check=True,
            capture_output=True,
        )
    answer = bash(
        iso_daemon,
        f"{NESTED_SUBVOLUME} 2>&1; mkdir -p nested && "
        "dd if=/dev/zero of=nested/big bs=1M count=200 2>&1",
        fresh.id,
    )
    big = Path(fresh.workspace) / "nested" / "big"
    used = big.stat().st_size if big.exists() else 0
    held = used <= 64 << 20 and "disk budget" in text_of(answer)
    record("disk budget against a nested subvolume", 1, int(held))
    assert held, (used, text_of(answer))
    closed = iso_daemon.stub.CloseSession(
        pb.CloseSessionRequest(session_id=fresh.id, delete_workspace=True), timeout=60
    )
    assert closed.workspace_deleted and not Path(fresh.workspace).exists()


def test_nested_subvolumes_listed_after_many_others_are_still_deleted_first(
    iso_daemon: RunningDaemon,
) -> None:
    """The filesystem's subvolumes are many once many workspaces are: the nested ones of the
    workspace being deleted are found however long the whole list is (it was read through a
    16 KiB cap, about 230 subvolumes, and btrfs then refused to delete the workspace)."""
    crowded, fresh = open_session(iso_daemon), open_session(iso_daemon)
    for number in range(400):
        subprocess.run(
            ["btrfs", "subvolume", "create", f"{crowded.workspace}/s{number:03d}"],
            check=True,
            capture_output=True,
        )
    subprocess.run(
        ["btrfs", "subvolume", "create", f"{fresh.workspace}/listed-last"],
        check=True,
        capture_output=True,
    )
    for session in (fresh, crowded):
        closed = iso_daemon.stub.CloseSession(
            pb.CloseSessionRequest(session_id=session.id, delete_workspace=True), timeout=300
        )
        assert closed.workspace_deleted, session.workspace
        assert not Path(session.workspace).exists()


def test_a_nested_subvolume_named_like_a_listing_line_deletes_nothing_of_anothers(
    iso_daemon: RunningDaemon,
) -> None:
    """Attacker round 181: a nested subvolume whose name held a newline and a forged line of
    `btrfs subvolume list` ("ID 1 ... path <workspace>/x/evil"), and a link there to another
    session's workspace: deleting the workspace deleted the other one through the link. Nested
    subvolumes are now found by id in the filesystem's own tree and deleted by id."""
    victim, fresh = open_session(iso_daemon), open_session(iso_daemon)
    workspace = Path(fresh.workspace)
    (workspace / "q").mkdir()  # what the first half of the name is listed as
    (workspace / "x").mkdir()
    (workspace / "x" / "evil").symlink_to(victim.workspace)
    # Listed as ".../q" and a line of its own: "ID 1 gen 1 top level 5 path <ws>/x/evil".
    forged = workspace / f"q\nID 1 gen 1 top level 5 path {workspace.name}" / "x" / "evil"
    forged.parent.mkdir(parents=True)
    subprocess.run(["btrfs", "subvolume", "create", str(forged)], check=True, capture_output=True)
    closed = iso_daemon.stub.CloseSession(
        pb.CloseSessionRequest(session_id=fresh.id, delete_workspace=True), timeout=120
    )
    assert Path(victim.workspace).is_dir(), "the other session's workspace was deleted"
    assert closed.workspace_deleted and not workspace.exists()
    assert "still-here" in text_of(bash(iso_daemon, "echo still-here", victim.id))


def test_no_other_local_user_can_pass_through_the_sessions_root(
    iso_daemon: RunningDaemon,
) -> None:
    """Attacker round 181: the sessions root let every local user pass (0711), so a workspace a
    command made world-writable took another user's subvolumes: unbudgeted room, and nested
    subvolumes steering the workspace's deletion. Only the daemon's user passes now; and no
    command can make a workspace world-writable any more (round 188: the kernel refuses it)."""
    fresh = open_session(iso_daemon)
    root = Path(fresh.workspace).parent
    assert stat.S_IMODE(root.stat().st_mode) & 0o077 == 0, oct(root.stat().st_mode)
    before = stat.S_IMODE(Path(fresh.workspace).stat().st_mode)
    tried = bash(iso_daemon, _python_file("open", "import os; os.chmod('.', 0o777)"), fresh.id)
    assert "PermissionError" in text_of(tried), text_of(tried)
    assert stat.S_IMODE(Path(fresh.workspace).stat().st_mode) == before
    # Opened all the same (by an older version, or its owner): the sessions root still holds.
    os.chmod(fresh.workspace, 0o777)
    looked = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "stat", fresh.workspace],
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
    )
    assert looked.returncode != 0 and "Permission denied" in looked.stderr, looked


def test_a_command_that_lowers_its_oom_score_cannot_starve_the_runner(
    iso_daemon: RunningDaemon, record: Record
) -> None:
    """Kernel memory a command can leave behind when it is killed (empty folders in /tmp) is
    bounded, so the runner always lives to answer, even when the command gave up its place as
    the OOM killer's first choice."""
    command = (
        'cat /proc/self/oom_score_adj; echo 0 > /proc/self/oom_score_adj; python3 -c "'
        "import os\nos.chdir('/tmp')\nn = 0\nwhile True:\n    os.mkdir('d%d' % n)\n    n += 1\""
    )
    answer = bash(iso_daemon, command)
    text = text_of(answer)
    answered = answer.report.exit_code == 1 and "No space left on device" in text
    record("runner starved of memory by its command", 1, int(answered))
    assert answered, text
    assert "1000" in text.splitlines(), f"not started as the OOM killer's first choice: {text}"
