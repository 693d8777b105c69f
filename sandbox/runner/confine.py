"""What the runner does to itself before it runs anything a model wrote (standard library only).

- A seccomp filter, stacked on the engine's own: the kernel then refuses, for the runner and every
  process it starts, whatever could leave a file with setuid/setgid bits or a device node behind
  (chmod, fchmod, fchmodat, fchmodat2, open, openat, creat, mknod, mknodat with such a mode), and
  the ways around those checks: 32-bit and x32 system calls (other numbers, other arguments),
  io_uring (opens files without system calls) and openat2 (its mode sits behind a pointer the
  filter cannot read; programs fall back to openat).
- Nothing already there is made writable by every user: the chmod calls refuse a mode that
  gives others write (EPERM), and setting extended attributes, where access lists live, is
  refused as on a filesystem without them (EOPNOTSUPP; programs that copy them go on without).
  Attacker rounds 183 to 188 found one spelling after another of `chmod 777 .` that the policy's
  reading of a command missed (options, copies that keep modes, code that builds the name
  `chmod`); here the kernel refuses the effect whatever the spelling. umask is left alone:
  programs read it with `umask(0)` and put back what that returned, so refusing that call gave
  them a mask of 0777 (every new folder unusable; CI at 4ddedb9), and pip reads it so too.
- Netlink sockets (socket(AF_NETLINK, ...)), refused with EAFNOSUPPORT as in a kernel without
  them: messages queued on them are kernel memory no memory cgroup is charged for (attacker
  round 106 held 640 MB of the host's slab from a 512 MB container through NETLINK_USERSOCK).
  Name lookups fall back without them; listing network interfaces (getifaddrs) fails instead.
- setsockopt(SOL_SOCKET, SO_RCVBUF, SO_SNDBUF or SO_RCVLOWAT) does nothing and succeeds, so a
  socket keeps the buffer sizes of its network namespace (see `sandbox/hardening.py`): a
  connection not yet accepted is charged to no memory cgroup, and with a 4 MB receive buffer
  asked for, each held about 5 MB of the host's memory (attacker round 106); SO_RCVLOWAT grows
  a TCP socket's receive buffer to fit it (round 107: 20 MB each).
- setsockopt(IPPROTO_TCP, TCP_MD5SIG or TCP_MD5SIG_EXT) is refused with ENOPROTOOPT, as by a
  kernel without them: each socket's keys are kernel memory no memory cgroup is charged for
  (attacker round 108: 180 KB per socket).
- AF_VSOCK sockets are refused like netlink ones: their buffers can be raised to gigabytes
  without a capability, and a host with vsock loopback would queue them uncharged.
- fcntl(F_SETPIPE_SZ) is refused with EPERM, as past the per-user pipe limits: a pipe's pages
  are charged to the user that made it, whoever enlarges it, so a command could grow the pipes
  the runner (root, shared by every container) made for it, or another tenant's end of a FIFO
  in a shared workspace, to a megabyte each against their owners' limits (attacker round 110).
  Pipes keep their default 64 KiB.
- fcntl(F_SETLEASE) is refused with EPERM: a lease on a file of the shared default workspace
  held every other tenant's open of it for the lease-break time, 45 s (attacker round 111).
- renameat2 with RENAME_WHITEOUT (it leaves a 0:0 character device behind, without mknod), and
  the btrfs family of ioctls (type 0x94: making subvolumes, which a qgroup disk budget does not
  cover, snapshots and reflinks), refused with ENOTTY as on a filesystem without them, so
  programs fall back (cp copies). copy_file_range too (ENOSYS, as a kernel without it): btrfs
  reflinks with it, and each reflink adds extent-tree metadata no quota group counts (attacker
  round 152 held 58 % more of the shared filesystem than its share through a plain `cp`).
- The identity the command runs as: never root. The runner itself stays root inside the
  container (with only the capabilities to switch identity and signal its command), so the
  command cannot reach the runner's output, its /proc entries or its signals.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# Classic BPF opcodes (linux/filter.h) and seccomp constants (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_AND = 0x54
_RET = 0x06
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000
_NR, _ARCH, _ARGS = 0, 4, 16
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_PR_SET_DUMPABLE = 4
_SECCOMP_MODE_FILTER = 2

_SPECIAL_BITS = 0o6000
_OTHERS_WRITE = 0o002
_FILE_TYPE = 0o170000
_DEVICES = (0o020000, 0o060000)  # S_IFCHR, S_IFBLK
_X32_BIT = 0x40000000

_RENAME_WHITEOUT = 4
_UNCHARGED_FAMILIES = (16, 40)  # AF_NETLINK, AF_VSOCK
_SOL_SOCKET = 1
_IPPROTO_TCP = 6
_TCP_MD5_OPTIONS = (14, 32)  # TCP_MD5SIG, TCP_MD5SIG_EXT
# SO_SNDBUF, SO_RCVBUF, SO_RCVLOWAT (TCP grows the receive buffer to fit it); the FORCE ones
# need CAP_NET_ADMIN, which the command does not have.
_BUFFER_OPTIONS = (7, 8, 18)
_ALL_BITS = 0xFFFFFFFF
_IOCTL_TYPE = 0xFF00
_BTRFS_IOCTLS = 0x9400
_F_SETPIPE_SZ = 1031
_F_SETLEASE = 1024


class _Arch:
    """One architecture's system calls, as the filter needs them (a plain class: dataclasses
    would cost every container 13 ms of CPU to import)."""

    __slots__ = (
        "audit",
        "chmods",
        "masked",
        "mknods",
        "mode_arg",
        "refused",
        "setsockopt",
        "unsupported",
    )

    def __init__(
        self,
        audit: int,
        mode_arg: dict[int, int],
        mknods: frozenset[int],
        refused: frozenset[int],
        masked: dict[int, tuple[int, int, tuple[int, ...], int]],
        setsockopt: int,
        chmods: frozenset[int],
        unsupported: frozenset[int],
    ) -> None:
        self.audit = audit
        """AUDIT_ARCH_* of the native system calls."""
        self.mode_arg = mode_arg
        """Calls that take a file mode: the index of that argument."""
        self.mknods = mknods
        """Those of them that can also make devices."""
        self.chmods = chmods
        """Those of them that change a mode as given (no umask): others' write is refused too."""
        self.unsupported = unsupported
        """Calls refused with EOPNOTSUPP (setting extended attributes, where ACLs live)."""
        self.refused = refused
        """Calls refused outright with ENOSYS."""
        self.masked = masked
        """Calls refused when (argument & mask) is one of the values: (argument index, mask,
        values, errno)."""
        self.setsockopt = setsockopt
        """setsockopt's number: its buffer sizes are not the command's to set."""


