"""The audit log: JSON lines, to a file or standard output.

Every call gets one ``answered`` record when its answer is ready. An allowed call that may change
something (not read-only) also gets a ``decided`` record just before it runs, so such a call
interrupted by a crash is still on file."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO


class AuditEvent(StrEnum):
    """Which moment of a call a record describes (its ``event`` field)."""

    DECIDED = "decided"
    """Allowed, about to run (calls that are not read-only)."""
    ANSWERED = "answered"
    """Answered: every call has exactly one."""
    APPROVAL_ANSWERED = "approval_answered"
    """An approver approved or denied a pending ask (Admin.Approve, Admin.Deny)."""
    REPLAYED = "replayed"
    """A retry of a call that already ran, answered with the remembered result (it did not run
    again and no policy decision was made)."""


MAX_FIELD_CHARS = 8192
"""A longer text in a record is kept as its start, its length and its digest."""
_KEPT_CHARS = 1024
# json.dumps escapes \n and \r but writes these raw (ensure_ascii=False); JavaScript, Python's
# str.splitlines and many log shippers end lines at them. Only strings can hold them, where the
# \u escape means the same character.
_LINE_ENDS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"})


def bounded(value: Any) -> Any:
    """`value` with every text longer than MAX_FIELD_CHARS replaced by its first characters,
    its length and its SHA-256 (a huge command or input must not make huge audit lines)."""
    if isinstance(value, str):
        if len(value) <= MAX_FIELD_CHARS:
            return value
        raw = value.encode("utf-8", "surrogateescape")
        digest = hashlib.sha256(raw).hexdigest()
        return f"{value[:_KEPT_CHARS]}… [{len(value)} characters, sha256 {digest}]"
    if isinstance(value, dict):
        return {key: bounded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [bounded(item) for item in value]
    return value


class AuditLog:
    """Appends one JSON object per line; safe to call from several threads."""

    def __init__(self, target: str) -> None:
        self._lock = threading.Lock()
        self._owned = target != "-"
        if self._owned:
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            self._stream: TextIO = path.open("a", encoding="utf-8", buffering=1)
        else:
            self._stream = sys.stdout

    def write(self, record: dict[str, Any]) -> None:
        """Write one record as a single line (texts over MAX_FIELD_CHARS shortened, see
        `bounded`; every character some reader takes for a line end escaped)."""
        record = bounded(record)
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a file name that is not UTF-8: as JSON escapes instead
            line = json.dumps(record, separators=(",", ":"), default=str)
        line = line.translate(_LINE_ENDS)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Close the file (standard output is left open)."""
        if self._owned:
            with self._lock:
                self._stream.close()
