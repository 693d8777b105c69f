"""Which Bash command lines only read: those may run in parallel with other read-only calls.

Conservative on purpose: every simple command must be a program from a short list of readers, with
no wrapper, no output redirection, and for programs with writing modes (git, find) only their
reading forms. Anything else is treated as a writer and runs alone.
"""

from __future__ import annotations

from daemon.shell.model import ParsedCommand

_READERS = frozenset(
    {
        "cat", "head", "tail", "wc", "ls", "pwd", "echo", "printf", "true", "false", "stat",
        "file", "du", "df", "which", "whoami", "id", "date", "uname", "sort", "uniq", "cut",
        "tr", "diff", "cmp", "basename", "dirname", "realpath", "readlink", "test", "[",
        "grep", "egrep", "fgrep", "rg", "tree", "sha256sum", "md5sum", "nl", "column", "sleep",
    }
)  # fmt: skip
_GIT_READING = frozenset(
    {"status", "log", "diff", "show", "blame", "ls-files", "rev-parse", "describe", "shortlog"}
)
_FIND_WRITING = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fls"})


def _reads_only(name: str, argv: tuple[str, ...]) -> bool:
    if name in _READERS:
        return True
    if name == "git":
        verbs = [a for a in argv[1:] if not a.startswith("-")]
        return bool(verbs) and verbs[0] in _GIT_READING
    if name == "find":
        return not any(a in _FIND_WRITING for a in argv)
    return False


def is_read_only(line: ParsedCommand) -> bool:
    """True when every part of the parsed line only reads."""
    if not line.parsed or line.redirects or not line.simple_commands:
        return False
    return all(not c.wrappers and _reads_only(c.name, tuple(c.argv)) for c in line.simple_commands)
