"""Program text as an interpreter may read it, when that differs from how it is written.

Python reads its names through NFKC (`os.ｃhmod` is `os.chmod`), JavaScript and Ruby take
`\\u0063hmod` for `chmod`, and Python's strings take `\\N{LATIN SMALL LETTER C}`: code the policy
reads for what it can do (`data.tooljail.commands.code_effects`) could hide a name so (attacker
round 185). Instead of asking a person about all code with characters outside ASCII (`print("é")`,
any text in another script), the policy is given this folded form beside the written one and
reads both. What is left outside ASCII after folding cannot spell an ASCII name in any of the
interpreters the policy reads code of: none folds other letters that look alike (`сhmod` with a
Cyrillic `с` is another name).
"""

from __future__ import annotations

import re
import unicodedata

#: `\uXXXX`, `\u{X...}` (JavaScript; Ruby's may hold several, `\u{63 68}`), `\UXXXXXXXX`,
#: `\N{NAME}` (Python), `\N{U+X...}` and `\x{X...}` (Perl), `\xXX`, and octal `\143`. The
#: digits of a braced one are split by spaces only, so no run of them can be read two ways.
_ESCAPE = re.compile(
    r"\\u([0-9A-Fa-f]{4})|\\U([0-9A-Fa-f]{8})|\\x([0-9A-Fa-f]{2})|\\([0-3][0-7]{2})"
    r"|\\[ux]\{\s*([0-9A-Fa-f]{1,64}(?:\s+[0-9A-Fa-f]{1,64}){0,63})\s*\}|\\N\{U\+([0-9A-Fa-f]{1,64})\}"
    r"|\\N\{([^}\n]{1,100})\}"
)
#: An escape may spell another (`\u005cu0063`): decoded this many times at most, then what is
#: left stays as written (more only makes text no interpreter reads as a name).
_ROUNDS = 3


def read_as(text: str) -> str | None:
    """`text` with escapes decoded and NFKC applied, when that changes it; None otherwise (and
    at once for ASCII text without a backslash, most of what is read)."""
    if text.isascii() and "\\" not in text:
        return None
    folded = unicodedata.normalize("NFKC", text)
    for _ in range(_ROUNDS):
        decoded = _ESCAPE.sub(_decoded, folded)
        if decoded == folded:
            break
        folded = unicodedata.normalize("NFKC", decoded)
    return folded if folded != text else None


def _decoded(escape: re.Match[str]) -> str:
    """The characters an escape names; the escape itself when it names none, or a surrogate
    (half of a pair: no ASCII name is made of one, and it cannot be sent as UTF-8)."""
    four, eight, two, octal, braced, plus, named = escape.groups()
    if named is not None:
        try:
            return unicodedata.lookup(named.strip())
        except KeyError:
            return escape.group()
    if octal is not None:
        points = [int(octal, 8)]
    else:
        points = [int(digits, 16) for digits in (four or eight or two or plus or braced).split()]
    if any(point > 0x10FFFF or 0xD800 <= point <= 0xDFFF for point in points):
        return escape.group()
    return "".join(map(chr, points))
