"""Program text as an interpreter may read it, when that differs from how it is written.

Python reads its names through NFKC (`os.ｃhmod` is `os.chmod`); JavaScript takes `\\u0063hmod`
for `chmod` in a name, and every interpreter the policy reads code of decodes escapes in its
strings, where a name looked up when the code runs may be spelt (`File::Path->can("\\x72mtree")`).
Instead of asking a person about all code with characters outside ASCII (`print("é")`, any text
in another script), the policy is given this reading beside the written text and matches what
code can do (`data.tooljail.commands.code_effects`) against both.

The text is read once, left to right, the way the interpreters read their strings, taking the
reading that spells the most: `\\\\` is one backslash; an escape that stands for characters is
decoded (`\\xHH`, `\\uXXXX`, `\\UXXXXXXXX`, `\\u{...}`, `\\x{...}`, `\\o{...}`, `\\N{U+...}`, octal,
`\\n` and the other letters of control characters); a backslash before a line's end goes, as
in Python's, JavaScript's and Ruby's strings (`"sys\\<newline>tem"`); Perl's `\\Q` and `\\E` go;
before any other character it goes too, as Perl, Ruby and JavaScript read it (`"r\\mtree"` is
`rmtree`; Python keeps it, and the written text is matched as well). NFKC is applied after.

An escape that may stand for a letter that cannot be known from the text makes the reading
`unsure`, and the policy asks about it (attacker rounds 190 and 191): `\\N{NAME}` (Perl's charnames
may give any name another meaning), Perl's case escapes (`\\L`, `\\l`, `\\F`, `\\u` and `\\U` that
are not code points), `\\c`, Lua's `\\z` and decimal digits, PHP's octal past 255, a braced escape
that is not one number, a source encoding other than UTF-8 (`# coding: utf_7`: Python honours it
for a program read from a file), and text whose reading would cost too much (a long run of
combining marks, which NFKC sorts in quadratic time) or grow too much. What is left outside
ASCII after NFKC cannot spell an ASCII name in these interpreters: none folds letters that only
look alike (`сhmod` with a Cyrillic `с` is another name).
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
_UNSURE = Reading(None, True)
#: A braced escape holds no backslash: each look for its end stops at the next one.
_BRACED = re.compile(r"(?:([xuo])\{|N\{U\+)([^}\\]{0,4096})\}")
_HEX = re.compile(r"x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})")
_OCTAL = re.compile(r"[0-7]{1,3}")
_DECIMAL = re.compile(r"[0-9]{1,3}")
_DIGITS_OF = {8: re.compile(r"[0-7]+"), 16: re.compile(r"[0-9A-Fa-f]+")}
#: Escapes of control characters the interpreters agree on.
_CONTROL = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_CONTROL |= {"e": "\x1b"}
#: A line's end after a backslash: dropped inside strings (Python, JavaScript, Ruby).
_LINE_ENDS = ("\r\n", "\n", "\r", "\u2028", "\u2029")
#: What makes a reading unsure at once: Perl's case escapes, control letters, Lua's \z, and
#: `\N` that names no character Unicode gives.
_UNKNOWABLE = frozenset("NlLFuUcz")
_NAMED = re.compile(r"N\{([^}\\]{1,100})\}")
#: Perl's quoting escapes, which leave letters as they are.
_DROPPED = frozenset("QE")
_LETTERS = frozenset(range(ord("A"), ord("Z") + 1)) | frozenset(range(ord("a"), ord("z") + 1))
#: A source encoding named on one of the first two lines (PEP 263; Ruby's magic comment too),
#: which end at a CR as well as at a LF (attacker round 192: `\r# coding: utf_7\n`).
_COOKIE = re.compile(r"\A(?:[^\r\n]*(?:\r\n|\r|\n))?[ \t\f]*#[^\r\n]*?coding[:=][ \t]*([-\w.]+)")
#: Perl code whose reading the text does not give (attacker round 192): a quote whose delimiter
#: is a letter or a digit (`q ermtr\ee`: there `\e` is the delimiter, `e`), also after comments
#: between the two (round 193: `qq #c` and a new line), a source filter or
#: `use encoding` (which may decode the rest of the program from UTF-7).
_PERL_UNREAD = re.compile(
    r"(?<![\w$@%&*>:-])(?:qq|qw|qx|qr|q|m|s|tr|y)\s+(?:#[^\n]*\n\s*)*\w"
    r"|\b(?:use|no|require)\s+(?:encoding|Filter)\b|\bFilter::|\bencoding\s*->"
)
_UTF8_NAMES = frozenset({"utf-8", "utf8", "u8", "utf", "utf-8-sig", "cp65001"})
#: Combining marks in a row past which NFKC is not asked (it sorts them in quadratic time).
_MAX_MARKS = 32
#: Characters of combining class 0 that NFKC makes combining marks of (Tibetan vowel signs,
#: halfwidth sound marks): they join a run as marks do.
_BECOME_MARKS = frozenset("\u0f73\u0f75\u0f81\uff9e\uff9f")
#: How much longer than twice the text its reading may be (NFKC makes 18 characters of U+FDFA).
_MAX_GROWTH = 4096


def read_as(text: str, perl: bool = False) -> Reading:
    """`text` with its escapes decoded and NFKC applied, when that changes it, and whether an
    escape in it could not be read (at once for ASCII text without a backslash). `perl`: the
    text is Perl's, whose charnames may give any `\\N{NAME}` another meaning."""
    if (perl and _PERL_UNREAD.search(text)) or ("coding" in text and _foreign_encoding(text)):
        return _UNSURE
    if text.isascii() and "\\" not in text:
        return _PLAIN
    decoded, unsure = _decoded(text, perl)
    if "\\" in decoded:
        # Text decoded twice: JSON or `unicode_escape` reading what a string holds (attacker
        # round 192: `json.loads("\"sh\\\\u0075til...\"")`). Beside the first reading, not in
        # its place: the second may take a letter a name begins with (`\\rmtree`).
        again, _ = _decoded(decoded, perl)
        if again != decoded:
            decoded = f"{decoded}\n{again}"
    if _long_mark_run(decoded):
        return _UNSURE
    folded = unicodedata.normalize("NFKC", decoded)
    if len(folded) > 2 * len(text) + _MAX_GROWTH:
        return _UNSURE
    return Reading(folded if folded != text else None, unsure)


