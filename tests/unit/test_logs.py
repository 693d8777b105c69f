"""Structured logs: the lines as emitted, parsed back."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from daemon.ops.logs import FloodGuard, configure_logging, log_context

log = logging.getLogger("tooljail.test")


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_one_json_object_per_line_with_extra_fields() -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream)

    log.info("decided %s", "allow", extra={"session": "s1", "decision_id": "d-42"})
    log.warning("multi\nline message", extra={"workspace": Path("/srv/ws"), "calls": 3})

    first, second = _lines(stream)
    assert list(first)[:4] == ["time", "level", "logger", "message"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first["time"])
    assert first["level"] == "info"
    assert first["logger"] == "tooljail.test"
    assert first["message"] == "decided allow"
    assert first["session"] == "s1"
    assert first["decision_id"] == "d-42"
    assert second["message"] == "multi\nline message"
    assert second["workspace"] == "/srv/ws"
    assert second["calls"] == 3


def test_level_filters_lines() -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="WARNING", stream=stream)

    log.info("not shown")
    log.debug("not shown either")
    log.error("shown")

    assert [line["message"] for line in _lines(stream)] == ["shown"]


async def test_bound_context_follows_each_call_into_its_tasks() -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="debug", stream=stream)

    async def call(tool_use_id: str) -> None:
        with log_context(session="s1", tool_use_id=tool_use_id):
            await asyncio.sleep(0)
            # A task started inside the call (the sandbox runner) inherits the fields.
            await asyncio.create_task(_log_from_elsewhere())
            log.info("answered", extra={"decision_id": f"d-{tool_use_id}"})

    await asyncio.gather(call("toolu_a"), call("toolu_b"))
    log.info("outside any call")

    lines = _lines(stream)
    for tool_use_id in ("toolu_a", "toolu_b"):
        mine = [line for line in lines if line.get("tool_use_id") == tool_use_id]
        assert [line["message"] for line in mine] == ["container started", "answered"]
        assert all(line["session"] == "s1" for line in mine)
        assert mine[1]["decision_id"] == f"d-{tool_use_id}"
    assert lines[-1] == {key: lines[-1][key] for key in ("time", "level", "logger", "message")}


async def _log_from_elsewhere() -> None:
    logging.getLogger("sandbox.executor").info("container started")


def test_extra_wins_over_context_and_base_keys_cannot_be_overwritten() -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream)

    with log_context(session="outer", level="bogus"):
        log.info("hello", extra={"session": "inner"})

    (line,) = _lines(stream)
    assert line["session"] == "inner"
    assert line["level"] == "info"


def test_exceptions_are_kept_in_the_line() -> None:
    stream = io.StringIO()
    configure_logging(json=True, level="info", stream=stream)

    try:
        raise RuntimeError("OPA went away")
    except RuntimeError:
        log.exception("teardown failed")

    (line,) = _lines(stream)
    assert line["message"] == "teardown failed"
    assert "RuntimeError: OPA went away" in line["exception"]
    assert line["exception"].startswith("Traceback")


def test_reconfiguring_replaces_only_its_own_handler(caplog: pytest.LogCaptureFixture) -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(json=True, level="info", stream=first)
    configure_logging(json=True, level="info", stream=second)

    with caplog.at_level(logging.INFO):
        log.info("once")

    assert first.getvalue() == ""
    assert [line["message"] for line in _lines(second)] == ["once"]
    assert [r.getMessage() for r in caplog.records] == ["once"]  # pytest's handler survived


def test_text_format_for_terminals() -> None:
    stream = io.StringIO()
    configure_logging(json=False, level="info", stream=stream)

    log.info("listening", extra={"listen": "unix:///run/tooljail/tooljail.sock"})

    line = stream.getvalue().rstrip("\n")
    assert re.fullmatch(
        r"\S+Z info     tooljail\.test: listening listen=unix:///run/tooljail/tooljail\.sock",
        line,
    )


def test_default_stream_is_standard_error(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging(json=True, level="info")
    log.info("to stderr")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert json.loads(captured.err)["message"] == "to stderr"


def test_an_unknown_level_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="unknown log level 'verbose'; use one of: debug, info"):
        configure_logging(json=True, level="verbose")


def test_a_flood_of_one_message_is_held_back_and_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    monkeypatch.setattr("daemon.ops.logs.time.monotonic", lambda: now[0])
    guard = FloodGuard(burst=3, period_s=10)

    def record(msg: str, line: int = 1) -> logging.LogRecord:
        return logging.LogRecord("client", logging.WARNING, __file__, line, msg, None, None)

    # Each text unique (as f-strings make them): the statement is what counts.
    passed = [guard.filter(record(f"Unknown SSE event: flood{n}")) for n in range(100)]
    assert passed.count(True) == 3
    assert guard.filter(record("another statement", line=2)), "one flood silenced others"
    many = [guard.filter(record("x", line=1000 + n)) for n in range(2000)]
    assert all(many) and not guard.filter(record("flood again")), "a flood reset by many keys"
    now[0] = 11.0
    later = record("Unknown SSE event: late")
    assert guard.filter(later) and "[98 more like this dropped]" in str(later.msg)


def test_a_json_line_stays_one_line_whatever_the_message_holds() -> None:
    from daemon.ops.logs import JsonFormatter

    hostile = 'policy x\u2028{"level":"info","message":"forged"}\u2029\x85\x9b31m end'
    record = logging.LogRecord("t", logging.CRITICAL, __file__, 1, hostile, None, None)
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert json.loads(line)["message"] == hostile
    assert not any(0x80 <= ord(c) <= 0x9F or c in "\u2028\u2029" for c in line)
