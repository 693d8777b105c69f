"""The daemon's heap once it serves: what starting built is frozen, what it left behind is gone."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from daemon.ops import heap


class _Node:
    def __init__(self) -> None:
        self.peer: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_settle_collects_startup_garbage_and_freezes_the_rest() -> None:
    alive = [[index] for index in range(1000)]
    left_behind = _Node()
    left_behind.peer = _Node()
    left_behind.peer.peer = left_behind  # a cycle only the collector can free
    gone = weakref.ref(left_behind)
    del left_behind
    frozen_before = gc.get_freeze_count()

    heap.settle()

    assert gone() is None, "garbage frozen at startup would never be freed"
    assert gc.get_freeze_count() >= frozen_before + len(alive)
