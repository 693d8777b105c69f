"""A small JSON file of the daemon's own, replaced whole: written beside it (mode 0600, never
through a symbolic link), flushed to disk, then renamed over it, so a reader sees the old
content or the new, never a mix."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def replace_json(path: Path, value: Any) -> None:
    """Write `value` as JSON to `path`, replacing it whole."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        json.dump(value, stream)
        stream.flush()
        os.fsync(stream.fileno())
    partial.replace(path)
