"""The runner's JSON (sandbox/runner/wire.py) gives exactly json's answers, accelerated or not."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from typing import Any

import pytest

from sandbox.runner import RUNNER_DIR, wire
from sandbox.runner.runner import _octal_unescaped

_CHARS = [
    "a",
    " ",
    '"',
    "\\",
    "/",
    "\n",
    "\t",
    "\x00",
    "\x1f",
    "\x7f",
    "é",
    "€",
    "😀",
    "\udcff",
    "\ud800",
]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 2**63, -(2**70), rng.randrange(-(10**6), 10**6)])
    if kind == 3:
        return rng.choice([0.0, -0.0, 1.5, 1e300, 5e-324, rng.random() * 1e6])
    if kind in (4, 5):
        return "".join(rng.choice(_CHARS) for _ in range(rng.randrange(12)))
    if kind in (6, 7):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    keys = ["".join(rng.choice(_CHARS) for _ in range(3)) for _ in range(rng.randrange(5))]
    return {key: _random_value(rng, depth + 1) for key in keys}


def _json_dumps(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))


def test_the_accelerator_is_used_on_this_python() -> None:
    assert wire.ACCELERATED


@pytest.mark.parametrize("seed", range(20))
def test_random_values_encode_and_decode_as_json_does(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(50):
        value = _random_value(rng)
        for ascii_only in (False, True):
            text = wire.dumps(value, ascii_only=ascii_only)
            assert text == _json_dumps(value, ascii_only)
            # NaN aside (never equal to itself), what goes out comes back.
            assert json.dumps(wire.loads(text)) == json.dumps(json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        ' \t\n\r{"a" : [ 1 , 2 ] }\n ',
        "NaN",
        "[Infinity,-Infinity]",
        "1e400",
        "-0",
        "123456789012345678901234567890",
        '"\\ud83d\\ude00\\udcff"',
        '{"a":1,"a":2}',
        '"\\u00e9"',
    ],
)
def test_texts_decode_as_json_decodes_them(text: str) -> None:
    assert repr(wire.loads(text)) == repr(json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "[1,",
        "[1] x",
        "[1]]",
        "\ufeff[]",
        "nul",
        '{"a":1,}',
        "[1,]",
        '"\x01"',  # a raw control character in a string (strict)
        "'a'",
        "01",
        "[NaN1]",
        '{"a"}',
        '"\\x"',
    ],
)
def test_what_json_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        wire.loads(text)


def test_nesting_too_deep_is_a_recursion_error_not_a_crash() -> None:
    with pytest.raises(RecursionError):
        wire.loads("[" * 200_000 + "]" * 200_000)


def test_values_json_cannot_encode_are_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        wire.dumps({"a": {1, 2}})
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular"):
        wire.dumps(looped)
    # The refusal leaves nothing behind: the same objects encode afterwards.
    inner = [1]
    with pytest.raises(TypeError):
        wire.dumps([inner, object()])
    assert wire.dumps([inner, inner]) == "[[1],[1]]"


def test_a_pair_that_answers_otherwise_is_not_taken() -> None:
    with pytest.raises(ValueError, match="differently"):
        wire._checked((json.loads, lambda value, ascii_only: "{}"))


def test_without_the_accelerator_json_itself_gives_the_same_answers() -> None:
    probe = (
        "import sys; sys.modules['_json'] = None; sys.path.insert(0, sys.argv[1]); import wire\n"
        "value = {'a': [1, 2.5, None, 'é\\udcff']}\n"
        "print(wire.ACCELERATED, 'json' in sys.modules, wire.dumps(value, ascii_only=True))\n"
        "assert wire.loads(wire.dumps(value, ascii_only=True)) == value"
    )
    done = subprocess.run(
        [sys.executable, "-E", "-s", "-S", "-c", probe, str(RUNNER_DIR)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout == 'False True {"a":[1,2.5,null,"\\u00e9\\udcff"]}\n'


@pytest.mark.parametrize(
    "field",
    ["/plain", "/a\\040b", "/x\\134040", "/tab\\011nl\\012", "/short\\12", "/not\\08x", "\\"],
)
def test_mountinfo_fields_unescape_as_the_kernel_escaped_them(field: str) -> None:
    expected = re.sub(r"\\([0-7]{3})", lambda code: chr(int(code.group(1), 8)), field)
    assert _octal_unescaped(field) == expected
