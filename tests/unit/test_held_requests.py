"""The bytes each principal's open requests hold (daemon/server/held_requests.py), and what a
request's conversion holds beyond its bytes (daemon/server/convert.py)."""

from __future__ import annotations

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.config import ConfigError, load_settings
from daemon.errors import Overloaded
from daemon.server.convert import VALUE_BYTES, converted_extra
from daemon.server.held_requests import HeldRequests


def test_a_principals_rpcs_hold_until_released_and_are_bounded_together() -> None:
    held = HeldRequests(100, answer_room=10)
    holding = held.hold("alice")
    assert held.held("alice") == 10  # room for the answers, from the start
    holding.take(50)
    holding.take(40)
    with pytest.raises(Overloaded, match=r"your open requests hold .* and this one"):
        holding.take(1)
    assert held.held("alice") == 100
    other = held.hold("bob")
    other.take(90)  # each principal has a share of its own
    holding.release()
    other.release()
    assert held.held("alice") == 0 and held.held("bob") == 0
    held.hold("alice").take(90)  # let go: the whole share again


def test_a_refused_request_is_not_counted_and_a_release_happens_once() -> None:
    held = HeldRequests(100, answer_room=10)
    first, second = held.hold("alice"), held.hold("alice")
    first.take(50)
    with pytest.raises(Overloaded):
        second.take(31)
    second.take(30)
    assert held.held("alice") == 100
    with pytest.raises(Overloaded):
        held.hold("alice")  # no room left even for an RPC's answers
    first.release()
    first.release()
    assert held.held("alice") == 40
    second.release()
    assert held.held("alice") == 0


def test_a_share_under_the_largest_request_is_refused_by_the_configuration() -> None:
    with pytest.raises(ConfigError, match="max_held_request_bytes"):
        load_settings(None, max_request_bytes=1 << 20, max_held_request_bytes=1 << 20)


def test_what_a_conversion_holds_more_is_counted_by_the_values_of_the_tool_inputs() -> None:
    empty = pb.ExecuteRequest(tool_use=pb.ToolUse(id="t", name="Read"))
    assert converted_extra(empty) == 0
    empties = pb.ToolUse(id="t", name="Read")
    empties.input.update({"a": [{} for _ in range(999)]})  # 1,000 values with the list
    batch = pb.ExecuteBatchRequest(tool_uses=[empties, pb.ToolUse(id="u", name="LS"), empties])
    assert converted_extra(batch) == 2_000 * VALUE_BYTES
    assert converted_extra(pb.TurnMessage(tool_use=empties)) == 1_000 * VALUE_BYTES
    assert converted_extra(pb.TurnMessage(end=pb.TurnEnd())) == 0
