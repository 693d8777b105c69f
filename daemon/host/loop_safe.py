"""What the event loop may ask of a filesystem: only what the kernel answers without asking it.

The event loop serves every caller, and a workspace belongs to one of them: whoever may mount on
it (its owner, with fusermount) can put a filesystem there that takes seconds, or forever, to
answer a lookup or a stat. So on the event loop, a path is looked up only in the kernel's caches
(RESOLVE_CACHED: EAGAIN where a lookup would need I/O or a revalidation, which is how a FUSE or
network filesystem is asked), a descriptor is identified from the kernel's own record of it
(/proc/self/fdinfo, which no filesystem is asked for), and a file's attributes and bytes are read
only on a filesystem found served locally when the workspace was pinned
(daemon.host.devices), and bytes only from the page cache (`read_cached`). Anything else raises
NeedsThread, and the work is done again in a worker thread.
"""

from __future__ import annotations

import asyncio
import errno
import os


class NeedsThread(Exception):
    """This filesystem work cannot be bounded on the event loop: do it in a worker thread."""


def on_event_loop() -> bool:
    """True in the thread that runs an asyncio event loop (where nothing may block)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def descriptor_identity(fd: int) -> tuple[int, int]:
    """(mount id, inode number) of an open descriptor, as the kernel records them for it: no
    filesystem is asked, so a hung one cannot hold the caller. OSError for a closed one."""
    info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = os.read(info, 4096)
    finally:
        os.close(info)
    fields = dict(line.split(b":", 1) for line in text.splitlines() if b":" in line)
    try:
        return int(fields[b"mnt_id"]), int(fields[b"ino"])
    except (KeyError, ValueError) as exc:  # kernels before 5.14 do not tell the inode
        raise OSError(
            errno.ENOTSUP, "the kernel does not describe this descriptor", str(fd)
        ) from exc


def read_cached(fd: int, size: int, offset: int, *, in_memory: bool) -> bytes:
    """`size` bytes at `offset` (fewer only where the file ends), as the event loop may read
    them: from the page cache alone (RWF_NOWAIT), or as they are on a filesystem held in memory
    (tmpfs, which does not take that flag). NeedsThread where the disk would be asked."""
    if in_memory:
        return os.pread(fd, size, offset)
    buffer = bytearray(size)
    view = memoryview(buffer)
    done = 0
    while done < size:
        try:
            count = os.preadv(fd, [view[done:]], offset + done, os.RWF_NOWAIT)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EOPNOTSUPP):
                raise NeedsThread("not in the page cache") from exc
            raise
        if count == 0:
            break
        done += count
    return bytes(view[:done])