_ARCHES = {
    "x86_64": _Arch(
        0xC000003E,
        {90: 1, 91: 1, 268: 2, 452: 2, 2: 2, 257: 3, 85: 1, 133: 1, 259: 2},
        frozenset({133, 259}),
        frozenset({425, 426, 427, 437, 326}),
        {
            316: (4, _RENAME_WHITEOUT, (_RENAME_WHITEOUT,), errno.EPERM),
            16: (1, _IOCTL_TYPE, (_BTRFS_IOCTLS,), errno.ENOTTY),
            41: (0, _ALL_BITS, _UNCHARGED_FAMILIES, errno.EAFNOSUPPORT),
            72: (1, _ALL_BITS, (_F_SETPIPE_SZ, _F_SETLEASE), errno.EPERM),
        },
        54,
        frozenset({90, 91, 268, 452}),  # chmod, fchmod, fchmodat, fchmodat2
        frozenset({188, 189, 190, 463}),  # setxattr, lsetxattr, fsetxattr, setxattrat
    ),
    "aarch64": _Arch(
        0xC00000B7,
        {52: 1, 53: 2, 452: 2, 56: 3, 33: 2},
        frozenset({33}),
        frozenset({425, 426, 427, 437, 285}),
        {
            276: (4, _RENAME_WHITEOUT, (_RENAME_WHITEOUT,), errno.EPERM),
            29: (1, _IOCTL_TYPE, (_BTRFS_IOCTLS,), errno.ENOTTY),
            198: (0, _ALL_BITS, _UNCHARGED_FAMILIES, errno.EAFNOSUPPORT),
            25: (1, _ALL_BITS, (_F_SETPIPE_SZ, _F_SETLEASE), errno.EPERM),
        },
        208,
        frozenset({52, 53, 452}),  # fchmod, fchmodat, fchmodat2
        frozenset({5, 6, 7, 463}),  # setxattr, lsetxattr, fsetxattr, setxattrat
    ),
}


class ConfinementError(Exception):
    """The runner could not confine itself: it must not run anything."""


