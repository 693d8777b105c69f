"""What a command line's exit status means, when it is not a failure.

Some programs answer a question with their exit status: grep exits 1 when nothing matched, diff
when the files differ, test when the condition is false, `git diff --exit-code` when there are
differences. For such a line, exit 1 is an answer, not an error. The status of a line is the one
of the command that ran last, so the table is applied to that command only, and only where it is
certain to be the one and to be that program: a line of one statement (a command, or a pipeline
whose last stage it is, unless the line mentions pipefail), naming the program by its bare name
(found on PATH, not `./grep`), without variable assignments, and only through wrappers that keep
its status. Anything else keeps every non-zero status an error: several statements (an earlier
one can define a function or alias of that name, `set -e`, `trap ... EXIT`, `exec`, `hash -p`,
`exit`), `a && b` (even `cd DIR && grep ...`: a cd that fails exits 1 too), a negation, a loop, a
condition, a subshell, a command sent to the background, a line that does not parse.
"""

from __future__ import annotations

import tree_sitter
import tree_sitter_bash

from daemon.shell.bounded import IN_THREAD_CHARS
from daemon.shell.parse import parse_command

_PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))
_SEARCHES = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack"})
_COMPARES = frozenset({"diff", "cmp"})
_TESTS = frozenset({"test", "["})
_STATUS_KEEPING_WRAPPERS = frozenset(
    {"sudo", "env", "env -C", "nice", "nohup", "timeout", "stdbuf", "time"}
)
"""Wrappers whose own status is the wrapped command's (xargs, find -exec and bash -c are not:
they run it many times, or it is a line of its own; builtin and exec fail on their own)."""
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_HARMLESS_TARGETS = frozenset({"/dev/null"})


def benign_meaning(raw: str, exit_code: int) -> str:
    """What exit `exit_code` of the line `raw` says when it is an answer ("no match found"),
    "" when it is a failure."""
    if exit_code != 1 or "pipefail" in raw or len(raw) > IN_THREAD_CHARS:
        # A longer line may take tree-sitter seconds, holding the GIL (daemon.shell.bounded);
        # its failure is then shown as it is.
        return ""
    tree = _PARSER.parse(raw.encode("utf-8", "surrogateescape"))
    if tree.root_node.has_error:
        return ""
    final = _final_command(tree.root_node)
    if final is None or _runs_more(final):
        return ""
    if final.type == "test_command":
        return "the condition is false"
    text = final.text.decode("utf-8", "surrogateescape") if final.text else ""
    return _meaning(text)


def _final_command(program: tree_sitter.Node) -> tree_sitter.Node | None:
    """The command whose status is the line's, when that is certain."""
    statements = [child for child in program.children if child.type != "comment"]
    if len(statements) == 2 and statements[-1].type == ";":
        statements = statements[:1]
    if len(statements) != 1 or not statements[0].is_named:  # several, or sent to the background
        return None
    node: tree_sitter.Node | None = statements[0]
    while node is not None:
        if node.type in ("command", "test_command"):
            return node
        if node.type == "redirected_statement":
            if not all(_harmless(redirect) for redirect in node.named_children[1:]):
                return None  # a redirection that fails makes the line exit 1 too
            node = node.child_by_field_name("body")
        elif node.type == "pipeline":
            node = node.named_children[-1] if node.named_children else None
        else:
            return None  # negation, subshell, group, loop, condition, function, ...
    return None


def _harmless(redirect: tree_sitter.Node) -> bool:
    """A redirection that cannot fail: to /dev/null, or 2>&1 / 1>&2."""
    if redirect.type != "file_redirect":
        return False
    words = [c.text.decode("utf-8", "surrogateescape") for c in redirect.children if c.text]
    target = words[-1] if words else ""
    if target in _HARMLESS_TARGETS:
        return True
    return words in (["2", ">&", "1"], [">&", "2"], ["1", ">&", "2"])


def _runs_more(node: tree_sitter.Node) -> bool:
    """Whether a substitution inside it runs commands of its own (whose failures it hides)."""
    if node.type in _SUBSTITUTIONS:
        return True
    return any(_runs_more(child) for child in node.children)


def _meaning(text: str) -> str:
    line = parse_command(text)
    if not line.parsed or len(line.simple_commands) != 1:
        return ""  # e.g. a substitution inside it: its own commands ran too
    command = line.simple_commands[0]
    if command.dynamic or not set(command.wrappers) <= _STATUS_KEEPING_WRAPPERS:
        return ""
    if command.path != command.name or command.assignments:
        return ""  # ./grep is the workspace's own program; PATH=... finds another
    if command.name in _SEARCHES:
        return "no match found"
    if command.name in _COMPARES:
        return "the files differ"
    if command.name in _TESTS:
        return "the condition is false"
    if command.name == "git" and _git_subcommand(command.argv) == "grep":
        return "no match found"
    if command.name == "git" and _git_subcommand(command.argv) == "diff":
        flags = set(command.argv)
        if flags & {"--exit-code", "--quiet"}:
            return "there are differences"
    return ""


def _git_subcommand(argv: tuple[str, ...]) -> str:
    """git's subcommand, past its global options (`git -C dir diff` is diff)."""
    words = iter(argv[1:])
    for word in words:
        if word in ("-C", "-c", "--git-dir", "--work-tree", "--namespace"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return ""
