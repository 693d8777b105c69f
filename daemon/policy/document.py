"""The policy input documents, version 1 (see policies/README.md and policies/input.schema.json)."""

from __future__ import annotations

from typing import Any

from daemon.models import Caller
from daemon.session import Session
from daemon.tools.contract import AnyTool, ToolInput, ToolTraits, TouchedPath
from daemon.tools.registry import ToolDefinition

INPUT_VERSION = 1


def _traits(name: str, traits: ToolTraits) -> dict[str, Any]:
    return {
        "name": name,
        "read_only": traits.read_only,
        "destructive": traits.destructive,
        "concurrency_safe": traits.concurrency_safe,
        "sandboxed": traits.sandboxed,
    }


def _session(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "workspace": str(session.workspace),
        "mode": session.mode,
        "grants": [grant.to_policy() for grant in session.grants],
    }


def _caller(caller: Caller) -> dict[str, Any]:
    return {"principal": caller.principal, "transport": caller.transport}


def call_document(
    tool: AnyTool,
    args: ToolInput,
    paths: list[TouchedPath],
    session: Session,
    caller: Caller,
) -> dict[str, Any]:
    """The input of data.tooljail.authz.decision for one call."""
    traits = _traits(tool.name, tool.traits)
    traits["read_only"] = tool.is_read_only(args)
    traits["concurrency_safe"] = tool.is_concurrency_safe(args)
    return {
        **tool.policy_facts(args, session),
        "version": INPUT_VERSION,
        "tool": traits,
        "input": args.model_dump(mode="json", by_alias=True),
        "paths": [
            {"path": str(p.path), "access": p.access, "inside_workspace": p.inside_workspace}
            for p in paths
        ],
        "session": _session(session),
        "caller": _caller(caller),
    }


def listing_document(
    definitions: list[ToolDefinition], session: Session, caller: Caller
) -> dict[str, Any]:
    """The input of data.tooljail.authz.visible_tools for ListTools."""
    return {
        "version": INPUT_VERSION,
        "tools": [_traits(d.name, d.traits) for d in definitions],
        "session": _session(session),
        "caller": _caller(caller),
    }