class _Program:
    """A tiny assembler for classic BPF with forward jumps to labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self.code):
            out += struct.pack("=HBBI", code, self._jump(index, jt), self._jump(index, jf), k)
        return bytes(out)

    def _jump(self, index: int, target: object) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[str(target)] - index - 1
        if not 0 <= offset < 256:
            raise ConfinementError(f"filter jump out of range ({offset})")
        return offset


def build_filter(machine: str | None = None) -> bytes:
    """The filter program for this machine's architecture (ConfinementError when unknown)."""
    machine = machine or os.uname().machine
    if machine not in _ARCHES:
        raise ConfinementError(f"no confinement filter for the {machine} architecture")
    arch = _ARCHES[machine]
    prog = _Program()
    prog.op(_LD_W_ABS, _ARCH)
    prog.op(_JEQ, arch.audit, 0, "kill")  # 32-bit (int 0x80) and foreign calls: killed
    prog.op(_LD_W_ABS, _NR)
    if machine == "x86_64":
        prog.op(_JGE, _X32_BIT, "nosys", 0)
    for number in sorted(arch.refused):
        prog.op(_JEQ, number, "nosys", 0)
    for number, arg in sorted(arch.mode_arg.items()):
        kind = "mknod" if number in arch.mknods else "chmod" if number in arch.chmods else "mode"
        prog.op(_JEQ, number, f"{kind}{arg}", 0)
    for number in sorted(arch.unsupported):
        prog.op(_JEQ, number, "notsup", 0)
    for number in sorted(arch.masked):
        prog.op(_JEQ, number, f"masked{number}", 0)
    prog.op(_JEQ, arch.setsockopt, "setsockopt", 0)
    prog.op(_RET, _ALLOW)
    prog.label("setsockopt")
    prog.op(_LD_W_ABS, _ARGS + 8)  # level
    prog.op(_JEQ, _SOL_SOCKET, "socket_level", 0)
    prog.op(_JEQ, _IPPROTO_TCP, "tcp_level", 0)
    prog.op(_RET, _ALLOW)
    prog.label("socket_level")
    prog.op(_LD_W_ABS, _ARGS + 16)  # option
    for option in _BUFFER_OPTIONS:
        prog.op(_JEQ, option, "unchanged", 0)
    prog.op(_RET, _ALLOW)
    prog.label("tcp_level")
    prog.op(_LD_W_ABS, _ARGS + 16)
    for option in _TCP_MD5_OPTIONS:
        prog.op(_JEQ, option, "noprotoopt", 0)
    prog.op(_RET, _ALLOW)
    for arg in sorted(set(arch.mode_arg.values())):
        prog.label(f"mode{arg}")
        prog.op(_LD_W_ABS, _ARGS + 8 * arg)  # the low 32 bits: little-endian
        prog.op(_JSET, _SPECIAL_BITS, "eperm", 0)
        prog.op(_RET, _ALLOW)
    for arg in sorted({arch.mode_arg[n] for n in arch.chmods}):
        prog.label(f"chmod{arg}")
        prog.op(_LD_W_ABS, _ARGS + 8 * arg)
        prog.op(_JSET, _SPECIAL_BITS | _OTHERS_WRITE, "eperm", 0)
        prog.op(_RET, _ALLOW)
    for arg in sorted({arch.mode_arg[n] for n in arch.mknods}):
        prog.label(f"mknod{arg}")
        prog.op(_LD_W_ABS, _ARGS + 8 * arg)
        prog.op(_JSET, _SPECIAL_BITS, "eperm", 0)
        prog.op(_AND, _FILE_TYPE)
        for device in _DEVICES:
            prog.op(_JEQ, device, "eperm", 0)
        prog.op(_RET, _ALLOW)
    for number, (arg, mask, values, refusal) in sorted(arch.masked.items()):
        prog.label(f"masked{number}")
        prog.op(_LD_W_ABS, _ARGS + 8 * arg)  # flags and ioctl requests are 32-bit
        prog.op(_AND, mask)
        for value in values:
            prog.op(_JEQ, value, f"refused{number}", 0)
        prog.op(_RET, _ALLOW)
        prog.label(f"refused{number}")
        prog.op(_RET, _ERRNO | refusal)
    prog.label("noprotoopt")
    prog.op(_RET, _ERRNO | errno.ENOPROTOOPT)
    prog.label("notsup")
    prog.op(_RET, _ERRNO | errno.EOPNOTSUPP)
    prog.label("unchanged")
    prog.op(_RET, _ERRNO | 0)  # returns 0: success, and nothing done
    prog.label("eperm")
    prog.op(_RET, _ERRNO | errno.EPERM)
    prog.label("nosys")
    prog.op(_RET, _ERRNO | errno.ENOSYS)
    prog.label("kill")
    prog.op(_RET, _KILL_PROCESS)
    return prog.assemble()


def install_filter(program: bytes | None = None) -> None:
    """Confine this process and everything it starts from now on (irreversible)."""
    program = program if program is not None else build_filter()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise ConfinementError(f"no_new_privs refused: {os.strerror(ctypes.get_errno())}")
    instructions = ctypes.create_string_buffer(program, len(program))

    class _Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Fprog(len(program) // 8, ctypes.cast(instructions, ctypes.c_void_p))
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise ConfinementError(f"the seccomp filter was refused: {os.strerror(ctypes.get_errno())}")


def forbid_inspection() -> None:
    """Non-dumpable: no process of another identity may open this one's /proc entries."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise ConfinementError(f"PR_SET_DUMPABLE refused: {os.strerror(ctypes.get_errno())}")


def parse_identity(text: str) -> tuple[int, int]:
    """`uid:gid` as the daemon passes it; never root, never group 0."""
    uid_text, _, gid_text = text.partition(":")
    uid, gid = int(uid_text), int(gid_text)
    if uid <= 0 or gid <= 0:
        raise ConfinementError(f"refusing to run commands as {uid}:{gid} (root or its group)")
    return uid, gid


def become(identity: tuple[int, int]) -> None:
    """Drop to `identity` for good (no supplementary groups, no capabilities left)."""
    uid, gid = identity
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getgroups():
        raise ConfinementError("could not drop to the sandbox identity")
