"""JSON values (tool inputs, policy documents): their canonical hash, and how much one holds,
found without serialising it.

Serialising, hashing or converting a value of several megabytes takes the event loop tens or
hundreds of milliseconds, during which no other caller is served; such work goes to a worker
thread. A thread costs about as much as serialising 64 KB, so small values stay on the loop:
this estimate, which stops counting once the answer is known, is what tells them apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

LARGE_VALUE_CHARS = 64 * 1024
"""From about this size on, serialising or hashing a value costs more than a worker thread."""


def approximate_chars(value: Any, enough: int) -> int:
    """About how many characters `value` serialises to, nested values included (each non-text
    value counts 8); counting stops at `enough`, so a huge value costs no more than a small one."""
    total = 0
    stack: list[Any] = [value]
    while stack and total < enough:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += 8 * len(item)
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, list):
            total += 8 * len(item)
            stack.extend(item)
        else:
            total += 8
    return total


def is_large(value: Any) -> bool:
    """Whether serialising or hashing `value` belongs in a worker thread."""
    return approximate_chars(value, LARGE_VALUE_CHARS) >= LARGE_VALUE_CHARS


def canonical_input_hash(tool_input: Mapping[str, Any]) -> str:
    """Hex SHA-256 of the tool input as canonical JSON (sorted keys, no whitespace, UTF-8).

    Two inputs hash alike exactly when they are the same JSON value, however their keys were
    ordered. Values JSON cannot represent are hashed by their ``str()``.
    """
    text = json.dumps(
        tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    # surrogatepass: a lone surrogate from a JSON escape must hash, not raise.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
