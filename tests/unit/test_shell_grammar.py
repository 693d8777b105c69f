"""Each tree-sitter-bash quirk that daemon/shell/grammar.py makes up for, pinned on the bare
grammar. When a grammar upgrade fixes one, its `test_grammar_still_*` test fails: the workaround it
names can then go (and the parser test beside it shows the line is still read as bash reads it)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tree_sitter
import tree_sitter_bash

from daemon.shell.parse import parse_command

LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())


def tree(line: bytes) -> str:
    """The bare grammar's reading of `line`, as an S-expression."""
    return str(tree_sitter.Parser(LANGUAGE).parse(line).root_node)


def argvs(line: str) -> list[list[str]]:
    return [list(c.argv) for c in parse_command(line).simple_commands]


def test_grammar_still_crashes_on_some_non_ascii_input() -> None:
    """Quirk 1 (grammar.ascii_only): a process that parses these inputs dies about one time in
    two (memory layout decides); of twenty, one dies unless the grammar was fixed."""
    script = (
        "import tree_sitter, tree_sitter_bash\n"
        "parser = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))\n"
        "for _ in range(300):\n"
        "    for line in ('{\\U0006a137', '{\\U000e0001', '{\\U000ffffd x'):\n"
        "        parser.parse(line.encode())\n"
    )
    for _ in range(20):
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
        if run.returncode < 0:
            return
    pytest.fail("the grammar no longer crashes on these inputs: grammar.ascii_only can go")


def test_grammar_still_splits_a_word_at_backslash_newline() -> None:
    """Quirk 2 (grammar.join_continuations)."""
    reading = tree(b"r\\\nm -rf x")
    assert reading.count("(word)") == 4, f"one word again? join_continuations can go: {reading}"
    assert argvs("r\\\nm -rf x") == [["rm", "-rf", "x"]]


def test_grammar_still_reads_time_before_a_group_as_a_command() -> None:
    """Quirk 3 (grammar.blank_keyword_prefixes)."""
    reading = tree(b"time { rm x; }")
    assert "compound_statement" not in reading, "blank_keyword_prefixes can go"
    assert argvs("time { rm x; }") == [["rm", "x"]]


def test_grammar_still_leaves_backslashes_in_backquotes() -> None:
    """Quirk 4 (grammar.backquoted_body): bash runs `rm x` here."""
    reading = tree(b"echo `echo \\`rm x\\``")
    assert reading.count("command_substitution") == 1, "backquoted_body can go"
    assert ["rm", "x"] in argvs("echo `echo \\`rm x\\``")


def test_grammar_still_hangs_words_after_a_target_on_the_redirection() -> None:
    """Quirk 5 (grammar.words_after_target): bash runs `echo x > f`."""
    reading = tree(b"echo > f x")
    assert "destination: (word) destination: (word)" in reading, "words_after_target can go"
    assert argvs("echo > f x") == [["echo", "x"]]


def test_grammar_still_attaches_a_trailing_redirection_to_the_pipeline() -> None:
    """Quirk 6 (grammar.last_command): bash binds `> out` to `b`."""
    reading = tree(b"a | b > out")
    assert reading.startswith("(program (redirected_statement body: (pipeline"), (
        "last_command can go"
    )
    parsed = parse_command("a | b > out")
    assert [(r.op, r.target) for r in parsed.redirects] == [(">", "out")]


def test_grammar_still_misses_a_substitution_inside_a_pattern_expansion() -> None:
    """Quirk 7 (grammar.unseen_substitution): the substitution is not a node of its own."""
    reading = tree(b"echo ${x/pat/`rm y`}")
    assert "command_substitution" not in reading, "unseen_substitution can go"
    parsed = parse_command("echo ${x/pat/`rm y`}")
    assert not parsed.parsed and "command substitution" in parsed.parse_error


@pytest.mark.parametrize("line", ["echo x; }", "done"])
def test_grammar_still_makes_a_reserved_word_a_command(line: str) -> None:
    """Quirk 8 (grammar.RESERVED): the grammar reads the word as a command name; bash refuses
    the line. The parser marks it unparsed, so the policy does not trust the commands found."""
    assert "(command name: (command_name (word)))" in tree(line.encode()), "RESERVED can go"
    parsed = parse_command(line)
    assert not parsed.parsed and "reserved word" in parsed.parse_error