def _foreign_encoding(text: str) -> bool:
    """Whether the text names a source encoding other than UTF-8 on its first two lines."""
    cookie = _COOKIE.match(text)
    if cookie is None:
        return False
    return cookie.group(1).lower().replace("_", "-") not in _UTF8_NAMES


def _long_mark_run(text: str) -> bool:
    run = 0
    for char in text:
        if char > "\u02ff" and (unicodedata.combining(char) or char in _BECOME_MARKS):
            run += 1
            if run > _MAX_MARKS:
                return True
        else:
            run = 0
    return False


def _decoded(text: str, perl: bool) -> tuple[str, bool]:
    out: list[str] = []
    unsure = False
    start = 0
    at = text.find("\\")
    while at != -1:
        out.append(text[start:at])
        read, length, doubt = _escape(text, at + 1, perl)
        out.append(read)
        unsure = unsure or doubt
        start = at + 1 + length
        at = text.find("\\", start)
    out.append(text[start:])
    return "".join(out), unsure


def _escape(text: str, at: int, perl: bool) -> tuple[str, int, bool]:
    """The escape after the backslash at `at - 1`: what it reads as, how many characters after
    the backslash it takes, and whether it may stand for a letter that could not be read."""
    if at >= len(text):
        return "\\", 0, False
    char = text[at]
    if char == "\\":
        return "\\", 1, False
    for end in _LINE_ENDS:
        if text.startswith(end, at):
            return "", len(end), False
    braced = _BRACED.match(text, at)
    if braced is not None:
        read = _number(braced.group(2), 8 if braced.group(1) == "o" else 16)
        if read is None:
            return "\\", 0, True
        return read, braced.end() - at, False
    plain = _HEX.match(text, at)
    if plain is not None:
        read = _number(next(d for d in plain.groups() if d is not None), 16)
        if read is not None:
            return read, plain.end() - at, False
        return "\\", 0, char == "U"  # past Unicode: Perl's \U (upper case) in Perl
    if char.isdigit():
        return _digits(text, at)
    named = _NAMED.match(text, at)
    if named is not None:
        # Python's names are Unicode's; Perl's charnames may give one another meaning.
        try:
            return unicodedata.lookup(named.group(1).strip()), named.end() - at, perl
        except KeyError:
            return "\\", 0, True
    if char in _UNKNOWABLE or char in "xo":
        return "\\", 0, True
    if char in _DROPPED:
        return "", 1, False
    return _CONTROL.get(char, char), 1, False


def _digits(text: str, at: int) -> tuple[str, int, bool]:
    """Octal in most interpreters; decimal in Lua (`\\114` is `L`, and `r` in Lua); PHP takes
    an octal past 255 modulo 256 (`\\563` is `s`)."""
    decimal = _DECIMAL.match(text, at)
    octal = _OCTAL.match(text, at)
    unsure = decimal is not None and int(decimal.group()) in _LETTERS
    if octal is None:
        return "\\", 0, unsure
    value = int(octal.group(), 8)
    unsure = unsure or (value > 0o377 and value & 0xFF in _LETTERS)
    return chr(value), octal.end() - at, unsure


def _number(digits: str, base: int) -> str | None:
    """The character a braced escape's number names (Perl's may hold `_`); None when it is not
    one number (Ruby reads `\\u{63 68}` as two, Perl the first alone) or not a character."""
    number = digits.replace("_", "").strip(" \t")
    # Digits only: int() would also take a sign, `0x` and spaces, none of them an escape's.
    if not _DIGITS_OF[base].fullmatch(number):
        return None
    point = int(number, base)
    if point > 0x10FFFF or 0xD800 <= point <= 0xDFFF:
        return None  # past Unicode, or half of a pair: no ASCII name is made of one
    return chr(point)
