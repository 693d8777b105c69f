"""The audit log: JSON lines, to a file or standard output.

Every call gets one ``answered`` record when its answer is ready. An allowed call that may change
something (not read-only) also gets a ``decided`` record just before it runs, so such a call
interrupted by a crash is still on file."""

from __future__ import annotations

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
        """Write one record as a single line."""
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a file name that is not UTF-8: as JSON escapes instead
            line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        """Close the file (standard output is left open)."""
        if self._owned:
            with self._lock:
                self._stream.close()
