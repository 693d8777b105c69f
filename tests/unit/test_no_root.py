"""Which containers have no root, and which are refused, from who on the host could change the
workspace's path (daemon/app/sandbox.py `_no_root`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.app.sandbox import _no_root
from daemon.errors import ToolError
from daemon.sessions.session import Session


def _session() -> Session:
    return Session(id="s", workspace=Path("/w"), sandbox_as=(1500, 1500))


def test_a_workspace_no_host_account_can_change_keeps_its_root_runner() -> None:
    assert _no_root(_session(), frozenset(), pinned=True) is False
    assert _no_root(_session(), frozenset(), pinned=False) is False


def test_the_commands_own_account_changing_it_gets_no_root() -> None:
    assert _no_root(_session(), frozenset({1500}), pinned=True) is True


def test_without_a_repository_held_any_changer_gets_no_root_and_nothing_is_refused() -> None:
    assert _no_root(_session(), frozenset({1000}), pinned=False) is True
    assert _no_root(_session(), None, pinned=False) is True


@pytest.mark.parametrize("changers", [frozenset({1000}), frozenset({1000, 1500}), None])
def test_another_account_that_could_swap_a_held_repository_refuses_the_container(
    changers: frozenset[int] | None,
) -> None:
    """Attacker round 126: a folder of the sandbox account's inside a user's project; the
    user's swap ran their code as the sandbox account, whose setuid files made the user that
    account on the host."""
    with pytest.raises(ToolError, match="cannot be made safely there"):
        _no_root(_session(), changers, pinned=True)
