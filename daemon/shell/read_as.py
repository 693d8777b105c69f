"""Program text as an interpreter may read it, when that differs from how it is written.

Python reads its names through NFKC (`os.ｃhmod` is `os.chmod`); JavaScript takes `\\u0063hmod`
for `chmod` in a name, and every interpreter the policy reads code of decodes escapes in its
strings, where a name looked up when the code runs may be spelt (`File::Path->can("\\x72mtree")`).
Instead of asking a person about all code with characters outside ASCII (`print("é")`, any text
in another script), the policy is given this reading beside the written text and matches what
code can do (`data.tooljail.commands.code_effects`) against both.

The text is read once, left to right, the way the interpreters read their strings: `\\\\` is one
backslash, and each escape that stands for characters is decoded where they agree on it (`\\xHH`,
`\\uXXXX`, `\\UXXXXXXXX`, `\\u{...}`, `\\x{...}`, `\\o{...}`, `\\N{U+...}`, octal `\\NNN`, and
`\\N{NAME}` under Unicode's names); NFKC is applied after. An escape that may stand for a letter
and cannot be read so is `unsure`, and the policy asks about it: a `\\N{...}` under a name only
Perl's charnames knows (`\\N{latin:r}`, aliases), Perl's case escapes (`\\L`, `\\l`, `\\F`, `\\u`
and `\\U` that are not code points), `\\c`, a braced escape that is not a number, and digits Lua
reads as a decimal letter (`\\114` is `L` in octal, `r` in Lua). What is left outside ASCII after
NFKC cannot spell an ASCII name in these interpreters: none folds letters that only look alike
(`сhmod` with a Cyrillic `с` is another name). Attacker round 190.
"""

from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple


class Reading(NamedTuple):
    """How an interpreter may read a text."""

    text: str | None
    """The text read so, when that differs from how it is written; None otherwise."""
    unsure: bool
    """It holds an escape that may stand for a letter and that could not be read."""


_PLAIN = Reading(None, False)
#: What may follow a backslash, where the reading starts.
#: A braced escape holds no backslash: each look for its end stops at the next one.
_BRACED = re.compile(r"([xuo])\{([^}\\]{0,4096})\}|N\{([^}\\]{0,4096})\}")
_HEX = re.compile(r"x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})")
_OCTAL = re.compile(r"[0-7]{1,3}")
_DIGITS_OF = {8: re.compile(r"[0-7]+"), 16: re.compile(r"[0-9A-Fa-f]+")}
_DECIMAL = re.compile(r"[0-9]{1,3}")
#: Escapes that change the case of what follows (Perl), or make a control character of it.
_CASE_OR_CONTROL = frozenset("lLFuUc")
_LETTERS = frozenset(range(ord("A"), ord("Z") + 1)) | frozenset(range(ord("a"), ord("z") + 1))


def read_as(text: str) -> Reading:
    """`text` with its escapes decoded and NFKC applied, when that changes it, and whether an
    escape in it could not be read (at once for ASCII text without a backslash)."""
    if text.isascii() and "\\" not in text:
        return _PLAIN
    decoded, unsure = _decoded(text)
    folded = unicodedata.normalize("NFKC", decoded)
    return Reading(folded if folded != text else None, unsure)


def _decoded(text: str) -> tuple[str, bool]:
    out: list[str] = []
    unsure = False
    start = 0
    at = text.find("\\")
    while at != -1:
        out.append(text[start:at])
        read, length, doubt = _escape(text, at + 1)
        out.append(read)
        unsure = unsure or doubt
        start = at + 1 + length
        at = text.find("\\", start)
    out.append(text[start:])
    return "".join(out), unsure


def _escape(text: str, at: int) -> tuple[str, int, bool]:
    """The escape after the backslash at `at - 1`: what it reads as, how many characters after
    the backslash it takes, and whether it may stand for a letter that could not be read."""
    if at >= len(text):
        return "\\", 0, False
    if text[at] == "\\":
        return "\\", 1, False
    braced = _BRACED.match(text, at)
    if braced is not None:
        kind, digits, name = braced.groups()
        read = _named(name) if name is not None else _numbered(digits, 8 if kind == "o" else 16)
        if read is None:
            return "\\", 0, True
        return read, braced.end() - at, False
    numbered = _HEX.match(text, at)
    if numbered is not None:
        read = _numbered(next(d for d in numbered.groups() if d is not None), 16)
        if read is None:
            # Past Unicode: a syntax error in Python; Perl's \U (upper case) in Perl.
            return "\\", 0, text[at] == "U"
        return read, numbered.end() - at, False
    decimal = _DECIMAL.match(text, at)
    if decimal is not None:
        # Octal in most interpreters; decimal in Lua (`\114` is `L`, and `r` in Lua).
        unsure = int(decimal.group()) in _LETTERS
        octal = _OCTAL.match(text, at)
        if octal is None:
            return "\\", 0, unsure
        return chr(int(octal.group(), 8)), octal.end() - at, unsure
    if text[at] in _CASE_OR_CONTROL or text[at] in "xoN":
        # Perl's case escapes, a control character, or a braced escape never closed.
        return "\\", 0, True
    return "\\", 0, False


def _numbered(digits: str, base: int) -> str | None:
    """The characters a braced or plain escape's numbers name (Ruby's `\\u{63 68}` holds several,
    Perl's may hold `_`); None when they are not numbers or not characters."""
    points = []
    for number in digits.replace("_", "").split():
        # Digits only: int() would also take a sign, `0x` and spaces, none of them an escape's.
        if not _DIGITS_OF[base].fullmatch(number):
            return None
        point = int(number, base)
        if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
            return None  # past Unicode, or half of a pair: no ASCII name is made of one
        points.append(chr(point))
    return "".join(points) if points else None


def _named(name: str) -> str | None:
    """`\\N{NAME}` under Unicode's names (Python's), or `\\N{U+...}` (Perl's)."""
    if name.startswith("U+"):
        return _numbered(name[2:], 16)
    try:
        return unicodedata.lookup(name.strip())
    except KeyError:
        return None
