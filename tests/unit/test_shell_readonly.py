"""Read-only Bash lines (run beside other read-only calls) are recognised by shape: every program
and every option on a list of known reading forms; a writing option, an assignment prefix, a
redirection or a word only known at run time anywhere makes the line a writer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.shell.parse import parse_command
from daemon.shell.readonly import is_read_only

READERS = [
    "ls -la", "ls -la --color=auto src", "cat -n a.txt", "head -n 5 a.txt", "head -n5 a.txt",
    "tail -f log", "wc -l a b", "sort -rn -k 2 data", "sort --key=2 -t, data", "uniq -c data",
    "cut -d: -f1 /etc/passwd", "grep -rn TODO src", "grep -5 x f", "rg -i foo", "rg --json x",
    "find . -name '*.py' -type f", "find src -maxdepth 2 -printf '%p\\n'", "diff -u a b",
    "date +%F", "date -u +%s", "echo hello", "printf '%s\\n' x", "pwd", "stat -c %s a",
    "du -sh .", "tree -L 2", "sha256sum a", "cat a | grep b | sort | uniq -c", "test -f a",
    "ls && pwd", "cat 'file with *'", "/usr/bin/cat a",
]  # fmt: skip

WRITERS = [
    # Writing options and operands.
    "sort -o out data", "sort --output=out data", "sort --compress-program=gzip data",
    "sort -T /tmp data", "uniq in out", "tree -o out", "date -s now", "date 010100002030",
    "find . -fprintf out %p", "find . -delete", "find . -exec rm {} ;", "find . -fls out",
    "rg --pre ./x foo", "file -C -m magic", "tail --pid=1 --unknown x",
    # Assignment prefixes: a program found elsewhere, a library loaded, a tool run.
    "PATH=/tmp/bin ls", "LD_PRELOAD=./x.so cat a", "GIT_EXTERNAL_DIFF=./x git diff",
    # Redirections and wrappers.
    "cat a > b", "cat a >> b", "ls 2>err", "env ls", "timeout 5 cat a", "xargs cat",
    # Words only known at run time where an option could hide.
    "sort $OPTS data", "cat *", "ls $(echo -o)", "head -n $N a",
    # Programs a repository's configuration can make run others, and unknown programs.
    "git status", "git diff", "git log", "./cat a", "/tmp/cat a", "python3 x.py", "make",
    # Not parsed whole.
    "cat $(", "echo `rm x`",
    # Code hidden in array subscripts, which bash evaluates (found by an attacker).
    "printf -v 'a[$(date > w)]' x", "test -v 'a[$(touch w)]'", "x='a[$(touch w)]'; echo $((x))",
    "echo $((1 + 2))",
]  # fmt: skip


@pytest.mark.parametrize("line", READERS)
def test_reading_forms_are_read_only(line: str) -> None:
    assert is_read_only(parse_command(line)), line


@pytest.mark.parametrize("line", WRITERS)
def test_writing_forms_are_not(line: str) -> None:
    assert not is_read_only(parse_command(line)), line


_WRITER_PARTS = [
    "sort -o out x", "uniq a b", "tree -o f", "find . -fprintf f x", "date -s 1",
    "PATH=/x ls", "LD_PRELOAD=x cat a", "cat a > b", "git status", "rm -f x", "touch x",
    "sort --compress-program=x y", "cat $V", "find . -delete", "rg --pre x y",
]  # fmt: skip
_SEPARATORS = [" && ", " ; ", " | ", " || ", "\n"]


@settings(max_examples=300, deadline=None)
@given(
    readers=st.lists(st.sampled_from(READERS), max_size=4),
    writer=st.sampled_from(_WRITER_PARTS),
    at=st.integers(min_value=0, max_value=4),
    separators=st.lists(st.sampled_from(_SEPARATORS), min_size=5, max_size=5),
)
def test_a_line_with_any_writer_form_is_never_read_only(
    readers: list[str], writer: str, at: int, separators: list[str]
) -> None:
    parts = list(readers)
    parts.insert(min(at, len(parts)), writer)
    line = parts[0]
    for part, separator in zip(parts[1:], separators, strict=False):
        line += separator + part
    assert not is_read_only(parse_command(line)), line


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(READERS), min_size=1, max_size=4))
def test_lines_of_readers_only_are_read_only(readers: list[str]) -> None:
    line = " && ".join(readers)
    assert is_read_only(parse_command(line)), line
