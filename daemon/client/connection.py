"""The client commands' options for reaching the daemon: its address, and the TLS files and
bearer token a TCP listener may require (the daemon takes the caller's principal from these, never
from a field). The connection itself is the Python client's (`tooljail.Connection`).

The token is read from a file or the TOOLJAIL_TOKEN variable, never from the command line, where
other users of the machine could read it in the process list.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from tooljail.connection import DEFAULT_TARGET, TOKEN_VARIABLE, Connection

__all__ = ["DEFAULT_TARGET", "Connection", "ConnectionOptionError", "add_arguments", "from_args"]

LOG_LEVEL_VARIABLE = "TOOLJAIL_LOG_LEVEL"
"""The level of a client command's own log lines (the daemon takes its level from its settings)."""


def client_log_level() -> str:
    """The log level of a client command: TOOLJAIL_LOG_LEVEL, else warning."""
    return os.environ.get(LOG_LEVEL_VARIABLE, "warning").lower()


class ConnectionOptionError(ValueError):
    """The connection options cannot work (a file missing, half a key pair)."""


def from_args(args: argparse.Namespace) -> Connection:
    """The connection the options `add_arguments` defined ask for (files read now, so a wrong
    option is a clear error before any call)."""
    token = os.environ.get(TOKEN_VARIABLE, "")
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConnectionOptionError(
                f"--token-file {args.token_file}: {exc.strerror or exc}"
            ) from exc
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConnectionOptionError("--tls-cert and --tls-key: give both or neither")
    if args.tls_cert is not None and args.tls_ca is None:
        raise ConnectionOptionError(
            "--tls-cert needs --tls-ca: the daemon's certificate must be checked too"
        )
    try:
        connection = Connection(args.target, token, args.tls_ca, args.tls_cert, args.tls_key)
        if connection.secure:
            connection.credentials()
    except ValueError as exc:
        raise ConnectionOptionError(str(exc)) from exc
    return connection


def add_arguments(parser: argparse.ArgumentParser, default_target: str) -> None:
    """The options every client command takes to reach the daemon."""
    parser.add_argument(
        "--target", default=default_target, help=f"daemon address (default {default_target})"
    )
    parser.add_argument(
        "--tls-ca", type=Path, help="CA certificate to check the daemon's TLS certificate with"
    )
    parser.add_argument("--tls-cert", type=Path, help="client certificate for mTLS")
    parser.add_argument("--tls-key", type=Path, help="the client certificate's private key")
    parser.add_argument(
        "--token-file",
        type=Path,
        help=f"file holding a bearer token (or set {TOKEN_VARIABLE}; never pass it as an argument)",
    )
