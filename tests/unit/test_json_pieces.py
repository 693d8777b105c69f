"""json_pieces gives exactly json.dumps's text, and large inputs are hashed and encoded for OPA
without their whole JSON text held more than once (attacker rounds 105 and 106: one 15 MiB Write
of control characters held about 300 MB in the daemon)."""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.json_values import PIECE_CHARS, canonical_input_hash, json_pieces
from daemon.policy.document_body import LargeDocument, encode_document

LONG = st.builds(
    lambda unit, times, tail: unit * times + tail,
    st.text(min_size=1, max_size=7),
    st.integers(PIECE_CHARS // 7, PIECE_CHARS * 2 + 3),
    st.sampled_from(["", "\x01", "\udcff", "\U0001f600é", '\n"']),
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | LONG,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _dumps(value: Any, sort_keys: bool) -> str:
    return json.dumps(
        value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False, default=str
    )


@settings(max_examples=60, deadline=None)
@given(VALUES, st.booleans())
def test_the_pieces_are_the_text_json_dumps_gives(value: Any, sort_keys: bool) -> None:
    assert "".join(json_pieces(value, sort_keys=sort_keys)) == _dumps(value, sort_keys)


@settings(max_examples=60, deadline=None)
@given(VALUES, st.booleans(), st.sampled_from([None, False]))
def test_a_caller_that_knows_the_size_gets_the_same_text(
    value: Any, sort_keys: bool, large: bool | None
) -> None:
    pieces = list(json_pieces(value, sort_keys=sort_keys, large=large))
    assert "".join(pieces) == _dumps(value, sort_keys)
    if large is False:
        assert len(pieces) == 1


def test_the_input_hash_is_still_that_of_the_canonical_json() -> None:
    tool_input = {"path": "/w/f", "content": "\x01" * (3 * PIECE_CHARS) + "é\udcff"}
    text = _dumps(tool_input, True).encode("utf-8", "surrogatepass")
    assert canonical_input_hash(tool_input) == hashlib.sha256(text).hexdigest()


def _peak_bytes(action: Any) -> int:
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_hashing_a_large_input_does_not_hold_its_json_text() -> None:
    content = "\x01" * (4 << 20)  # 24 MiB once escaped
    tool_input = {"file_path": "/w/f", "content": content}
    peak = _peak_bytes(lambda: canonical_input_hash(tool_input))
    assert peak < 4 << 20, f"{peak} bytes held to hash a {len(content)}-character input"


def test_a_large_document_for_opa_is_held_once() -> None:
    content = "\x01" * (4 << 20)
    document = LargeDocument(input={"content": content}, tool={"name": "Write"})
    held: list[Any] = []
    peak = _peak_bytes(lambda: held.append(encode_document(document)))
    escaped = 6 * len(content)
    assert len(held[0].body) > escaped
    # The body itself, and the slack of growing it; before: the text, its bytes, then a copy.
    assert peak < 1.5 * escaped, f"{peak} bytes held for a {escaped}-byte body"
    assert json.loads(bytes(held[0].body)) == {"input": dict(document)}