def test_grammar_still_reads_a_newline_as_a_space_after_a_pipeline() -> None:
    """Quirk 9 (grammar.newlines_between_words): bash runs `c`, then `rm x && y`. Found by
    hypothesis in CI: the rm was invisible to the policy."""
    reading = tree(b"a | b | c\nrm x && y")
    assert "argument: (word) argument: (word)" in reading, "newlines_between_words can go"
    assert argvs("a | b | c\nrm x && y") == [["a"], ["b"], ["c"], ["rm", "x"], ["y"]]


def test_grammar_still_hangs_words_after_a_heredoc_delimiter_on_the_heredoc() -> None:
    """Quirk 5 again (grammar.words_after_target): bash runs `rm -rf /ws` with the heredoc as its
    input; the policy saw a bare `rm`."""
    reading = tree(b"rm <<EOF -rf /ws\nEOF\n")
    assert "(heredoc_start) argument: (word) argument: (word)" in reading, (
        "words_after_target's heredoc case can go"
    )
    assert argvs("rm <<EOF -rf /ws\nEOF\n") == [["rm", "-rf", "/ws"]]
    assert argvs("cat <<EOF | sort\nx\nEOF\n") == [["cat"], ["sort"]]
    assert argvs("sudo rm <<EOF -rf /ws\nEOF\n") == [["rm", "-rf", "/ws"]]


def test_grammar_still_reads_a_three_stage_pipeline_before_and_as_a_nested_list() -> None:
    """Quirk 10 (grammar.leftmost_operand): bash runs `(a | b | c) && d`."""
    assert tree(b"a | b | c && d").startswith("(program (pipeline (command"), (
        "leftmost_operand can go"
    )
    placed = [
        (c.name, c.pipeline, c.stage) for c in parse_command("a | b | c && d").simple_commands
    ]
    assert placed == [("a", 1, 0), ("b", 1, 1), ("c", 1, 2), ("d", 0, 0)]


def test_grammar_still_starts_a_word_with_the_newline_before_it() -> None:
    """Quirk 11 (grammar.newlines_between_words): bash runs `echo hi`, then `rm -rf /x`."""
    assert tree(b"echo hi\n\\rm -rf /x").count("(command ") == 1, "the word-start check can go"
    assert argvs("echo hi\n\\rm -rf /x") == [["echo", "hi"], ["rm", "-rf", "/x"]]


def test_grammar_still_takes_a_heredoc_delimiter_as_written() -> None:
    """Quirk 12 (grammar.heredoc_trusted): to bash the delimiter is `Ex`, so rm runs."""
    line = 'cat <<E"x"\nEx\nrm -rf /x\nE"x"'
    assert tree(line.encode()).count("(command ") == 1, "heredoc_trusted can go"
    parsed = parse_command(line)
    assert not parsed.parsed and "heredoc" in parsed.parse_error


def test_grammar_still_reads_a_descriptor_as_the_command_name() -> None:
    """Quirk 13 (grammar.descriptor_as_name, closes_descriptor): bash runs `rm -rf /x`."""
    assert "(command name: (command_name (number)))" in tree(b"0</dev/null rm -rf /x"), (
        "descriptor_as_name can go"
    )
    assert not parse_command("0</dev/null rm -rf /x").parsed
    assert "destination: (raw_string)" in tree(b"bash -c >&- 'rm -rf /x'"), (
        "closes_descriptor can go"
    )
    assert argvs("bash -c >&- 'rm -rf /x'") == [["rm", "-rf", "/x"]]


def test_grammar_still_drops_a_dash_before_a_heredoc() -> None:
    """Quirk 14 (grammar.uncovered, quote_dropped_dash): the `-` is in no node."""
    assert tree(b"python3 - <<PY\nx\nPY\n").count("(word)") == 1, "quote_dropped_dash can go"
    assert argvs("python3 - <<PY\nx\nPY\n") == [["python3", "-"]]
