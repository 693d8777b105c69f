"""What each simple command of a Bash line works on, as far as can be known without running it:
for every word whether its value is static or only known at run time, and for static words
that could name a file the normalised absolute path (relative to the working directory the
command runs in); for git, the directory it works in, its configuration overrides, and its
subcommand with the options spelled out the way git reads them.

The policy decides on effects (a recursive delete of the workspace, a history rewrite) from
these facts, not from how a command is spelled: `rm -rf "$D"`, `rm -rf /srv/ws/.` and
`cd /srv/ws && rm -rf .` are the same fact. Whatever cannot be known is said to be unknown
(a dynamic word, an empty path), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from daemon.shell.git import GitInvocation, parse_git
from daemon.shell.model import ParsedCommand, SimpleCommand
from daemon.shell.paths import normalised

_CHANGES_DIRECTORY = frozenset({"cd", "pushd", "popd"})


@dataclass(frozen=True)
class WordFact:
    """One word of a simple command."""

    text: str
    dynamic: bool
    """Its value is only known at run time (an expansion, a glob, a brace, a tilde)."""
    path: str
    """For a static word that is not an option: the absolute, normalised path it would name
    from the command's working directory; empty when unknown or not applicable."""

    def to_policy(self) -> dict[str, Any]:
        return {"text": self.text, "dynamic": self.dynamic, "path": self.path}


def word_facts(command: SimpleCommand, cwd: str) -> list[WordFact]:
    """Every argv word of `command` (after the program) with what is known of it."""
    dynamic = command.dynamic_words or (False,) * len(command.argv)
    facts = []
    options_over = False
    for text, is_dynamic in zip(command.argv[1:], dynamic[1:], strict=False):
        # An unquoted ~ expands to a home directory; quoted it is a plain word. Quoting is gone
        # by now, so a leading ~ counts as an expansion either way.
        unknown = is_dynamic or text.startswith("~")
        option = not options_over and text.startswith("-") and text != "-"
        if text == "--":
            options_over = True
        path = "" if unknown or option or not text else normalised(cwd, text)
        facts.append(WordFact(text, unknown, path))
    return facts


def command_facts(line: ParsedCommand, cwd: str) -> list[dict[str, Any]]:
    """The policy's view of each simple command (its `to_policy()` plus `cwd`, `words` and,
    for git, `git`). A `cd` is followed only while it is certain: at the top level of the line
    and with `&&` from it up to the command (after `;` or `||` the command also runs when the
    `cd` failed, in the old directory); otherwise the directory is unknown ("")."""
    current, moved = cwd, False
    facts = []
    for command in line.simple_commands:
        entry = command.to_policy()
        entry["cwd"] = current
        entry["words"] = [w.to_policy() for w in word_facts(command, current)]
        if command.name == "git" and not command.dynamic:
            git: GitInvocation = parse_git(command.argv, command.dynamic_words, current)
            entry["git"] = git.to_policy()
        facts.append(entry)
        if command.name in _CHANGES_DIRECTORY:
            current, moved = _after_cd(command, current), True
        elif moved and not command.then_and:
            current = ""
    return facts


def _after_cd(command: SimpleCommand, current: str) -> str:
    """The directory after a `cd` (empty: unknown from here on)."""
    if command.name != "cd" or command.wrappers or not command.top_level or not command.then_and:
        return ""  # in a subshell or a loop it stays local; before `;` or `||`, it may fail
    words = [w for w in word_facts(command, current) if w.text not in ("-L", "-P", "-e", "--")]
    if len(words) != 1 or words[0].dynamic or words[0].text == "-":
        return ""  # `cd` alone goes home, `cd -` back: neither is known here
    return words[0].path
