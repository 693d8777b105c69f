"""The bytes each principal's open requests hold (daemon/server/held_requests.py)."""

from __future__ import annotations

import pytest

from daemon.config import ConfigError, load_settings
from daemon.errors import Overloaded
from daemon.server.held_requests import HeldRequests


def test_a_principals_requests_are_held_until_their_rpc_ends_and_bounded_together() -> None:
    held = HeldRequests(100, answer_room=10)
    with held.holding("alice") as take:
        assert held.held("alice") == 10  # room for the answers, from the start
        take(50)
        take(40)
        with pytest.raises(Overloaded, match=r"your open requests hold .* and this one"):
            take(1)
        assert held.held("alice") == 100
        with held.holding("bob") as other:
            other(90)  # each principal has a share of its own
    assert held.held("alice") == 0 and held.held("bob") == 0
    with held.holding("alice") as take:
        take(90)  # let go at the end: the whole share again


def test_a_refused_request_is_not_counted() -> None:
    held = HeldRequests(100, answer_room=10)
    with held.holding("alice") as first, held.holding("alice") as second:
        first(50)
        with pytest.raises(Overloaded):
            second(31)
        second(30)
        assert held.held("alice") == 100
        with pytest.raises(Overloaded), held.holding("alice"):
            pass  # no room left even for an RPC's answers
    assert held.held("alice") == 0


def test_a_share_under_the_largest_request_is_refused_by_the_configuration() -> None:
    with pytest.raises(ConfigError, match="max_held_request_bytes"):
        load_settings(None, max_request_bytes=1 << 20, max_held_request_bytes=1 << 20)
