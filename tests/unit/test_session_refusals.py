"""A session remembers the calls the policy refused, for the policy's recent_refusals: per tool,
within the window, and never more than MAX_REFUSALS_KEPT of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.sessions.session import MAX_REFUSALS_KEPT, Session


def test_refusals_are_counted_per_tool_within_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = Session(id="s", workspace=tmp_path)
    now = [1000.0]
    monkeypatch.setattr("daemon.sessions.session.time.monotonic", lambda: now[0])
    for _ in range(3):
        session.record_refusal("Bash", "deny", "h1")
    session.record_refusal("Bash", "ask", "h2")
    session.record_refusal("Read", "deny", "h1")
    assert session.refusals_of("Bash", "h1", 600) == {"deny": 3, "ask": 0}
    assert session.refusals_of("Bash", "h2", 600) == {"deny": 0, "ask": 1}
    assert session.recent_refusals(600) == {
        "Bash": {"deny": 3, "ask": 1},
        "Read": {"deny": 1, "ask": 0},
    }
    now[0] += 601
    session.record_refusal("Read", "ask", "h1")
    assert session.recent_refusals(600) == {"Read": {"deny": 0, "ask": 1}}
    assert session.refusals_of("Bash", "h1", 600) == {"deny": 0, "ask": 0}


def test_a_flood_of_refusals_is_bounded(tmp_path: Path) -> None:
    session = Session(id="s", workspace=tmp_path)
    for _ in range(10 * MAX_REFUSALS_KEPT):
        session.record_refusal("Bash", "deny", "h")
    assert session.recent_refusals(600) == {"Bash": {"deny": MAX_REFUSALS_KEPT, "ask": 0}}
