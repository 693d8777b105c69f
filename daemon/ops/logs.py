"""Structured logs: one JSON object per line on standard error (journald and log shippers read it).

Every line has time, level, logger and message, then the call's fields: those bound with
`log_context` for everything logged while handling a call (the sandbox's warnings included), and
those passed as `extra=` to one log call::

    with log_context(session=session.id, tool_use_id=tool_use.id):
        log.info("decided", extra={"decision_id": decision.decision_id})

`configure_logging(json=False)` gives the same fields as readable text for a terminal.
"""

from __future__ import annotations

import contextlib
import contextvars
import json as jsonlib
import logging
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, TextIO, get_args

LogLevel = Literal["debug", "info", "warning", "error", "critical"]
"""The accepted level names (for the config)."""

#: Attributes every LogRecord has; anything else on a record came from `extra=`.
_RECORD_ATTRIBUTES = frozenset(
    logging.LogRecord("", logging.INFO, "", 0, "", None, None).__dict__
) | {"message", "asctime", "taskName"}
#: The leading keys of every line, in this order; fields never overwrite them.
_BASE_KEYS = ("time", "level", "logger", "message")
#: Marks the handler `configure_logging` installed, so calling it again replaces only that one.
_OURS = "_tooljail_handler"

_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})
_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "tooljail_log_context", default=_NO_FIELDS
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add `fields` to every line logged inside (in this task and the tasks it starts)."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    """Bound context first, then the record's own extras (which win)."""
    fields = dict(_context.get())
    for key, value in record.__dict__.items():
        if key not in _RECORD_ATTRIBUTES and not key.startswith("_"):
            fields[key] = value
    for key in _BASE_KEYS:
        fields.pop(key, None)
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


_ESCAPED_IN_JSON = {code: f"\\u{code:04x}" for code in (*range(0x80, 0xA0), 0x2028, 0x2029)}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: a Path or an enum in `extra=` must not cost the line.
        line = jsonlib.dumps(entry, ensure_ascii=False, separators=(",", ":"), default=str)
        # What readers split lines at besides \n (U+2028, U+2029, NEL) and the other C1 controls
        # go out escaped: a message (an error quoting a file name) must stay one record.
        return line.translate(_ESCAPED_IN_JSON)


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        line = (
            f"{_timestamp(record)} {record.levelname.lower():<8} {record.name}: "
            f"{record.getMessage()}"
        )
        fields = " ".join(f"{key}={value}" for key, value in _fields(record).items())
        if fields:
            line = f"{line} {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        if record.stack_info:
            line = f"{line}\n{self.formatStack(record.stack_info)}"
        return line


def parse_level(level: str) -> int:
    """The logging level for a name such as "info" (any case).

    Raises:
        ValueError: Not a level name; the message lists the valid ones.
    """
    name = level.strip().lower()
    if name not in get_args(LogLevel):
        raise ValueError(
            f"unknown log level {level!r}; use one of: {', '.join(get_args(LogLevel))}"
        )
    number: int = logging.getLevelNamesMapping()[name.upper()]
    return number


class FloodGuard(logging.Filter):
    """Lets at most `burst` records of one log statement (its file and line: libraries format
    their messages before logging them, so no two texts need be alike) through per `period_s`;
    the next one let through says how many were dropped meanwhile.

    Hostile inputs can make a library warn for every message they send (the MCP SDK logs a
    traceback per malformed notification): without this, a server could fill the log's disk.
    """

    def __init__(self, burst: int = 10, period_s: float = 10.0, max_keys: int = 1024) -> None:
        super().__init__()
        self._burst = burst
        self._period_s = period_s
        self._max_keys = max_keys
        self._windows: dict[tuple[str, int], list[float]] = {}
        """Per message: [window start, records let through in it, records dropped]."""

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        key = (record.pathname, record.lineno)
        window = self._windows.get(key)
        if window is None or now - window[0] >= self._period_s:
            if window is None and len(self._windows) >= self._max_keys:
                # Only statements that went quiet are forgotten: a flooding one keeps its count.
                self._windows = {
                    k: w for k, w in self._windows.items() if now - w[0] < self._period_s
                }
            dropped = int(window[2]) if window is not None else 0
            self._windows[key] = [now, 1, 0]
            if dropped:
                record.msg = f"{record.msg} [{dropped} more like this dropped]"
            return True
        if window[1] < self._burst:
            window[1] += 1
            return True
        window[2] += 1
        return False


def configure_logging(
    json: bool = True, level: str = "info", stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record at `level` or above to `stream` (standard error), one per line.

    Calling it again (e.g. after the config was loaded) replaces the handler it installed
    before and leaves other handlers (a test's capture) alone.

    Args:
        json: One JSON object per line; False: readable text.
        level: debug, info, warning, error or critical.
        stream: Where lines go (default: standard error, as systemd and containers expect).

    Returns:
        The installed handler.

    Raises:
        ValueError: `level` is not a level name.
    """
    number = parse_level(level)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    handler.addFilter(FloodGuard())
    setattr(handler, _OURS, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(number)
    return handler
