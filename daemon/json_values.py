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
from collections.abc import Iterator, Mapping
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


PIECE_CHARS = 64 * 1024
"""A long string is escaped this many characters at a time (`json_pieces`)."""


def json_pieces(value: Any, *, sort_keys: bool = False, large: bool | None = None) -> Iterator[str]:
    """`value` as the JSON text `json.dumps(value, separators=(",", ":"), ensure_ascii=False,
    default=str, sort_keys=sort_keys)` gives, in pieces: a long string is escaped a slice at a
    time, so the whole text never sits in memory at once (a control character is six characters
    escaped: attacker round 105 made one 15 MiB Write hold 90 MB of JSON text, several times).
    `large`: whether `value` is large (`is_large`) when the caller already knows; False gives
    one piece without looking the value over again."""
    if large is False:
        yield _dumps(value, sort_keys)
    elif isinstance(value, str) and len(value) > PIECE_CHARS:
        yield '"'
        for start in range(0, len(value), PIECE_CHARS):
            yield _dumps(value[start : start + PIECE_CHARS], sort_keys)[1:-1]
        yield '"'
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value) and is_large(value):
        keys = sorted(value) if sort_keys else list(value)
        yield "{"
        for index, key in enumerate(keys):
            yield ("," if index else "") + _dumps(key, False)
            yield ":"
            yield from json_pieces(value[key], sort_keys=sort_keys)
        yield "}"
    elif isinstance(value, list | tuple) and is_large(value):
        yield "["
        for index, item in enumerate(value):
            if index:
                yield ","
            yield from json_pieces(item, sort_keys=sort_keys)
        yield "]"
    else:
        yield _dumps(value, sort_keys)


def _dumps(value: Any, sort_keys: bool) -> str:
    return json.dumps(
        value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, default=str
    )


def canonical_input_hash(tool_input: Mapping[str, Any], *, large: bool | None = None) -> str:
    """Hex SHA-256 of the tool input as canonical JSON (sorted keys, no whitespace, UTF-8).

    Two inputs hash alike exactly when they are the same JSON value, however their keys were
    ordered. Values JSON cannot represent are hashed by their ``str()``. `large`: as for
    `json_pieces`.
    """
    digest = hashlib.sha256()
    for piece in json_pieces(tool_input, sort_keys=True, large=large):
        # surrogatepass: a lone surrogate from a JSON escape must hash, not raise.
        digest.update(piece.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
