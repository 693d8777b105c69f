"""JSON for the runner, as `json.loads` and `json.dumps(separators=(",", ":"))` give it, without
importing `json`: that module compiles regular expressions when imported (and brings `re` and
`enum` with it), which cost every container about 7 ms of CPU, measured in the sandbox image.

The work is done by the C accelerator `json` itself uses (`_json`: its scanner and encoder). That
module is CPython's own, not a public interface: so the pair built from it is checked once, here,
against answers known in advance, and whatever is missing, changed or wrong makes this module use
`json` instead (an image with another Python then pays the import, never a wrong answer).
"""

from __future__ import annotations

TYPE_CHECKING = False  # what typing.TYPE_CHECKING is at run time, without its import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _ScanContext:
    """What the C scanner reads off a decoder: json.loads's defaults."""

    strict = True
    array_hook = None  # read by the scanner of Python 3.15 and later
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _unencodable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _accelerated() -> tuple[Callable[[str], Any], Callable[[Any, bool], str]]:
    import _json  # a failure here means: use json instead

    # The scanner reads its settings off any object (its stub asks for a scanner).
    scan = _json.make_scanner(_ScanContext())  # type: ignore[arg-type]

    def loads(text: str) -> Any:
        start = len(text) - len(text.lstrip(_WHITESPACE))
        if text.startswith("\ufeff"):
            raise ValueError("Unexpected UTF-8 BOM (decode using utf-8-sig)")
        try:
            value, end = scan(text, start)
        except StopIteration as stop:
            raise ValueError(f"Expecting value: char {stop.value}") from None
        if len(text[end:].lstrip(_WHITESPACE)):
            raise ValueError(f"Extra data: char {end}")
        return value

    strings = {False: _json.encode_basestring, True: _json.encode_basestring_ascii}

    def dumps(value: Any, ascii_only: bool) -> str:
        # One encoder a value, as json makes it: the encoder's record of the containers it is in
        # (a value that contains itself is refused) keeps an entry when encoding fails.
        encoder = _json.make_encoder(
            {}, _unencodable, strings[ascii_only], None, ":", ",", False, False, True
        )
        return "".join(encoder(value, 0))

    return loads, dumps


def _checked(
    pair: tuple[Callable[[str], Any], Callable[[Any, bool], str]],
) -> tuple[Callable[[str], Any], Callable[[Any, bool], str]]:
    """`pair` when it gives json's answers on a sample of every kind of value, else ValueError."""
    loads, dumps = pair
    sample = {"a": [1, -2.5, None, True, False, 'é\n"\\\x01', {}], "b": 10**20, "\udcff": []}
    text = '{"a":[1,-2.5,null,true,false,"é\\n\\"\\\\\\u0001",{}],"b":100000000000000000000,'
    ascii_text = text.replace("é", "\\u00e9") + '"\\udcff":[]}'
    if (
        dumps(sample, False) != text + '"\udcff":[]}'
        or dumps(sample, True) != ascii_text
        or loads(f" {ascii_text}\n") != sample
    ):
        raise ValueError("the C accelerator answers differently from json")
    return pair


def _json_module() -> tuple[Callable[[str], Any], Callable[[Any, bool], str]]:
    import json  # only when the accelerator is not what was expected

    def dumps(value: Any, ascii_only: bool) -> str:
        return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))

    return json.loads, dumps


try:
    _loads, _dumps = _checked(_accelerated())
    ACCELERATED = True
except Exception:  # noqa: BLE001 - any surprise at all: the standard module instead
    _loads, _dumps = _json_module()
    ACCELERATED = False


def loads(text: str) -> Any:
    """`json.loads(text)` for a str (ValueError, or RecursionError when nested too deep)."""
    return _loads(text)


def dumps(value: Any, *, ascii_only: bool = False) -> str:
    """`json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))`."""
    return _dumps(value, ascii_only)
