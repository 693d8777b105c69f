"""Program text as an interpreter may read it (daemon.shell.read_as), and where the policy is
given it: beside each word of a command and each text fed on its input."""

from __future__ import annotations

import pytest

from daemon.shell.facts import command_facts
from daemon.shell.parse import parse_command
from daemon.shell.read_as import read_as


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("os.\uff43hmod('.', 0o777)", "os.chmod('.', 0o777)"),  # NFKC: Python's names
        ("os.\U0001d42bmdir('d')", "os.rmdir('d')"),
        ("fs.\\u0063hmodSync", "fs.chmodSync"),  # JavaScript's escapes in a name
        ("\\u{63}hmod", "chmod"),
        ("\\u{0000000063}hmod", "chmod"),
        ('send("\\u{63 68 6d 6f 64}")', 'send("chmod")'),  # Ruby: several in one
        ("\\U00000063hmod", "chmod"),
        ("\\N{LATIN SMALL LETTER C}hmod", "chmod"),  # Python's strings
        ("\\N{U+63}hmod \\x{68}", "chmod h"),  # Perl's
        ("\\x63hmod", "chmod"),
        ("\\143hmod", "chmod"),
        ("\\u005cu0063hmod", "chmod"),  # an escape that spells another
        ("\\uff43hmod", "chmod"),  # an escape that spells a letter NFKC folds
    ],
)
def test_a_name_hidden_in_escapes_or_other_letters_is_read_as_the_interpreter_reads_it(
    written: str, read: str
) -> None:
    assert read_as(written) == read


@pytest.mark.parametrize(
    "written",
    [
        "print(1)",
        "print('\u00e9t\u00e9')",  # composed letters stay what they are
        "console.log('\u65e5\u672c\u8a9e')",
        "s\u0441hmod",  # a Cyrillic letter that looks alike is another name
        "a\\nb\\t",  # escapes of no interest
        "\\N{NO SUCH CHARACTER}",
        "\\uD83D\\uDE00",  # surrogates: halves of a pair, never sent
        "\\u{110000}",  # past Unicode
        # Never closed: with digits that could be split two ways, this took exponential time.
        "\\u{" + "a" * 5000,
        ("\\u{" + "a " * 63 + "a") * 200,
    ],
)
def test_text_read_as_written_has_no_other_reading(written: str) -> None:
    assert read_as(written) is None


def test_the_policy_is_given_the_reading_beside_the_written_word_and_input() -> None:
    line = "python3 -c 'import os; os.\uff43hmod(\".\", 511)' x <<< 'os.\\u0072emove(1)'"
    (command,) = command_facts(parse_command(line), "/srv/ws", "/srv/ws")
    code, plain = command["words"][1], command["words"][2]
    assert code["read_as"] == 'import os; os.chmod(".", 511)'
    assert "read_as" not in plain
    assert command["stdin_read_as"] == ["os.remove(1)"]


def test_a_command_with_nothing_to_read_otherwise_gets_no_reading() -> None:
    (command,) = command_facts(parse_command("python3 -c 'print(\"\u00e9\")' <<< x"), "/w", "/w")
    assert all("read_as" not in word for word in command["words"])
    assert "stdin_read_as" not in command
