"""Blocking byte streams for the proxy's worker threads: a plain socket, and TLS over one.

Carrying an exchange whose bytes must be read (HTTP relayed, or intercepted to add a credential)
costs CPU per byte; asyncio's TLS adds a copy, a callback and a small read per record on top of
OpenSSL's work and keeps all of it on the one event-loop thread. Here each connection's carrying
runs in a thread of its own over blocking sockets (OpenSSL and the socket calls release the GIL),
and TLS goes through memory BIOs so that one socket read feeds many records and one socket write
sends many: a syscall per 256 KiB rather than per 16 KiB record.

Every stream is ended from any thread by shutting its socket down (see `shutter`), which wakes a
thread blocked on it; that is how a spent budget or the call's end stops a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar, cast

RAW = 1 << 18
"""Bytes asked of the socket per read (TLS: several records at once)."""
_INTERRUPT_GRACE_S = 10.0
"""How long a cancelled step may take to notice its streams were shut down."""

T = TypeVar("T")


def shutter(*socks: socket.socket) -> Callable[[], None]:
    """Ends each of `socks` both ways, callable from any thread (it wakes whoever waits on
    them; shutting down a closed socket is harmless)."""

    def shut() -> None:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    return shut


class ByteStream(Protocol):
    """What the relay needs of a connection."""

    sock: socket.socket
    """The socket under it (shut down to interrupt the stream from another thread)."""

    def recv_into(self, buffer: memoryview) -> int:
        """Read at least one byte into `buffer` (blocking); 0 at the end of the stream."""

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Send all of `data` (blocking)."""


class PlainStream:
    """A connected socket, switched to blocking mode."""

    def __init__(self, sock: socket.socket, timeout: float | None = None) -> None:
        self.sock = sock
        sock.settimeout(timeout)

    def recv_into(self, buffer: memoryview) -> int:
        return self.sock.recv_into(buffer)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        self.sock.sendall(data)


class TlsStream:
    """TLS over a blocking socket through memory BIOs; `timeout` bounds each socket wait of
    the handshake (and of anything else until `settimeout` changes it)."""

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
        timeout: float | None,
    ) -> None:
        self.sock = sock
        sock.settimeout(timeout)
        self._raw = bytearray(RAW)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming,
            self._outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
        )
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if self._incoming.eof:
                    raise ConnectionError("the peer closed during the TLS handshake") from None
                self._flush()
                self._fill()
        self._flush()

    def settimeout(self, timeout: float | None) -> None:
        """Bound each further socket wait (None: wait until interrupted)."""
        self.sock.settimeout(timeout)

    def _flush(self) -> None:
        if self._outgoing.pending:
            self.sock.sendall(self._outgoing.read())

    def _fill(self) -> None:
        count = self.sock.recv_into(self._raw)
        if count:
            self._incoming.write(memoryview(self._raw)[:count])
        else:
            self._incoming.write_eof()

    def recv_into(self, buffer: memoryview) -> int:
        """Decrypt what has arrived into `buffer` (all the records one read brought, as far as
        they fit); blocks only while nothing at all is there. A peer closing without TLS's
        close_notify counts as the end too: HTTP framing, not TLS, tells a cut answer."""
        got = 0
        while got < len(buffer):
            try:
                count = cast(int, self._tls.read(len(buffer) - got, buffer[got:]))
            except ssl.SSLWantReadError:
                if got or (self._incoming.eof and not self._incoming.pending):
                    break
                self._flush()
                self._fill()
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not count:
                break
            got += count
        return got

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        self._tls.write(data)
        self._flush()


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


async def in_thread(step: Callable[[], T], *, interrupt: Callable[[], None]) -> T:
    """Run the blocking `step` in a thread of its own and wait for it. When the waiting task is
    cancelled, `interrupt` (which must wake the step, e.g. shut its sockets down) is called
    and the step's end awaited, so that nothing of it runs on after the connection is over.

    A thread per step rather than a pool: a connection may stay blocked for as long as its call
    lasts, and a pool's queue would let one call's idle connections hold up another's."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            result = step()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting task as is
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                loop.call_soon_threadsafe(_settle, done, None, exc)
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, done, result, None)

    threading.Thread(target=run, name="tooljail-egress", daemon=True).start()
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        interrupt()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(done, _INTERRUPT_GRACE_S)
        raise
