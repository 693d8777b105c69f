"""The bytes each principal's open requests hold (daemon/server/held_requests.py), and what a
request's conversion holds beyond its bytes (daemon/server/convert.py)."""

from __future__ import annotations

import sys

import pytest

from daemon.calls.pipeline import CallRequest
from daemon.config import ConfigError, load_settings
from daemon.errors import Overloaded
from daemon.models import ToolUse
from daemon.server.convert import held_size
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


def test_what_a_converted_request_holds_is_its_objects_own_storage() -> None:
    """Attacker rounds 163 and 164: `{}` costs 2 bytes on the wire and 64 converted; a text
    with one character past the BMP takes 4 bytes a character, however few it took there."""
    empty = CallRequest(tool_use=ToolUse(id="t", name="Read", input={}))
    assert held_size(empty) == sys.getsizeof({})
    empties = CallRequest(tool_use=ToolUse(id="t", name="Read", input={"a": [{}] * 1_000}))
    assert held_size(empties) > 1_000 * sys.getsizeof({})
    ascii_text = "a" * 100_000
    wide = "\U0001f600" + "a" * 99_999
    narrow = held_size(ToolUse(id="t", name="Write", input={"content": ascii_text}))
    assert narrow >= 100_000
    assert held_size(ToolUse(id="t", name="Write", input={"content": wide})) >= 4 * 100_000
    batch = [empty, CallRequest(tool_use=ToolUse(id="u", name="Write", input={"c": ascii_text}))]
    assert held_size(batch) >= 100_000
    assert held_size(object()) == 0  # a turn's start or end holds no input
