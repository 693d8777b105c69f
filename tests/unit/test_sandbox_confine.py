"""The runner's own confinement, on this kernel (no Docker): a process that installed the filter
can no longer make setuid/setgid files or devices by any system call, nor reach around the filter
(32-bit calls, x32, io_uring, openat2), while ordinary file work goes on."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox.runner.confine import ConfinementError, build_filter, parse_identity

_ATTEMPTS = r"""
import ctypes, errno, json, os, sys
sys.path.insert(0, sys.argv[1])
from sandbox.runner.confine import install_filter
install_filter()
out = {}
def attempt(name, action):
    try:
        action()
        out[name] = "ok"
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]
open("plain", "w").close()
open("movable", "w").close()
attempt("chmod 0755", lambda: os.chmod("plain", 0o755))
attempt("chmod 4755", lambda: os.chmod("plain", 0o4755))
attempt("chmod 2755", lambda: os.chmod("plain", 0o2755))
fd = os.open("other", os.O_CREAT | os.O_WRONLY, 0o644)
attempt("fchmod 4755", lambda: os.fchmod(fd, 0o4755))
attempt("open 6755", lambda: os.close(os.open("made", os.O_CREAT | os.O_WRONLY, 0o6755)))
attempt("mknod regular", lambda: os.mknod("regular", 0o100644))
attempt("mknod setuid", lambda: os.mknod("setuid", 0o104755))
attempt("mknod char", lambda: os.mknod("char", 0o020666, os.makedev(1, 3)))
attempt("mknod block", lambda: os.mknod("block", 0o060666, os.makedev(7, 0)))
attempt("mkfifo", lambda: os.mkfifo("fifo"))
attempt("mkdir", lambda: os.mkdir("dir"))
# Nothing made or changed writable by every user (attacker rounds 183 to 188).
open("shared", "w").close()
attempt("chmod 0777", lambda: os.chmod("shared", 0o777))
attempt("chmod 0666", lambda: os.chmod("shared", 0o666))
attempt("chmod 0775", lambda: os.chmod("shared", 0o775))
attempt("chmod folder 1777", lambda: os.chmod("dir", 0o1777))
attempt("fchmod 0757", lambda: os.fchmod(fd, 0o757))
attempt("fchmodat 0777", lambda: os.chmod("shared", 0o777, dir_fd=os.open(".", os.O_RDONLY)))
# umask is left alone: programs read it with umask(0) and put back what that returned.
attempt("umask 0", lambda: os.umask(0))
out["umask read back"] = os.umask(0o022)
attempt("setxattr acl", lambda: os.setxattr("shared", "system.posix_acl_access", bytes(28)))
attempt("setxattr default acl", lambda: os.setxattr("dir", "system.posix_acl_default", bytes(4)))
attempt("setxattr user", lambda: os.setxattr("shared", "user.x", b"1"))
attempt("fsetxattr", lambda: os.setxattr(fd, "system.posix_acl_access", bytes(4)))
attempt("lsetxattr", lambda: os.setxattr("shared", "user.x", b"1", follow_symlinks=False))
attempt("getxattr", lambda: os.listxattr("shared"))
import socket
attempt("netlink usersock", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 2).close())
attempt("netlink route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 0).close())
attempt("unix socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).close())
attempt("inet socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
default_rcvbuf = probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
attempt("set rcvbuf", lambda: probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20))
attempt("set sndbuf", lambda: probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20))
attempt("set rcvlowat", lambda: probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 16 << 20))
attempt("vsock", lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close())
md5 = bytes(2) + bytes(126) + bytes(4) + bytes(4) + b"k" * 80  # an empty address, key length 0
attempt("tcp md5", lambda: probe.setsockopt(socket.IPPROTO_TCP, 14, md5))
attempt("tcp nodelay", lambda: probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1))
attempt("set reuseaddr", lambda: probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1))
out["rcvbuf unchanged"] = probe.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == default_rcvbuf
out["reuseaddr set"] = probe.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
import fcntl
pipe_r, pipe_w = os.pipe()
attempt("grow a pipe", lambda: fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, 1 << 20))
attempt("shrink a pipe", lambda: fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, 4096))
out["pipe size"] = fcntl.fcntl(pipe_w, fcntl.F_GETPIPE_SZ)
attempt("other fcntl", lambda: fcntl.fcntl(pipe_w, fcntl.F_SETFL, os.O_NONBLOCK))
leased = os.open("leased", os.O_CREAT | os.O_RDONLY, 0o644)
attempt("read lease", lambda: fcntl.fcntl(leased, fcntl.F_SETLEASE, fcntl.F_RDLCK))
attempt("get lease", lambda: fcntl.fcntl(leased, fcntl.F_GETLEASE))
libc = ctypes.CDLL(None, use_errno=True)
buffer = ctypes.create_string_buffer(120)
for name, call in [
    ("io_uring_setup", lambda: libc.syscall(425, 8, buffer)),
    ("openat2", lambda: libc.syscall(437, -100, b"plain", None, 0)),
    ("x32 chmod", lambda: libc.syscall(0x40000000 | 90, b"plain", 0o4755)),
    # renameat2(RENAME_WHITEOUT): leaves a 0:0 character device where the source was.
    ("rename whiteout", lambda: libc.syscall(316, -100, b"other", -100, b"moved", 4)),
    ("rename noreplace", lambda: libc.syscall(316, -100, b"movable", -100, b"renamed", 1)),
    # BTRFS_IOC_SUBVOL_CREATE and FICLONE: the btrfs family of ioctls (type 0x94).
    ("subvolume", lambda: libc.ioctl(os.open(".", os.O_RDONLY), 0x5000940E, b"\0" * 8 + b"sv")),
    ("reflink", lambda: libc.ioctl(os.open("renamed", os.O_WRONLY), 0x40049409, fd)),
    ("other ioctl", lambda: libc.ioctl(fd, 0x541B, buffer)),  # FIONREAD on a file: allowed
    # copy_file_range: btrfs reflinks with it (attacker round 152), as FICLONE does.
    ("copy_file_range", lambda: libc.syscall(
        326, os.open("other", os.O_RDONLY), None,
        os.open("copy", os.O_CREAT | os.O_WRONLY, 0o644), None, 1, 0,
    )),
]:
    result = call()
    out[name] = "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
