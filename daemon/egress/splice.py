"""Carrying a tunnel's bytes between two sockets inside the kernel (splice through a pipe).

A tunnel's payload is opaque to the proxy once decided, so nothing needs to pass through Python:
splice(2) moves it from one socket into a pipe and from the pipe into the other socket. Each
direction runs in a worker thread over blocking sockets, so a wait for data is a sleep in the
kernel rather than a round through the event loop (which cost more than the copy at gigabytes per
second). Every chunk is metered before it is passed on, so a spent budget stops the flow at once;
shutting a socket down (the call's end, a spent budget) wakes a waiting pump.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Callable

_CHUNK = 1 << 20


def splice_pump(source: socket.socket, sink: socket.socket, meter: Callable[[int], bool]) -> None:
    """Move bytes from `source` to `sink` (both blocking) until `source` ends, either side
    fails or `meter` says stop; then end `sink`'s sending side (the other direction may go on).
    Blocking: run it in a worker thread."""
    pipe_r, pipe_w = os.pipe2(os.O_CLOEXEC)
    with contextlib.suppress(OSError):  # a bigger pipe moves more per call (the default: 64 KiB)
        fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, _CHUNK)
    try:
        while True:
            moved = os.splice(source.fileno(), pipe_w, _CHUNK, flags=os.SPLICE_F_MOVE)
            if moved == 0 or not meter(moved):
                break
            while moved:
                moved -= os.splice(pipe_r, sink.fileno(), moved, flags=os.SPLICE_F_MOVE)
    except OSError:
        pass  # a reset or shut-down socket: this direction is over
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
