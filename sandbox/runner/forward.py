"""The container's only way out in egress mode (standard library only; see runner.py).

An egress container has no network interface but loopback. Programs find the proxy through the
usual variables (HTTP_PROXY and friends) at a loopback port; this forwarder listens there and
carries every connection, byte for byte, to the daemon's proxy through a Unix socket the daemon
bind-mounted into the container. Which call a connection belongs to is known by the socket it
arrives on, not by anything the container says; the forwarder decides nothing.

It runs as the container's root (the command cannot signal or trace it) in its own process,
started by the runner before the command, and ends with the container.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket

#: Where programs in the container find the proxy.
PROXY_HOST = "127.0.0.1"
PROXY_PORT = 3128
_CHUNK = 1 << 18
_PR_SET_PDEATHSIG = 1


def proxy_environment(port: int = PROXY_PORT) -> dict[str, str]:
    """The variables that send HTTP clients (curl, pip, npm, git, Python, Node) to the proxy;
    loopback stays direct, for servers the command itself starts."""
    url = f"http://{PROXY_HOST}:{port}"
    direct = "localhost,127.0.0.1,::1"
    env: dict[str, str] = {}
    for name, value in (
        ("HTTP_PROXY", url),
        ("HTTPS_PROXY", url),
        ("ALL_PROXY", url),
        ("NO_PROXY", direct),
    ):
        env[name] = value
        env[name.lower()] = value
    return env


PROGRAM_SEND_BUFFER = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


async def _carry(
    socket_path: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    # A small, fixed send buffer towards the program (not the kernel's autotuned megabytes):
    # what a program does not read then stays on the proxy's side, where the call's limit on
    # open connections counts it, not in loopback queues no limit covers.
    program = client_w.get_extra_info("socket")
    if program is not None:
        program.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, PROGRAM_SEND_BUFFER)
    try:
        upstream_r, upstream_w = await asyncio.open_unix_connection(socket_path)
    except OSError:
        client_w.close()  # no proxy for this call: the program sees the connection end
        return
    try:
        await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    finally:
        for writer in (client_w, upstream_w):
            writer.close()


async def serve(listener: socket.socket, socket_path: str) -> None:
    """Carry every connection accepted on `listener` to `socket_path` until cancelled."""
    server = await asyncio.start_server(
        lambda r, w: _carry(socket_path, r, w), sock=listener, limit=_CHUNK
    )
    async with server:
        await server.serve_forever()


def bind(port: int = PROXY_PORT) -> socket.socket:
    """The listening socket, bound before the command exists (so it cannot take the port)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((PROXY_HOST, port))
    listener.listen(128)
    return listener


def start(socket_path: str, port: int = PROXY_PORT) -> int:
    """Fork the forwarder; returns its pid once it listens. It dies with the runner."""
    listener = bind(port)
    pid = os.fork()
    if pid:
        listener.close()
        return pid
    code = 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The request and answer channels are the runner's alone.
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        asyncio.run(serve(listener, socket_path))
    except BaseException:  # noqa: BLE001 - a child of fork must never return into the runner
        code = 1
    os._exit(code)
