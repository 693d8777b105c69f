"""Clients of the daemon that speak other dialects: Anthropic JSON on stdin, MCP over stdio.

Both talk to a running daemon over its gRPC API, like any other client; they hold no state of the
daemon and can run on another machine than the daemon does.
"""

from __future__ import annotations

__all__ = ["grpc_target"]


def grpc_target(raw: str) -> str:
    """A daemon address as gRPC expects it (`unix:///path` and `unix:/path` are both accepted).

    Examples:
        >>> grpc_target("unix:///run/tooljail/tooljail.sock")
        'unix:/run/tooljail/tooljail.sock'
        >>> grpc_target("127.0.0.1:50051")
        '127.0.0.1:50051'
    """
    return "unix:" + raw.removeprefix("unix://") if raw.startswith("unix://") else raw
