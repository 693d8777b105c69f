"""Which exit statuses are answers rather than failures (daemon/shell/status.py): only exit 1,
only of the command whose status is the line's, only where that is certain."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.shell import status
from daemon.shell.status import benign_meaning


@pytest.mark.parametrize(
    ("line", "meaning"),
    [
        ("grep -rn needle .", "no match found"),
        ("rg needle src", "no match found"),
        ("cat a.txt | grep needle", "no match found"),
        ("grep needle a.txt 2>/dev/null", "no match found"),
        ("grep needle a.txt > /dev/null 2>&1", "no match found"),
        ("grep needle a.txt;", "no match found"),
        ("sudo grep needle a.txt", "no match found"),
        ("git grep needle", "no match found"),
        ("diff a.txt b.txt", "the files differ"),
        ("cmp a.bin b.bin", "the files differ"),
        ("test -f missing.txt", "the condition is false"),
        ("[ -f missing.txt ]", "the condition is false"),
        ("[[ -d missing ]]", "the condition is false"),
        ("git diff --exit-code", "there are differences"),
        ("git -C sub diff --quiet HEAD", "there are differences"),
    ],
)
def test_exit_1_of_the_last_command_is_an_answer(line: str, meaning: str) -> None:
    assert benign_meaning(line, 1) == meaning


@pytest.mark.parametrize(
    "line",
    [
        "grep needle a.txt && echo found",  # grep's 1 or echo's: unknown which
        "grep needle a.txt | wc -l",  # wc decides the status
        "set -o pipefail; cat a.txt | grep needle",  # cat's failure could be the status
        "! grep needle a.txt",  # 1 means it matched
        "grep needle a.txt &",  # sent to the background
        "if grep -q needle a.txt; then echo y; fi",
        "(grep needle a.txt)",
        "{ grep needle a.txt; }",
        "xargs grep needle < list.txt",  # xargs has its own statuses
        "find . -exec grep needle {} +",
        "bash -c 'grep needle a.txt'",
        "grep needle $(cat files.txt)",  # the substitution ran too
        "$TOOL needle a.txt",
        "make test && grep ok log.txt",
        "cd src && grep needle main.py",  # a cd that fails exits 1 too
        "git diff",  # plain git diff exits 0 whatever it shows
        "git commit -m x",
        "false",
        "grep 'unclosed",
        # What came before the last command changes what it is, or what the line's status is.
        "cd src; grep -n needle main.py",
        "grep() { cat /nonexistent; }; grep foo /dev/null",
        "set -e; cp /nonexistent /tmp/x; grep -q zzz /dev/null",
        "cp /nonexistent /tmp/x || exit 1; grep -q zzz /dev/null",
        "trap 'exit 1' EXIT; grep -q root /etc/passwd",
        "exec cp /nonexistent /tmp/x; grep foo /dev/null",
        "hash -p /usr/bin/false grep; grep x /dev/null",
        "shopt -s expand_aliases\nalias grep='cp /x /y'\ngrep foo /dev/null",
        "test() { cp /nonexistent /tmp/x; }; test -e /",
        "./grep TODO src/",
        "/tmp/x/grep TODO src/",
        "PATH=. grep TODO src",
        "LC_ALL=C grep needle a.txt",
        # A redirection that fails exits 1 too; a substitution hides its own failures.
        "grep hello f.txt > /nonexistent/out",
        "grep hello < /missing",
        "diff f.txt f.txt >&7",
        "grep needle a.txt > hits.txt 2>&1",
        "builtin grep hello f.txt",
        "exec grep hello f.txt",
        "[[ -n $(cat /missing; make build) ]]",
        "[ $(false) ]",
        "test -n <(cat /missing)",
    ],
)
def test_anything_less_certain_stays_a_failure(line: str) -> None:
    assert benign_meaning(line, 1) == ""


def test_only_exit_1_is_an_answer() -> None:
    assert benign_meaning("grep needle missing.txt", 2) == ""  # 2: grep could not read
    assert benign_meaning("diff a b", 0) == ""


def test_a_long_line_is_not_parsed_again_for_its_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attacker round 56: a 75 KB line that exits 1 was parsed again on the event loop after it
    ran, 1.5 s of tree-sitter holding the GIL."""
    parsed: list[str] = []
    real = status._PARSER.parse
    monkeypatch.setattr(status, "_PARSER", _Spy(real, parsed))
    status.benign_meaning("grep -q x f", 1)
    assert parsed == ["grep -q x f"]
    parsed.clear()
    assert status.benign_meaning("for a do :; done; " + "true|" * 3000 + "false", 1) == ""
    assert parsed == []


class _Spy:
    def __init__(self, real: Any, seen: list[str]) -> None:
        self._real, self._seen = real, seen

    def parse(self, data: bytes) -> Any:
        self._seen.append(data.decode())
        return self._real(data)
