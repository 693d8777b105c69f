"""Carrying a tunnel's bytes between two sockets inside the kernel (splice through a pipe).

A tunnel's payload is opaque to the proxy once decided, so nothing needs to pass through Python:
splice(2) moves it from one socket into a pipe and from the pipe into the other socket, and the
event loop only waits for readiness. Every chunk is metered before it is passed on, so a spent
budget stops the flow at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from collections.abc import Callable

_CHUNK = 1 << 20
_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


async def _ready(sock: socket.socket, *, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    fd = sock.fileno()
    if fd < 0:
        raise OSError("the socket was closed")
    (loop.add_writer if write else loop.add_reader)(fd, ready.set_result, None)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def splice_pump(
    source: socket.socket, sink: socket.socket, meter: Callable[[int], bool]
) -> None:
    """Move bytes from `source` to `sink` until `source` ends, either side fails or `meter`
    says stop; then end `sink`'s sending side (the other direction may go on)."""
    pipe_r, pipe_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # a bigger pipe moves more per call (the default: 64 KiB)
        fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, _CHUNK)
    try:
        while True:
            try:
                moved = os.splice(source.fileno(), pipe_w, _CHUNK, flags=_FLAGS)
            except BlockingIOError:
                await _ready(source, write=False)
                continue
            if moved == 0 or not meter(moved):
                break
            while moved:
                try:
                    moved -= os.splice(pipe_r, sink.fileno(), moved, flags=_FLAGS)
                except BlockingIOError:
                    await _ready(sink, write=True)
    except OSError:
        pass  # a reset or shut-down socket: this direction is over
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
