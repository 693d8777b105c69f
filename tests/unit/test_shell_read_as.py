"""Program text as an interpreter may read it (daemon.shell.read_as), and where the policy is
given it: beside each word of a command and each text fed on its input."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.shell import read_as as read_as_module
from daemon.shell.facts import command_facts
from daemon.shell.parse import parse_command
from daemon.shell.read_as import Reading, read_as


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("os.\uff43hmod('.', 0o777)", "os.chmod('.', 0o777)"),  # NFKC: Python's names
        ("os.\U0001d42bmdir('d')", "os.rmdir('d')"),
        ("fs.\\u0063hmodSync", "fs.chmodSync"),  # JavaScript's escapes in a name
        ("\\u{63}hmod", "chmod"),
        ("\\u{0000000063}hmod", "chmod"),
        ("\\U00000063hmod", "chmod"),
        ("\\N{U+63}hmod \\x{68}", "chmod h"),  # Perl's
        ("\\N{U+7_2}mtree \\x{7_2}mtree", "rmtree rmtree"),  # with `_` (attacker round 190)
        ("\\o{162}mtree", "rmtree"),
        ("\\x{" + "0" * 70 + "72}mtree", "rmtree"),  # any number of digits
        # A `\\N{` under no name does not stop what follows from being read (round 190).
        ("\\x6d \\\\N{ \\x73ystem }", "m \\N{ system }"),
        ("\\x63hmod", "chmod"),
        ("\\143hmod", "chmod"),
        # Read once, as the interpreters do, and twice beside it (JSON, `unicode_escape`).
        ("\\u005cu0063hmod", "\\u0063hmod\nchmod"),
        ('loads("\\"sh\\\\u0075til\\"")', 'loads(""sh\\u0075til"")\nloads(""shutil"")'),
        ("\\\\rmtree", "\\rmtree\n\rmtree"),
        ("\\uff43hmod", "chmod"),  # an escape that spells a letter NFKC folds
        # Attacker round 191: a backslash before another letter is that letter (Perl, Ruby,
        # JavaScript), Perl's \Q and \E leave letters, a backslash before a line's end goes.
        ("r\\mtree sy\\stem", "rmtree system"),
        ("r\\Qmtree\\E rmt\\Eree", "rmtree rmtree"),
        ("sys\\\ntem r\\\r\nm r\\\rm", "system rm rm"),
        ("a\\nb\\t\\e", "a\nb\t\x1b"),
    ],
)
def test_a_name_hidden_in_escapes_or_other_letters_is_read_as_the_interpreter_reads_it(
    written: str, read: str
) -> None:
    assert read_as(written) == Reading(read, False)


@pytest.mark.parametrize(
    "written",
    [
        "print(1)",
        "print('\u00e9t\u00e9')",  # composed letters stay what they are
        "console.log('\u65e5\u672c\u8a9e')",
        "s\u0441hmod",  # a Cyrillic letter that looks alike is another name
        "# -*- coding: utf-8 -*-\nprint('\u00e9')",  # UTF-8 named as the encoding
        "# coding: UTF_8\nx = 1",
        "\\uD83D\\uDE00",  # surrogates: halves of a pair, never sent
    ],
)
def test_text_read_as_written_has_no_other_reading(written: str) -> None:
    assert read_as(written) == Reading(None, False)


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("\\\\N{x} \\\\L \\\\c2", "\\N{x} \\L \\c2"),  # a backslash escaped: no escape follows
        ("\\033[31m \\0", "\x1b[31m \x00"),  # octal that is no letter, read either way
    ],
)
def test_escapes_that_spell_no_letter_are_read_and_sure(written: str, read: str) -> None:
    assert read_as(written) == Reading(read, False)


@pytest.mark.parametrize(
    "written",
    [
        # Perl's forms of \\N{...} that Unicode's names do not give (round 190).
        "\\N{latin:r}mtree",
        "\\N{latin_small_letter_r}mtree",
        "\\N{X}mtree",
        # A `\\N{` shielding what follows up to a `}` (round 190).
        'r"\\N{"; x("\\x73ystem"); r"}"',
        # Perl's case escapes and control characters.
        "\\LRMTREE",
        "\\lRmtree",
        "\\Frmtree",
        "\\urmtree",
        "\\Usystem",
        "\\c2mtree",
        # Digits Lua reads as a decimal letter (`\\114` is `r`; octal `L`).
        "\\114mtree",
        "\\1189",
        # Braced escapes that are no numbers or characters, or never closed.
        "\\x{zz}",
        "\\u{110000}",
        "\\o{9}",
        "\\N{NO SUCH CHARACTER}",
        "\\u{" + "a" * 5000,
        ("\\u{" + "a " * 63 + "a") * 200,
        "\\x{" + "0" * 5000 + "72}",
        # Several numbers in braces: Ruby reads each, Perl the first (round 191).
        "\\x{72 0}mtree",
        "\\o{162 0}mtree",
        "\\u{63 68 6d 6f 64}",
        # PHP's octal past 255 (`\\563` is `s`), Lua's `\\z` (skips the blanks after it).
        "sy\\563tem",
        "ex\\z   ecute",
        # A source encoding other than UTF-8 (Python honours it for a program read from a file).
        "# coding: utf_7\nimport os\nos.sys+AHQ-em('id')",
        "#!/usr/bin/python3\n# -*- coding: shift_jis -*-\nx = 1",
        # Readings that would cost too much: a long run of combining marks (NFKC sorts them in
        # quadratic time), a text NFKC makes much longer (U+FDFA is 18 characters).
        "a" + "\u0316\u0301" * 8000,
        "a" + "\u0f73" * 10000,  # each NFKC makes two marks of
        "a" + "\u0301\uff9e" * 8000,
        "#" + "\ufdfa" * 1000,
        # Signs and prefixes int() would take (a negative one crashed the reading).
        "\\x{-72}",
        "\\o{-1}",
        "\\u{+72}",
        "\\x{0x72}",
        "\\UFFFFFFFF",
    ],
)
def test_an_escape_that_may_spell_a_letter_and_cannot_be_read_is_unsure(written: str) -> None:
    assert read_as(written).unsure


def test_the_policy_is_given_the_reading_beside_the_written_word_and_input() -> None:
    line = "python3 -c 'import os; os.\uff43hmod(\".\", 511)' x <<< 'os.\\u0072emove(1)'"
    (command,) = command_facts(parse_command(line), "/srv/ws", "/srv/ws")
    code, plain = command["words"][1], command["words"][2]
    assert code["read_as"] == 'import os; os.chmod(".", 511)'
    assert "read_as" not in plain
    assert command["stdin_read_as"] == ["os.remove(1)"]
    assert "unread_escape" not in code
    assert "stdin_unread_escape" not in command


def test_the_policy_is_told_of_escapes_that_could_not_be_read() -> None:
    line = "perl -e 'F->can(\"\\LRMTREE\")' <<< '\\N{latin:r}'"
    (command,) = command_facts(parse_command(line), "/srv/ws", "/srv/ws")
    assert command["words"][1]["unread_escape"] is True
    assert command["stdin_unread_escape"] is True


def test_a_command_with_nothing_to_read_otherwise_gets_no_reading() -> None:
    (command,) = command_facts(parse_command("python3 -c 'print(\"\u00e9\")' <<< x"), "/w", "/w")
    assert all("read_as" not in word for word in command["words"])
    assert "stdin_read_as" not in command


#: Random escapes: a backslash, what may follow it, something in braces or not, closed or not.
_ESCAPES = st.tuples(
    st.sampled_from(["x{", "u{", "o{", "N{", "N{U+", "x", "u", "U", "c", "L", "0", ""]),
    st.text(alphabet="-+_ 0x72fF:\u00e9", max_size=6),
    st.sampled_from(["}", ""]),
).map(lambda parts: "\\" + "".join(parts))
_TEXTS = st.lists(st.one_of(_ESCAPES, st.sampled_from(["a", "\\\\", "\uff3c"])), max_size=8)


@settings(max_examples=3000, deadline=None)
@given(_TEXTS.map("".join))
def test_any_text_is_read_without_failing(text: str) -> None:
    reading = read_as(text)
    assert reading.text is None or reading.text.encode()  # something that can be sent


def test_every_character_nfkc_makes_a_mark_of_counts_as_one() -> None:
    """The run of marks NFKC would sort is bounded only if each character that NFKC begins
    with a combining mark counts as one (attacker round 191's quadratic NFKC)."""
    starts_with_a_mark = {
        char
        for char in map(chr, range(0x300, 0x110000))
        if not unicodedata.combining(char)
        and (folded := unicodedata.normalize("NFKD", char))
        and unicodedata.combining(folded[0])
    }
    assert starts_with_a_mark <= read_as_module._BECOME_MARKS


def test_a_unicode_name_is_read_as_python_reads_it_and_unsure_in_perl() -> None:
    """Python's `\\N{NAME}` is Unicode's; Perl's charnames may give a name another meaning
    (attacker round 191: `use charnames ":alias", {"LATIN SMALL LETTER Q", ...}`)."""
    assert read_as("\\N{LATIN SMALL LETTER C}hmod") == Reading("chmod", False)
    assert read_as("\\N{LATIN SMALL LETTER Q}mtree", perl=True) == Reading("qmtree", True)


@pytest.mark.parametrize(
    "written",
    [
        # Attacker round 192: a quote whose delimiter is a letter or a digit, where `\e` is `e`.
        'File::Path->can(q ermtr\\e\\ee)->(".git")',
        "POSIX->can(q tsys\\temt)",
        'File::Path->can(qq 6\\1\\62mtree6)->(".git")',
        # A source filter or `use encoding`, which may decode the rest of the program.
        'use encoding "UTF-7", Filter => 1; File::Path::+AHI-mtree(".git")',
        "use Filter::Util::Call; x()",
        # Round 193: a comment between the quote and its letter delimiter.
        "POSIX->can(qq #c\ntsys\\temt)",
    ],
)
def test_perl_that_reads_otherwise_than_written_is_unsure(written: str) -> None:
    assert read_as(written, perl=True).unsure


@pytest.mark.parametrize(
    "written",
    [
        "print q(x), qw(a b)",
        'binmode(STDOUT, ":encoding(UTF-8)"); print "\\x{e9}\\n"',
        "$s =~ s/a/b/",
    ],
)
def test_ordinary_perl_is_read_surely(written: str) -> None:
    assert not read_as(written, perl=True).unsure


def test_a_source_encoding_after_a_lone_carriage_return_is_seen() -> None:
    """Python ends a line at a CR too (attacker round 192: `$'\\r# coding: utf_7\\n...'`)."""
    assert read_as("\r# coding: utf_7\nimport os").unsure
    assert read_as("#!/bin/python3\r\n# coding: latin-1\r\nx = 1").unsure
