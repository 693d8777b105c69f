"""The `tooljail` command: serve the daemon, list tools, call tools."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path

import grpc

from daemon.client.connection import (
    DEFAULT_TARGET,
    ConnectionOptionError,
    add_arguments,
    client_log_level,
    from_args,
)
from daemon.config import ConfigError, load_settings
from daemon.errors import TooljailError
from daemon.ops.logs import configure_logging

log = logging.getLogger(__name__)


def _serve(args: argparse.Namespace) -> int:
    from daemon.app.daemon import Daemon

    try:
        settings = load_settings(
            args.config, listen=args.listen, workspace=args.workspace, audit_log=args.audit_log
        )
    except ConfigError as exc:
        print(f"tooljail: {exc}", file=sys.stderr)
        return 2
    configure_logging(json=settings.logging.format == "json", level=settings.logging.level)
    daemon = Daemon(settings)
    # From here on, through the daemon's logging: one line each (JSON in the journal), never a
    # bare traceback spread over many lines.
    try:
        asyncio.run(daemon.run_until_signalled())
    except TooljailError as exc:
        log.critical("cannot start: %s", exc)
        return 1
    except Exception:
        log.critical("stopped by an unexpected error", exc_info=True)
        return 1
    return 0


def _tools(args: argparse.Namespace) -> int:
    from daemon.client.commands import print_tools

    return print_tools(from_args(args), args.session, args.timeout, args.json)


def _call_anthropic(args: argparse.Namespace) -> int:
    from daemon.client.anthropic_json import call_json

    if args.name or args.json or args.id:
        print(
            "tooljail call --anthropic: the tool_use blocks come on stdin only "
            "(drop NAME, --json and --id)",
            file=sys.stderr,
        )
        return 2
    output = call_json(sys.stdin.read(), from_args(args), args.session, args.timeout)
    sys.stdout.write(output.stdout)
    sys.stderr.write(output.stderr)
    return output.code


def _mcp(args: argparse.Namespace) -> int:
    try:
        from daemon.client.mcp_bridge import run_mcp
    except ImportError as exc:
        print(
            f"tooljail mcp: the MCP SDK is missing ({exc}); install it with "
            "pip install 'tooljail[mcp]'",
            file=sys.stderr,
        )
        return 2
    return run_mcp(from_args(args), args.session, args.timeout)


def _call(args: argparse.Namespace) -> int:
    from daemon.client.call import run_calls, tool_uses_from

    if args.anthropic:
        return _call_anthropic(args)

    try:
        tool_uses = tool_uses_from(args.name, args.input, args.id)
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"tooljail call: {exc}", file=sys.stderr)
        return 2
    from tooljail.wire import pb_grpc

    with from_args(args).channel() as channel:
        return run_calls(
            pb_grpc.ExecutorStub(channel),
            tool_uses,
            session=args.session,
            timeout=args.timeout,
            as_json=args.json,
            approval_token=args.approval_token,
        )


def _status(args: argparse.Namespace) -> int:
    from daemon.client.commands import print_status

    return print_status(from_args(args), args.timeout, args.json)


def _approvals(args: argparse.Namespace) -> int:
    from daemon.client.commands import approvals

    if args.action != "list" and not args.approval_id:
        print(f"tooljail: approvals {args.action} needs the approval id", file=sys.stderr)
        return 2
    return approvals(
        from_args(args),
        args.timeout,
        args.json,
        args.action,
        args.approval_id,
        scope=args.scope,
        note=args.note,
    )


def _config(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"tooljail: {exc}", file=sys.stderr)
        return 2
    if args.action == "check":
        print(f"configuration OK{f' ({args.config})' if args.config else ''}")
        return 0
    # SecretStr fields print as '**********': secrets never reach the terminal.
    print(settings.model_dump_json(indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="tooljail", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the daemon")
    serve.add_argument("--listen", help="unix:///path/to.sock or host:port")
    serve.add_argument("--workspace", type=Path, help="the default session's workspace directory")
    serve.add_argument("--config", type=Path, help="TOML config file")
    serve.add_argument("--audit-log", help="file for audit lines ('-' for stdout)")
    serve.set_defaults(func=_serve)

    config = sub.add_parser("config", help="validate or show the configuration")
    config.add_argument("action", choices=["check", "show"])
    config.add_argument("--config", type=Path, help="TOML config file")
    config.set_defaults(func=_config)

    target = os.environ.get("TOOLJAIL_TARGET", DEFAULT_TARGET)
    for name, func, help_text in (
        ("tools", _tools, "list the tools this caller may use"),
        ("call", _call, "execute tool_use blocks"),
        ("status", _status, "a short health summary of a running daemon"),
    ):
        command = sub.add_parser(name, help=help_text)
        add_arguments(command, target)
        command.add_argument("--session", default="", help="session id (default session if empty)")
        command.add_argument("--json", action="store_true", help="print the full responses as JSON")
        command.add_argument("--timeout", type=float, default=900.0, help="seconds to wait")
        command.set_defaults(func=func)
        if name == "call":
            command.add_argument("name", nargs="?", help="tool name (else tool_use JSON on stdin)")
            command.add_argument("input", nargs="?", help="tool input as a JSON object")
            command.add_argument(
                "--id", default="", help="tool_use id to send (default: a fresh one per call)"
            )
            command.add_argument(
                "--approval-token", default="", help="a human-approved token from an ASK answer"
            )
            command.add_argument(
                "--anthropic",
                action="store_true",
                help="read an assistant message (or tool_use blocks) on stdin, print the user "
                "message of tool_result blocks to send back",
            )

    approvals = sub.add_parser(
        "approvals", help="list the calls waiting for your approval, approve or deny one"
    )
    add_arguments(approvals, target)
    approvals.add_argument("action", nargs="?", default="list", choices=["list", "approve", "deny"])
    approvals.add_argument("approval_id", nargs="?", default="", help="from the list")
    approvals.add_argument(
        "--scope",
        choices=["once", "session"],
        default="once",
        help="approve this call only, or similar calls for the rest of its session",
    )
    approvals.add_argument("--note", default="", help="why (shown to the model on a deny)")
    approvals.add_argument("--json", action="store_true", help="print the answers as JSON")
    approvals.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    approvals.set_defaults(func=_approvals)

    mcp = sub.add_parser("mcp", help="serve the daemon's tools to an MCP client over stdio")
    add_arguments(mcp, target)
    mcp.add_argument("--session", default="", help="session id (default session if empty)")
    mcp.add_argument("--timeout", type=float, default=900.0, help="seconds to wait per call")
    mcp.set_defaults(func=_mcp)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tooljail` console script."""
    args = build_parser().parse_args(argv)
    if args.func is not _serve:
        # A client: readable lines on stderr; `serve` sets up the daemon's own from its settings.
        configure_logging(json=False, level=client_log_level())
    try:
        code: int = args.func(args)
    except grpc.RpcError as exc:
        print(f"tooljail: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except ConnectionOptionError as exc:
        print(f"tooljail: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
