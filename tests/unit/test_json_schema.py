"""Input schemas from outside the daemon: checked in processes of their own, bounded in time (a
backtracking regex or a quadratic keyword holds the GIL: in the daemon it would stall every
call, as the attacker round showed)."""

from __future__ import annotations

from daemon.tools.json_schema import IsolatedChecks

EVIL = {
    "type": "object",
    "properties": {"p": {"type": "string", "pattern": "^([A-Za-z0-9_.-]+/?)*$"}},
}


def test_a_check_past_the_deadline_is_stopped_and_the_next_one_works() -> None:
    checks = IsolatedChecks(workers=1, timeout_s=1.0)
    slow = checks.errors(EVIL, {"p": "a" * 40 + "!"}, run_regexes=True)
    assert len(slow) == 1 and "took longer than 1 s and was stopped" in slow[0]
    assert checks.errors(EVIL, {"p": "ok/fine"}, run_regexes=True) == []
    wrong = checks.errors(EVIL, {"p": 3}, run_regexes=True)
    assert wrong == ["- `p`: 3 is not of type 'string'"]


def test_without_regexes_the_same_input_is_checked_at_once() -> None:
    checks = IsolatedChecks(workers=1, timeout_s=30.0)
    assert checks.errors(EVIL, {"p": "a" * 40 + "!"}, run_regexes=False) == []


def test_a_quadratic_keyword_is_bounded_too() -> None:
    schema = {"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}
    items = [{"k": i} for i in range(20_000)] + [[i] for i in range(20_000)]
    checks = IsolatedChecks(workers=1, timeout_s=0.5)
    assert "took longer than" in checks.errors(schema, {"xs": items}, run_regexes=True)[0]


def test_one_principals_slow_inputs_queue_behind_each_other_not_everyones() -> None:
    """Two checking processes for the whole daemon let one principal's slow inputs hold up every
    other's tool calls for 24 s (re-check round). A principal runs one check at a time."""
    import threading

    checks = IsolatedChecks(workers=2, timeout_s=1.5)
    done: list[str] = []

    def slow() -> None:
        checks.errors(EVIL, {"p": "a" * 40 + "!"}, run_regexes=True, who="eve")
        done.append("eve")

    threads = [threading.Thread(target=slow) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert checks.errors(EVIL, {"p": "fine"}, run_regexes=True, who="bob") == []
    eve_done_before_bob = len(done)
    for thread in threads:
        thread.join()
    assert eve_done_before_bob < 2, "bob waited for eve's checks"
