"""The `tooljail` command: serve the daemon, list tools, call tools."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

from daemon.config import ConfigError, load_settings
from daemon.errors import TooljailError

DEFAULT_TARGET = "unix:///run/tooljail/tooljail.sock"


def _target(raw: str) -> str:
    return "unix:" + raw.removeprefix("unix://") if raw.startswith("unix://") else raw


def _serve(args: argparse.Namespace) -> int:
    from daemon.runtime import Daemon

    try:
        settings = load_settings(
            args.config, listen=args.listen, workspace=args.workspace, audit_log=args.audit_log
        )
    except ConfigError as exc:
        print(f"tooljail: {exc}", file=sys.stderr)
        return 2
    daemon = Daemon(settings)
    try:
        asyncio.run(daemon.run_until_signalled())
    except TooljailError as exc:
        print(f"tooljail: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def _stub(target: str) -> tuple[grpc.Channel, Any]:
    from daemon._generated.tooljail.v1 import executor_pb2_grpc

    channel = grpc.insecure_channel(_target(target))
    return channel, executor_pb2_grpc.ExecutorStub(channel)


def _tools(args: argparse.Namespace) -> int:
    from daemon._generated.tooljail.v1 import executor_pb2 as pb

    channel, stub = _stub(args.target)
    with channel:
        response = stub.ListTools(
            pb.ListToolsRequest(session_id=args.session), timeout=args.timeout
        )
    if args.json:
        print(json.dumps(json.loads(response.tools_json), indent=2))
        return 0
    for tool in response.tools:
        kind = (
            "read-only" if tool.traits.read_only else "sandboxed" if tool.traits.sandboxed else ""
        )
        first_line = tool.description.strip().splitlines()[0] if tool.description else ""
        print(f"{tool.name:<10} {kind:<10} {first_line}")
    return 0


def _tool_uses_from(args: argparse.Namespace) -> list[dict[str, Any]]:
    """From the command line (NAME [INPUT]) or stdin (a tool_use block, or a list of them)."""
    if args.name:
        raw_input = json.loads(args.input) if args.input else {}
        if not isinstance(raw_input, dict):
            raise ValueError("INPUT must be a JSON object")
        tool_use_id = args.id or f"toolu_cli_{uuid.uuid4().hex[:16]}"
        return [{"id": tool_use_id, "name": args.name, "input": raw_input}]
    document = json.load(sys.stdin)
    blocks = document if isinstance(document, list) else [document]
    if not all(isinstance(b, dict) for b in blocks):
        raise ValueError("stdin must hold a tool_use object or a list of them")
    return [b for b in blocks if b.get("type", "tool_use") == "tool_use"]


def _call(args: argparse.Namespace) -> int:
    from daemon._generated.tooljail.v1 import executor_pb2 as pb

    try:
        blocks = _tool_uses_from(args)
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"tooljail call: {exc}", file=sys.stderr)
        return 2
    tool_uses = [json_format.ParseDict(b, pb.ToolUse(), ignore_unknown_fields=True) for b in blocks]
    channel, stub = _stub(args.target)
    failed = False
    with channel:
        responses = stub.ExecuteBatch(
            pb.ExecuteBatchRequest(session_id=args.session, tool_uses=tool_uses),
            timeout=args.timeout,
        )
        for response in responses:
            failed = failed or response.result.is_error
            if args.json:
                print(json_format.MessageToJson(response, indent=2))
                continue
            outcome = pb.Outcome.Name(response.decision.outcome)
            marker = "error" if response.result.is_error else "ok"
            print(f"--- {response.result.tool_use_id} [{outcome}, {marker}]")
            for block in response.result.content:
                if block.HasField("text"):
                    print(block.text.text)
                else:
                    print(f"<image {block.image.media_type}, {len(block.image.data)} bytes>")
    return 1 if failed else 0


def _status(args: argparse.Namespace) -> int:
    from daemon._generated.tooljail.v1 import executor_pb2 as pb
    from daemon._generated.tooljail.v1 import executor_pb2_grpc

    channel = grpc.insecure_channel(_target(args.target))
    with channel:
        status = executor_pb2_grpc.AdminStub(channel).Status(
            pb.StatusRequest(), timeout=args.timeout
        )
    if args.json:
        print(
            json_format.MessageToJson(status, indent=2, always_print_fields_with_no_presence=True)
        )
        return 0
    health = {True: "healthy", False: "DOWN"}
    print(f"tooljail {status.version} (instance {status.instance_id}), you are {status.principal}")
    print(f"policy    revision {status.policy_revision}, OPA {health[status.opa_healthy]}")
    print(f"sandbox   Docker {health[status.docker_healthy]}, {status.pool_ready} warm containers")
    print(f"calls     {status.in_flight} in flight, {status.sessions} sessions")
    return 0 if status.opa_healthy else 1


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
        command.add_argument("--target", default=target, help=f"daemon address (default {target})")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `tooljail` console script."""
    logging.basicConfig(
        level=os.environ.get("TOOLJAIL_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except grpc.RpcError as exc:
        print(f"tooljail: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
