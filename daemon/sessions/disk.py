"""Where the workspaces tooljail makes live, and their disk budget.

With a budget (workspaces.budget_mb > 0), fresh workspaces live on a filesystem of their own: a
btrfs filesystem in an image file whose space is reserved up front (fallocate), mounted on the
sessions root with nosuid and nodev. Each workspace is a subvolume with a quota (a qgroup limit).
A sandbox filling its workspace therefore stops at its budget with "Disk quota exceeded", and can
never fill the host's disk (the audit log, the engine, other users) nor take another session's
room. Without a budget they are plain folders under the sessions root.

The daemon mounts the filesystem the first time it needs it (it must be root for that; otherwise
an operator mounts it, see docs/operations.md). It stays mounted when the daemon stops, so the
workspaces stay where their sessions had them; a restarted daemon uses it as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from daemon.errors import Overloaded, RequestError
from daemon.host.btrfs_tree import SUBVOLUME_TOP_FOLDER, TOP_SUBVOLUME, children
from daemon.host.child import run_child
from daemon.host.devices import loop_device_of, loop_node_reads
from daemon.host.mounts import Mount, mount_at, mount_id_of
from daemon.host.private_file import replace_json
from daemon.host.statfs import BTRFS_MAGIC, filesystem_type
from daemon.host.threads import FILESYSTEM_THREADS
from daemon.sessions.session import VERIFY_WAIT_S
from daemon.sessions.workspaces import (
    give_to,
    keep_others_out,
    made_sessions_root,
    make_workspace,
)

log = logging.getLogger(__name__)

_COMMAND_TIMEOUT_S = 60.0
_OUTPUT_CAP = 16 * 1024
#: Subvolumes inside one workspace that its deletion removes (only an operator or an older
#: version makes any).
_MAX_NESTED = 10_000
#: Subvolumes at the filesystem's top looked through for a workspace's id.
_MAX_WORKSPACES = 1_000_000


class FreshWorkspaces(Protocol):
    """Makes and removes the workspaces of fresh sessions."""

    budget_mb: int
    """Disk each may use (0: no budget)."""
    share_mb: int
    """Disk one principal's may use together (0: no share of their own)."""

    def folder_for(self, name: str) -> Path:
        """Where `create(name, ...)` makes its folder (known before it does)."""
        ...

    async def ready(self) -> str:
        """Their folders in view (the filesystem they are on mounted), so that a folder missing
        is gone; the name of where they are, from the configuration: another kind of fresh
        workspaces, or another image or folder, has another, and the same one made again (an
        image removed to be made anew) the same. Raises when they cannot be in view."""
        ...

    async def create(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        """A new, empty workspace folder named `name` for `principal`, owned by `owner` (None:
        as made), at `folder_for(name)`."""
        ...

    async def delete(self, folder: Path, owner: str) -> bool:
        """Remove a workspace made by `create` for the principal `owner`; whether it is gone."""
        ...

    async def lasting(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        """The workspace named `name` made by `create` the first time, found again afterwards
        (a principal's default session's, across restarts); whoever calls it checks what it
        found is that principal's."""
        ...


class PlainWorkspaces:
    """Fresh workspaces as folders under the sessions root, without a disk budget."""

    budget_mb = 0
    share_mb = 0

    def __init__(self, root: Path) -> None:
        self._root = root

    def folder_for(self, name: str) -> Path:
        return Path(os.path.realpath(self._root)) / name

    async def ready(self) -> str:
        root = made_sessions_root(self._root)
        keep_others_out(root)
        # Named by a mark made in it once, not by its path alone: the folder a bind mount or
        # another filesystem puts at the path (still mounted, or not yet after a reboot) is
        # another place than the one beneath (attacker round 174).
        mark = await FILESYSTEM_THREADS.run(_DAEMON, lambda: _marked(root))
        return f"folder:{root}#{mark}"

    async def create(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        keep_others_out(made_sessions_root(self._root))
        folder = self.folder_for(name)
        make_workspace(folder, owner)
        return folder

    async def lasting(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        folder = self.folder_for(name)
        if os.path.lexists(folder) and not _half_made(folder, owner):
            return folder
        if os.path.lexists(folder):
            folder.rmdir()
        return await self.create(name, owner, principal)

    async def delete(self, folder: Path, owner: str) -> bool:
        def remove() -> bool:
            shutil.rmtree(folder, ignore_errors=True)
            return not folder.exists()

        return await _in_owners_thread(folder, owner, remove)


_MARK = ".tooljail-folder"
"""In a folder plain fresh workspaces are made in, and at the top of the workspaces filesystem:
a random mark made once (`_marked`)."""
_MARK_FORM = re.compile(r"[0-9a-f]{32}")


def _mark_of(root: Path) -> str | None:
    """The mark made in `root` (`_marked`), None when it has none; RequestError for one the
    daemon did not write."""
    path = root / _MARK
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO does not wait
    try:
        with os.fdopen(os.open(path, flags), encoding="ascii") as stream:
            regular = stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
            mark = stream.read(64).strip() if regular else ""
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):  # a link, or not text
        mark = ""
    if not _MARK_FORM.fullmatch(mark):
        raise RequestError(
            f"{path} is not what the daemon wrote: restore it (the kept workspaces made in "
            f"{root} are recorded with it), or see docs/operations.md"
        )
    return mark


def _read_map(path: Path, valid: Callable[[object, object], bool], what: str) -> dict[str, Any]:
    """A JSON object the daemon wrote at `path` ({} when there is none), every item of it
    `valid`; RequestError (saying it is not `what`) rather than a guess otherwise."""
    try:
        with path.open(encoding="utf-8") as stream:
            found = json.load(stream)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RequestError(f"cannot read {path}: {exc}") from exc
    if not isinstance(found, dict) or not all(valid(k, v) for k, v in found.items()):
        raise RequestError(f"{path} is not {what}; restore it, or remove it")
    return found


def _read_marks(path: Path) -> dict[str, str]:
    """Image path -> the mark of the filesystem found there (`_check_mark`)."""
    return _read_map(
        path,
        lambda _, mark: isinstance(mark, str) and bool(_MARK_FORM.fullmatch(mark)),
        "a map of workspaces images to their filesystems' marks",
    )


def _marked(root: Path) -> str:
    """The mark of `root`, made the first time whole (written beside it, then linked into
    place: nobody ever reads half of one); RequestError for one the daemon did not write."""
    found = _mark_of(root)
    if found is not None:
        return found
    mark = secrets.token_hex(16)
    partial = root / f"{_MARK}.{mark}"
    with os.fdopen(
        os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w"
    ) as stream:
        stream.write(mark)
        stream.flush()
        os.fsync(stream.fileno())
    try:
        os.link(partial, root / _MARK)
    except FileExistsError:  # made meanwhile: that one is the mark
        return _marked(root)
    finally:
        partial.unlink()
    return mark


_MOUNT_OPTIONS = "nosuid,nodev,noatime"
_SAFE_OPTIONS = frozenset({"nosuid", "nodev"})
"""What a filesystem found mounted at the sessions root must have been mounted with."""


@dataclasses.dataclass(frozen=True)
class _LoopImage:
    """The image file behind the loop device a filesystem is mounted from."""

    device: tuple[int, int]
    """The loop device's number."""
    reads: tuple[int, int] | None
    """(device, inode) of the file the kernel says the device reads; None when the device
    cannot be asked."""

    def is_file(self, image: Path) -> bool:
        """Whether it is the file at `image`, by the kernel's identity (a path string may lead
        to another file: a mount over it). Not when the device cannot be asked: the daemon is
        root wherever it has budgets, so that is a node that is not the device it names."""
        try:
            info = image.stat()
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self.reads

    def path(self) -> str:
        """Its path, as sysfs names it (for messages only: it may lead elsewhere now)."""
        major, minor = self.device
        try:
            backing = Path(f"/sys/dev/block/{major}:{minor}/loop/backing_file").read_text()
        except OSError:
            return "(unknown)"
        backing = backing.strip()
        return os.path.realpath(backing) if Path(backing).exists() else backing


def _loop_image(mounted: Mount | None) -> _LoopImage | None:
    """The image behind the loop device a mount's source is a node of (`mount_at`), found by
    the node's device number, not its name (attacker round 177: a node named like the image's
    loop device was another one); None when it is not a loop device's node."""
    source = mounted.source if mounted is not None else ""
    number = loop_device_of(source)
    if number is None:
        return None
    return _LoopImage(device=number, reads=loop_node_reads(source))


_GROUPS = ".principal-groups.json"
"""In the workspaces filesystem's root: principal -> its quota group's number (1/<number>)."""
_DAEMON = "tooljail-daemon"
"""Whose threads the daemon's own reads and writes of that file use."""


def _half_made(folder: Path, owner: tuple[int, int] | None) -> bool:
    """Whether `folder` is a workspace `create` began and never handed to `owner` (the daemon
    stopped in between): still the daemon's, empty, while it was to be another uid's. Nobody but
    the daemon makes anything where workspaces are, so it is the daemon's to make again."""
    if owner is None or owner[0] == -1:
        return False
    info = os.lstat(folder)
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid() != owner[0]
        and next(folder.iterdir(), None) is None
    )


def _read_groups(root: Path) -> dict[str, int]:
    """Which quota group is whose."""
    return _read_map(
        root / _GROUPS,
        lambda key, value: isinstance(key, str) and type(value) is int and value > 0,
        "a map of principals to group numbers",
    )


def _out_of_room(exc: BaseException) -> bool:
    """Whether a failure was the filesystem (or a quota) being full."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    said = str(exc)
    return "No space left on device" in said or "Disk quota exceeded" in said


async def _metadata_once(root: Path) -> None:
    """Store the filesystem's metadata once. Files small enough are kept inside the metadata,
    which mkfs stores twice on one device (DUP) and the quotas count once: a principal within
    its share filled the whole filesystem with 2 KB files (attacker round 99). An image made
    before is converted when it is first used. One whose chunks are not mixed (round 153) cannot
    be converted: the log says so."""
    shown = await _run("btrfs", "filesystem", "df", str(root))
    if any(line.startswith("Metadata, DUP") for line in shown.splitlines()):
        log.info("storing the metadata of the workspaces filesystem %s once (was DUP)", root)
        await _run("btrfs", "balance", "start", "-f", "-mconvert=single", str(root))
    if not any(line.startswith("Data+Metadata") for line in shown.splitlines()):
        log.warning(
            "the workspaces filesystem %s keeps data and metadata in chunks of their own (made "
            "by an older version, or by an operator without --mixed): one principal can pin "
            "its room as metadata no quota counts and leave the others none. With no session "
            "open, stop the daemon, unmount it and remove its image (or make it with mkfs.btrfs "
            "--mixed); it is made again at start",
            root,
        )


async def _in_owners_thread(folder: Path, owner: str, work: Callable[[], bool]) -> bool:
    """`work()` (whether the workspace is gone) in one of its owner's threads, waited for at
    most VERIFY_WAIT_S: a filesystem the owner mounted in or over it may never answer, and then
    it holds that owner's threads alone, neither the event loop nor the threads others share."""
    try:
        async with asyncio.timeout(VERIFY_WAIT_S):
            return await FILESYSTEM_THREADS.run(owner, work)
    except TimeoutError:
        log.warning(
            "removing the workspace %s took over %g s; left as it is", folder, VERIFY_WAIT_S
        )
        return False


def _nested_ids(root: Path, folder: Path) -> list[int]:
    """The ids of the subvolumes at any depth inside the workspace subvolume `folder` (a
    subvolume in the top folder of the filesystem mounted whole at `root`), deepest first, as
    the filesystem's root tree has them: no name inside the workspace is read (attacker round
    181: one holding a newline forged a line of `btrfs subvolume list`), and the workspace is
    not entered (something mounted over it may never answer)."""
    if folder.parent != root:
        raise RequestError(f"the workspace {folder} is not a folder of {root}; not deleted")
    try:
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return _nested_below(top, folder)
        finally:
            os.close(top)
    except OSError as exc:
        raise RequestError(f"cannot look for subvolumes inside {folder}: {exc}") from exc


def _nested_below(top: int, folder: Path) -> list[int]:
    at_top = children(top, TOP_SUBVOLUME, _MAX_WORKSPACES)
    if len(at_top) > _MAX_WORKSPACES:
        raise RequestError(f"over {_MAX_WORKSPACES} subvolumes beside {folder}; not deleted")
    name = os.fsencode(folder.name)
    workspace = [
        child.id for child in at_top if child.name == name and child.folder == SUBVOLUME_TOP_FOLDER
    ]
    if not workspace:
        raise RequestError(f"the workspace {folder} is not a subvolume; not deleted")
    found: list[int] = []
    level = workspace
    while level:
        parents, level = level, []
        for parent in parents:
            # What is left of the bound, so that no search reads far past it.
            room = _MAX_NESTED - len(found) - len(level)
            level += [child.id for child in children(top, parent, room)]
            if len(found) + len(level) > _MAX_NESTED:
                raise RequestError(
                    f"the workspace {folder} holds over {_MAX_NESTED} subvolumes: an operator "
                    "deletes the nested ones, deepest first, then the workspace"
                )
        found += level
    return found[::-1]


async def _run(*argv: str) -> str:
    """Run a command to its end; RequestError with its output when it fails or prints more
    than `_OUTPUT_CAP` bytes."""
    try:
        done = await run_child(argv, timeout_s=_COMMAND_TIMEOUT_S, output_cap=_OUTPUT_CAP)
    except OSError as exc:
        raise RequestError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    if done.exit_code != 0:
        said = (done.stderr.text() or done.stdout.text()).strip()
        raise RequestError(f"{' '.join(argv[:3])} failed: {said or f'exit {done.exit_code}'}")
    if done.stdout.total > len(done.stdout.kept):
        # Whatever reads it would act on part of the answer: refused rather than guessed.
        raise RequestError(
            f"{' '.join(argv[:3])} printed more than {_OUTPUT_CAP} bytes; not read in part"
        )
    return done.stdout.text()


def _is_btrfs(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return filesystem_type(fd) == BTRFS_MAGIC
    except OSError:
        return False
    finally:
        os.close(fd)


class BudgetedWorkspaces:
    """Fresh workspaces as btrfs subvolumes with a quota each, on a filesystem of their own."""

    def __init__(
        self,
        root: Path,
        image: Path,
        filesystem_mb: int,
        budget_mb: int,
        principal_share: float = 1.0,
        *,
        marks: Path,
    ) -> None:
        """`marks`: a file of the daemon's own (in its state directory, not beside the image,
        which a mount over its folder would replace too) recording the mark of the filesystem
        each image path was found with."""
        self._root = root
        self._image = image
        self._marks = marks
        self._filesystem_mb = filesystem_mb
        self.budget_mb = budget_mb
        self.share_mb = int(filesystem_mb * principal_share) if principal_share < 1 else 0
        self._ready = asyncio.Lock()
        self._grouping = asyncio.Lock()
        self._groups_ready: set[str] = set()
        """Quota groups made and limited since the daemon started."""
        self._ok = False

    async def _ensure(self) -> Path:
        """The mounted filesystem's root (mounted now if needed)."""
        async with self._ready:
            root = Path(os.path.realpath(self._root))
            # Looked at again each time: an operator may have unmounted it under the daemon
            # (attacker round 172: the bare folder beneath was then taken for it).
            if self._ok and os.path.ismount(root) and _is_btrfs(root):
                self._check_image(root)
                keep_others_out(root)
                await self._check_mark(root, made=False)
                return root
            self._ok = False
            self._root.mkdir(parents=True, exist_ok=True, mode=0o700)
            made = False
            if not os.path.ismount(root):
                made = await self._mount(root)
            if not _is_btrfs(root):
                raise RequestError(
                    f"the sessions root {root} is a mount point but not a btrfs filesystem, so "
                    "fresh workspaces cannot get a disk budget; unmount it, or set "
                    "workspaces.budget_mb = 0"
                )
            self._check_image(root)
            keep_others_out(root)
            await self._check_mark(root, made=made)
            await _run("btrfs", "quota", "enable", str(root))
            await _metadata_once(root)
            self._ok = True
            return root

    def _check_image(self, root: Path) -> None:
        """RequestError when the filesystem at `root` is not mounted whole and nosuid,nodev
        from a loop device over the configured image (attacker round 174: workspaces.image
        changed while the old one stayed mounted, and workspaces made on the old one were
        recorded as the new one's), or the image's path has something mounted over it."""
        mounted = mount_at(root)
        if mounted is None:
            raise RequestError(f"nothing is mounted at {root} any more; try again")
        if mounted.root != "/":
            # A subvolume of it: another tree than the one its workspaces were recorded on
            # (attacker round 175).
            raise RequestError(
                f"the filesystem at {root} is mounted from its folder {mounted.root}, not its "
                f"top level: an operator unmounts it (umount {root}), then the daemon mounts it "
                "whole"
            )
        if not _SAFE_OPTIONS.issubset(mounted.options):
            raise RequestError(
                f"the filesystem at {root} is mounted without nosuid,nodev: an operator mounts "
                f"it again with them (mount -o remount,nosuid,nodev {root})"
            )
        image = _loop_image(mounted)
        if image is None:
            # Not a loop device, or a node that is not there any more: nothing says which
            # file it reads (attacker round 178: a copy of the image, carrying its mark, was
            # mounted through a node removed afterwards and taken for the image).
            raise RequestError(
                f"the filesystem at {root} is mounted from {mounted.source}, not from a loop "
                f"device over the workspaces image {self._image} (workspaces.image): an "
                f"operator unmounts it (umount {root}), then the daemon mounts the image"
            )
        self._refuse_mounted_over()
        if not image.is_file(self._image):
            named = image.path()
            moved = named == os.path.realpath(self._image)
            which = " (a file that path no longer leads to)" if moved else ""
            raise RequestError(
                f"the filesystem mounted at {root} is the image {named}{which}, not the "
                f"configured one ({self._image}, workspaces.image): an operator unmounts it "
                f"(umount {root}), then the daemon mounts the configured one"
            )

    def _refuse_mounted_over(self) -> None:
        """RequestError when something is mounted on the image's path: the file it leads to
        then is not the file there beneath, whose workspaces the registry names by that path
        (attacker round 176: another image bound over it was mounted, taken for the configured
        one, and every workspace kept on the one beneath was forgotten)."""
        image = Path(os.path.realpath(self._image))
        try:
            over = mount_id_of(image) != mount_id_of(image.parent)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise RequestError(f"cannot look at the workspaces image {image}: {exc}") from exc
        if over:
            raise RequestError(
                f"something is mounted over the workspaces image {image} (workspaces.image): an "
                f"operator unmounts it (umount {image}); the daemon mounts only the image itself"
            )

    async def _check_mark(self, root: Path, *, made: bool) -> None:
        """RequestError when the filesystem at `root` is not the one found at the image's path
        before, told by the mark the daemon made on it then (`_marked`), whatever its device,
        the path of its file or the mount table say: those can all be made to name the image
        while another filesystem is mounted (attacker round 177: another image under the
        image's folder mounted over, a device node named like the image's loop device, a loop
        device pointed at the image after it was mounted). The first time an image path is
        seen, or once the daemon `made` it anew (its file gone, and its line removed by an
        operator: `_refuse_making_a_recorded_image`), its filesystem's mark is recorded."""
        image = os.path.realpath(self._image)

        def check() -> None:
            marks = _read_marks(self._marks)
            if made or image not in marks:
                marks[image] = _marked(root)
                replace_json(self._marks, marks)
                return
            found = _mark_of(root)
            if found != marks[image]:
                raise RequestError(
                    f"the filesystem at {root} is not the one first found at the workspaces "
                    f"image {image} (it does not carry that one's mark, {root / _MARK}): an "
                    f"operator unmounts it (umount {root}) and mounts the image itself, or "
                    f"forgets the old one by removing its line from {self._marks}"
                )

        await FILESYSTEM_THREADS.run(_DAEMON, check)

    async def _mount(self, root: Path) -> bool:
        """Mount the image at `root`, made first when it is missing; whether it was made."""
        if os.geteuid() != 0:
            raise RequestError(
                f"fresh workspaces get a disk budget (workspaces.budget_mb={self.budget_mb}) "
                f"on a filesystem of their own mounted at {root}, and this daemon is not root, "
                "so it cannot mount one: an operator mounts it (docs/operations.md), or set "
                "workspaces.budget_mb = 0"
            )
        self._refuse_mounted_over()
        made = not self._image.exists()
        if made:
            await self._refuse_making_a_recorded_image()
            await self._make_image()
        await _run("mount", "-o", f"loop,{_MOUNT_OPTIONS}", str(self._image), str(root))
        root.chmod(0o700)  # the daemon's alone (attacker round 181)
        log.info("mounted the workspaces filesystem %s on %s", self._image, root)
        return made

    async def _refuse_making_a_recorded_image(self) -> None:
        """RequestError when the missing image is one the daemon found before: its disk may
        not be mounted yet (attacker round 178: a daemon started before its data disk made a
        new image in the bare folder, and forgot every workspace kept on the real one), or it
        was moved; only an operator can say it was deleted for good."""
        image = os.path.realpath(self._image)
        marks = await FILESYSTEM_THREADS.run(_DAEMON, lambda: _read_marks(self._marks))
        if image in marks:
            raise RequestError(
                f"the workspaces image {image} is missing, and workspaces kept on it are "
                f"recorded: mount the disk it is on (and order the daemon after that mount: "
                f"RequiresMountsFor=), or, if it was deleted for good, remove its line from "
                f"{self._marks} (the daemon then makes a new one, and forgets what was kept on "
                "the old one)"
            )

    async def _make_image(self) -> None:
        self._image.parent.mkdir(parents=True, exist_ok=True)
        partial = self._image.with_suffix(".partial")
        size = self._filesystem_mb << 20
        free = shutil.disk_usage(self._image.parent).free
        if free < size:
            raise RequestError(
                f"the workspaces filesystem needs {self._filesystem_mb} MiB at {self._image} "
                f"and only {free >> 20} MiB are free; free space or lower "
                "workspaces.filesystem_mb"
            )
        fd = os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            # Reserved, not sparse: the host's disk cannot run out under it later.
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
        # Metadata stored once: the quotas count it once (see `_metadata_once`). Data and
        # metadata in the same chunks: a chunk set aside for metadata holds no data however
        # empty, and one principal's deleted small files pinned most of the filesystem as
        # metadata no quota counts; another's write then met "No space left on device" within
        # its share (attacker round 153).
        await _run(
            "mkfs.btrfs", "-q", "-f", "--mixed", "-m", "single", "-d", "single", str(partial)
        )
        partial.rename(self._image)

    async def lasting(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        # Mounted first: before that the sessions root does not show what is on the filesystem.
        folder = await self._ensure() / name
        if os.path.lexists(folder) and not _half_made(folder, owner):
            return folder
        if os.path.lexists(folder):
            await _run("btrfs", "subvolume", "delete", str(folder))
        return await self.create(name, owner, principal)

    def folder_for(self, name: str) -> Path:
        # The mount point's path: the same before the filesystem is mounted on it and after.
        return Path(os.path.realpath(self._root)) / name

    async def ready(self) -> str:
        await self._ensure()  # the filesystem in view is the one the image path stands for
        return f"btrfs:{os.path.realpath(self._image)}"

    async def create(self, name: str, owner: tuple[int, int] | None, principal: str) -> Path:
        root = await self._ensure()
        folder = root / name
        # Made in its principal's quota group: the kernel holds all of them, kept ones too, to
        # the principal's share of the filesystem (attacker round 98: kept workspaces filled it
        # and another principal's fresh session got "No space left on device").
        try:
            group = await self._group_of(root, principal) if self.share_mb else None
            await _run(
                "btrfs", "subvolume", "create", *(("-i", group) if group else ()), str(folder)
            )
        except (OSError, RequestError) as exc:
            if not _out_of_room(exc):
                raise
            log.warning("no room for a new workspace of %s: %s", principal, exc)
            raise Overloaded(
                "the workspaces filesystem has no room for another workspace; close sessions "
                "with delete_workspace=true, or retry later"
            ) from exc
        except BaseException:
            # Cut short (the daemon stops): the subvolume may be there, never handed over.
            if os.path.lexists(folder):
                with contextlib.suppress(RequestError):
                    await _run("btrfs", "subvolume", "delete", str(folder))
            raise
        try:
            await _run("btrfs", "qgroup", "limit", f"{self.budget_mb}M", str(folder))
            give_to(folder, owner)
        except BaseException as exc:
            with contextlib.suppress(RequestError):
                await _run("btrfs", "subvolume", "delete", str(folder))
            if isinstance(exc, OSError) and exc.errno == errno.EDQUOT:
                raise Overloaded(
                    f"the workspaces of principal {principal!r} fill its share of the "
                    f"workspaces filesystem ({self.share_mb} MiB), those of its closed sessions "
                    "kept without delete_workspace included (they go a while after their "
                    "close): close sessions with delete_workspace=true, or retry later"
                ) from exc
            raise
        return folder

    async def _group_of(self, root: Path, principal: str) -> str:
        """The quota group (level 1) of `principal`'s workspaces, made and limited to its share
        once per start of the daemon (the operator may have changed the share). Which group is
        whose is kept on the filesystem itself, in a file only root may read or write. Only that
        file's update waits for others: a slow btrfs command for one principal's group does not
        queue every fresh session (attacker round 99's lead)."""
        async with self._grouping:
            groups = await FILESYSTEM_THREADS.run(_DAEMON, lambda: _read_groups(root))
            number = groups.get(principal)
            if number is None:
                number = max(groups.values(), default=0) + 1
                groups[principal] = number
                await FILESYSTEM_THREADS.run(_DAEMON, lambda: replace_json(root / _GROUPS, groups))
        group = f"1/{number}"
        if group not in self._groups_ready:
            # Made (again, if an earlier try failed after the file named it) and limited.
            try:
                await _run("btrfs", "qgroup", "create", group, str(root))
            except RequestError as exc:
                if "exists" not in str(exc):
                    raise
            await _run("btrfs", "qgroup", "limit", f"{self.share_mb}M", group, str(root))
            self._groups_ready.add(group)
        return group

    async def delete(self, folder: Path, owner: str) -> bool:
        # The subvolumes inside it first, deepest first: sandboxes cannot make any (their
        # seccomp filter refuses btrfs ioctls), but an operator or an older version may have,
        # and btrfs will not delete a subvolume that holds another.
        root = await self._ensure()
        nested = await FILESYSTEM_THREADS.run(_DAEMON, lambda: _nested_ids(root, folder))
        if nested:
            # Removing their entries inside a full workspace needs room in it: its budget
            # goes first. Only then: lifting a limit needs room on the filesystem, and with it
            # full (principals' shares together may fill it) no workspace could be deleted
            # any more (attacker round 179); deleting a subvolume itself needs none.
            await _run("btrfs", "qgroup", "limit", "none", str(folder))
        for inside in nested:
            # By id, not by a path through the workspace, which is followed through whatever
            # links it holds when it is used (attacker round 181). The kernel still finds it
            # again by its name in its folder (round 183: a rename racing the deletion swapped
            # it for a sibling): only in the same workspace, and only its own processes, of
            # which none runs now, could rename there.
            await _run("btrfs", "subvolume", "delete", "--subvolid", str(inside), str(root))
        await _run("btrfs", "subvolume", "delete", str(folder))
        return await _in_owners_thread(folder, owner, lambda: not folder.exists())
