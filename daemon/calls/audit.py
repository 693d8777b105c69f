"""The audit log: JSON lines, to a file or standard output.

Every call gets one ``answered`` record when its answer is ready. An allowed call that may change
something (not read-only) also gets a ``decided`` record just before it runs, so such a call
interrupted by a crash is still on file."""

from __future__ import annotations

import json
import os
import sys
import threading
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

from daemon.policy.mask import MAX_FIELD_CHARS, AuditMask


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
    TURN_BUDGET = "turn_budget"
    """An answered result was made smaller for its turn's budget (kept whole, or cut)."""
    INTERRUPTED_HOOKS = "interrupted_hooks"
    """The PostToolUseFailure hooks that ran after a call was interrupted."""
    BATCH_HOOKS = "batch_hooks"
    """The PostToolBatch hooks that ran after a batch answered."""


# json.dumps escapes \n and \r but writes these raw (ensure_ascii=False); JavaScript, Python's
# str.splitlines and many log shippers end lines at them. Only strings can hold them, where the
# \u escape means the same character.
_LINE_ENDS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"})
_BOUNDS = AuditMask()
"""No fields, no patterns: only the bounds on texts (daemon.policy.mask)."""


def _bounded(value: Any) -> Any:
    """`value` bounded as `_BOUNDS.apply` bounds it; a short text or a number as it is (most of
    a record's fields: nothing of them would change)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str) and len(value) <= MAX_FIELD_CHARS:
        return value
    return _BOUNDS.apply(value)


class AuditLog:
    """Appends one JSON object per line; safe to call from several threads."""

    def __init__(self, target: str) -> None:
        self._lock = threading.Lock()
        self._owned = target != "-"
        if self._owned:
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            # Made readable by the daemon's group at most, whatever the umask: it holds inputs.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640)
            # Kept open for the daemon's life (close() closes it).
            self._stream: TextIO = open(fd, "a", encoding="utf-8", buffering=1)  # noqa: PTH123, SIM115
        else:
            self._stream = sys.stdout

    def write(self, record: dict[str, Any]) -> None:
        """Write one record as a single line (long texts shortened as daemon.policy.mask does,
        each field of the record on its own: attacker round 143's tool_use id of 8,150
        characters spent a budget for the whole record, and the tool, its input and its outcome
        went unlogged; every character some reader takes for a line end escaped)."""
        record = {key: _bounded(value) for key, value in record.items()}
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