print(json.dumps(out))
"""


@pytest.fixture
def outcomes(tmp_path: Path) -> dict[str, Any]:
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", _ATTEMPTS, root],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_special_bits_and_devices_are_refused_by_every_call(
    outcomes: dict[str, str], tmp_path: Path
) -> None:
    for refused in ("chmod 4755", "chmod 2755", "fchmod 4755", "open 6755", "mknod setuid"):
        assert outcomes[refused] == "EPERM", refused
    assert outcomes["mknod char"] == outcomes["mknod block"] == "EPERM"
    for path in tmp_path.iterdir():
        mode = path.lstat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), path
        assert not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)), path


def test_nothing_is_made_or_changed_writable_by_every_user(
    outcomes: dict[str, str], tmp_path: Path
) -> None:
    for refused in ("chmod 0777", "chmod 0666", "chmod folder 1777", "fchmod 0757"):
        assert outcomes[refused] == "EPERM", refused
    assert outcomes["fchmodat 0777"] == "EPERM"
    assert outcomes["chmod 0775"] == "ok"  # the group's write is the workspace's to give
    # The mask is not the filter's: reading it with umask(0) and putting it back works (CI at
    # 4ddedb9: refusing umask(0) gave `mkdir -p` a mask of 0777).
    assert outcomes["umask 0"] == "ok" and outcomes["umask read back"] == 0
    # Access lists live in extended attributes: setting any is refused as by a filesystem
    # without them; reading them works.
    for name in ("setxattr acl", "setxattr default acl", "setxattr user", "fsetxattr", "lsetxattr"):
        assert outcomes[name] == "ENOTSUP", name  # EOPNOTSUPP, the same number
    assert outcomes["getxattr"] == "ok"
    for path in tmp_path.iterdir():
        assert not path.lstat().st_mode & stat.S_IWOTH, path


def test_ordinary_file_work_goes_on(outcomes: dict[str, str], tmp_path: Path) -> None:
    assert outcomes["chmod 0755"] == outcomes["mknod regular"] == "ok"
    assert outcomes["mkfifo"] == outcomes["mkdir"] == "ok"
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o755


def test_the_ways_around_the_filter_are_closed(outcomes: dict[str, str]) -> None:
    assert outcomes["io_uring_setup"] == "ENOSYS"  # its ops open files without system calls
    assert outcomes["openat2"] == "ENOSYS"  # its mode is behind a pointer; libc falls back
    assert outcomes["x32 chmod"] == "ENOSYS"


def test_whiteouts_and_btrfs_ioctls_are_refused_and_the_rest_of_rename_and_ioctl_works(
    outcomes: dict[str, str], tmp_path: Path
) -> None:
    assert outcomes["rename whiteout"] == "EPERM"
    assert outcomes["rename noreplace"] == "ok" and (tmp_path / "renamed").exists()
    # Refused as if the filesystem had no such ioctl, so programs fall back (cp copies).
    assert outcomes["subvolume"] == outcomes["reflink"] == "ENOTTY"
    assert outcomes["other ioctl"] == "ok"


def test_copy_file_range_is_refused_as_by_a_kernel_without_it(outcomes: dict[str, str]) -> None:
    """Attacker round 152: on btrfs, copy_file_range makes a reflink (GNU cp 9.1 calls it by
    default), and each reflink adds extent-tree metadata no quota group counts: one tenant held
    58 % more of the shared filesystem than its share. Refused with ENOSYS, so cp copies."""
    assert outcomes["copy_file_range"] == "ENOSYS"


def test_netlink_sockets_are_refused_as_if_the_kernel_had_none(outcomes: dict[str, str]) -> None:
    """Attacker round 106: messages queued on user netlink sockets are kernel memory charged to
    no memory cgroup (640 MB of the host's slab from one 512 MB container)."""
    assert outcomes["netlink usersock"] == outcomes["netlink route"] == "EAFNOSUPPORT"
    assert outcomes["vsock"] == "EAFNOSUPPORT"
    assert outcomes["unix socket"] == outcomes["inet socket"] == "ok"


def test_socket_buffer_sizes_are_left_as_they_are_and_other_options_work(
    outcomes: dict[str, Any],
) -> None:
    """Attacker round 106: a listener with a 4 MB receive buffer let each connection it had not
    accepted hold about 5 MB of the host's memory, charged to no memory cgroup."""
    assert outcomes["set rcvbuf"] == outcomes["set sndbuf"] == "ok"  # programs go on
    assert outcomes["set rcvlowat"] == "ok"  # round 107: TCP grew the buffer to fit it
    assert outcomes["rcvbuf unchanged"] is True
    assert outcomes["set reuseaddr"] == "ok" and outcomes["reuseaddr set"] is True
    # Round 108: each socket's MD5 keys were 180 KB of kernel memory no cgroup was charged for.
    assert outcomes["tcp md5"] == "ENOPROTOOPT"
    assert outcomes["tcp nodelay"] == "ok"


def test_pipes_keep_their_default_size(outcomes: dict[str, Any]) -> None:
    """Attacker round 110: a pipe's pages are charged to the user that made it, whoever enlarges
    it; a command grew the pipes the runner (root, shared by every container) made for it, and
    another tenant's end of a FIFO, to a megabyte each against their owners' limits."""
    assert outcomes["grow a pipe"] == outcomes["shrink a pipe"] == "EPERM"
    assert outcomes["pipe size"] == 65536
    assert outcomes["other fcntl"] == "ok"


def test_no_lease_can_hold_another_tenants_open(outcomes: dict[str, Any]) -> None:
    """Attacker round 111: a lease on a file of the shared default workspace held another
    tenant's `cat` of it for the lease-break time (45 s)."""
    assert outcomes["read lease"] == "EPERM"
    assert outcomes["get lease"] == "ok"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="32-bit calls are x86 only")
def test_a_32_bit_system_call_kills_the_process(tmp_path: Path) -> None:
    # int 0x80 reaches the i386 table (other numbers, other argument order): not allowed at all.
    code = (
        "import ctypes, mmap, sys\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from sandbox.runner.confine import install_filter\n"
        "install_filter()\n"
        "m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,"
        " prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "m[0:8] = b'\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3'\n"  # mov eax, 20 (getpid); int 0x80
        "ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))()\n"
        "print('survived')\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-c", code, root], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -31 and "survived" not in done.stdout  # SIGSYS


def test_an_unknown_architecture_gets_no_filter_rather_than_a_wrong_one() -> None:
    with pytest.raises(ConfinementError, match="no confinement filter"):
        build_filter("mips")
    assert len(build_filter("x86_64")) % 8 == 0 and len(build_filter("aarch64")) % 8 == 0


@pytest.mark.parametrize("text", ["0:1000", "1000:0", "0:0"])
def test_commands_never_run_as_root_or_group_zero(text: str) -> None:
    with pytest.raises(ConfinementError, match="refusing"):
        parse_identity(text)
    assert parse_identity("1000:1001") == (1000, 1001)
