"""Deferred tools: left out of ListTools, found by ToolSearch, still callable (also by alias)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic.types import ToolParam
from pydantic import TypeAdapter

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def deferring_daemon(short_tmp: Path) -> Iterator[RunningDaemon]:
    workspace = short_tmp / "ws-deferred"
    workspace.mkdir()
    with running_daemon(
        workspace,
        short_tmp / "deferred.sock",
        sandbox={"enabled": False},
        deferred_tools=["MultiEdit", "LS"],
    ) as daemon:
        yield daemon


def test_deferred_tools_are_left_out_unless_asked(deferring_daemon: RunningDaemon) -> None:
    listed = deferring_daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30)
    names = {t.name for t in listed.tools}
    assert "MultiEdit" not in names and "LS" not in names and "ToolSearch" in names
    everything = deferring_daemon.stub.ListTools(
        pb.ListToolsRequest(include_deferred=True), timeout=30
    )
    deferred = {t.name for t in everything.tools if t.defer_loading}
    assert deferred == {"MultiEdit", "LS"}
    as_json = {t["name"]: t for t in json.loads(everything.tools_json)}
    assert as_json["LS"]["defer_loading"] is True
    assert "defer_loading" not in as_json["Read"]


def test_tool_search_finds_a_deferred_tool_with_a_valid_definition(
    deferring_daemon: RunningDaemon,
) -> None:
    found = deferring_daemon.execute(
        "ToolSearch", {"query": "several edits to one file at once", "max_results": 3}
    )
    assert not found.result.is_error, text_of(found)
    definitions = json.loads(text_of(found))
    assert definitions[0]["name"] == "MultiEdit"
    for definition in definitions:
        TypeAdapter(ToolParam).validate_python(definition)
    nothing = deferring_daemon.execute("ToolSearch", {"query": "zzzz qqqq"})
    assert "No matching tools" in text_of(nothing)


def test_a_deferred_tool_can_still_be_called(deferring_daemon: RunningDaemon) -> None:
    listing = deferring_daemon.execute("LS", {"path": str(deferring_daemon.workspace.resolve())})
    assert not listing.result.is_error, text_of(listing)
