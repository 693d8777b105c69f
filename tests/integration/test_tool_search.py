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
        deferred_tools=["Glob", "LS"],
    ) as daemon:
        yield daemon


def test_deferred_tools_are_left_out_unless_asked(deferring_daemon: RunningDaemon) -> None:
    listed = deferring_daemon.stub.ListTools(pb.ListToolsRequest(), timeout=30)
    names = {t.name for t in listed.tools}
    assert "Glob" not in names and "LS" not in names and "ToolSearch" in names
    everything = deferring_daemon.stub.ListTools(
        pb.ListToolsRequest(include_deferred=True), timeout=30
    )
    deferred = {t.name for t in everything.tools if t.defer_loading}
    assert deferred == {"Glob", "LS"}
    as_json = {t["name"]: t for t in json.loads(everything.tools_json)}
    assert as_json["LS"]["defer_loading"] is True
    assert "defer_loading" not in as_json["Read"]


def test_tool_search_finds_a_deferred_tool_with_a_valid_definition(
    deferring_daemon: RunningDaemon,
) -> None:
    session = deferring_daemon.stub.OpenSession(pb.OpenSessionRequest(), timeout=30)
    found = deferring_daemon.execute(
        "ToolSearch",
        {"query": "find files by glob pattern", "max_results": 3},
        session_id=session.id,
    )
    assert not found.result.is_error, text_of(found)
    definitions = json.loads(text_of(found))
    assert definitions[0]["name"] == "Glob"
    for definition in definitions:
        TypeAdapter(ToolParam).validate_python(definition)
    nothing = deferring_daemon.execute("ToolSearch", {"query": "zzzz qqqq"})
    assert "No matching tools" in text_of(nothing)
    # Found once, listed from then on in that session (and only there).
    mine = deferring_daemon.stub.ListTools(pb.ListToolsRequest(session_id=session.id))
    assert "Glob" in {t.name for t in mine.tools}
    default = deferring_daemon.stub.ListTools(pb.ListToolsRequest())
    assert "Glob" not in {t.name for t in default.tools}
    deferring_daemon.execute("ToolSearch", {"query": "list a directory"}, session_id=session.id)
    both = {t.name for t in deferring_daemon.stub.ListTools(
        pb.ListToolsRequest(session_id=session.id)).tools}  # fmt: skip
    assert {"Glob", "LS"} <= both and "ToolSearch" not in both, "nothing left to find"


def test_a_deferred_tool_can_still_be_called(deferring_daemon: RunningDaemon) -> None:
    listing = deferring_daemon.execute("LS", {"path": str(deferring_daemon.workspace.resolve())})
    assert not listing.result.is_error, text_of(listing)


@pytest.mark.docker
def test_plan_mode_offers_only_what_may_run(sandbox_daemon: RunningDaemon) -> None:
    session = sandbox_daemon.stub.OpenSession(pb.OpenSessionRequest(mode="plan"), timeout=30)
    try:
        names = {
            t.name
            for t in sandbox_daemon.stub.ListTools(pb.ListToolsRequest(session_id=session.id)).tools
        }
        # BashOutput only reads (a background command's output): it may run in plan mode.
        assert names == {"Read", "Glob", "Grep", "LS", "BashOutput"}
        unknown = sandbox_daemon.execute("Nope", {}, session_id=session.id)
        offered = text_of(unknown).split("may use are: ", 1)[1].split(". Call", 1)[0]
        assert set(offered.split(", ")) == names
    finally:
        sandbox_daemon.stub.CloseSession(pb.CloseSessionRequest(session_id=session.id))
