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

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from daemon.host.confine import realpath_within
from daemon.shell.git import GitInvocation, parse_git
from daemon.shell.model import ParsedCommand, SimpleCommand
from daemon.shell.paths import normalised
from daemon.shell.read_as import read_as
from daemon.shell.readonly import command_reads_only

_CHANGES_DIRECTORY = frozenset({"cd", "pushd", "popd"})
#: The shell's own commands among the names this module trusts: a bare one is the builtin
#: whatever PATH says; given with a path, it is a program (`./cd` moves no shell).
_BUILTINS = _CHANGES_DIRECTORY | {"echo", "printf", "true", "false", ":", "test", "[", "export"}
_BUILTINS |= {"unset", "pwd"}
#: Where the image keeps its programs: `/bin/rm` is the image's rm, `./rm` the model's.
_PROGRAM_FOLDERS = ("/usr/bin/", "/bin/")


@dataclass(frozen=True)
class WordFact:
    """One word of a simple command."""

    text: str
    dynamic: bool
    """Its value is only known at run time (an expansion, a glob, a brace, a tilde)."""
    path: str
    """For a static word that is not an option: the absolute, normalised path it would name
    from the command's working directory; empty when unknown or not applicable."""

    def to_policy(self, perl: bool = False) -> dict[str, Any]:
        """Its JSON object in input.command.simple_commands[i].words (`perl`: the command is
        Perl, whose code is read as Perl reads it)."""
        fact: dict[str, Any] = {"text": self.text, "dynamic": self.dynamic, "path": self.path}
        reading = read_as(self.text, perl)
        if reading.text is not None:
            fact["read_as"] = reading.text
        if reading.unsure:
            fact["unread_escape"] = True
        if not self.path:
            # Where it is cannot be told (a dynamic word, a `cd` that may fail, a link the line
            # made), but its name can, as far as it is known: `cd .git/hooks; cp h pre-commit`.
            fact.update(name_end(self.text))
        return fact


#: Words whose paths are looked up on the disk per line (links already in the workspace).
_MAX_RESOLVED = 200
#: Programs that never make a link nor move a name, beside the reading forms (readonly.py):
#: after any other (`mv lnk d`, `tar x`, `python3 -c 'os.symlink(...)'`, `git checkout`), a path
#: may run through a link the line made.
_KEEP_NAMES = frozenset({"cd", "pushd", "popd", "echo", "printf", "true", "false", ":", "test"})
_KEEP_NAMES |= {"[", "sleep", "mkdir", "rmdir", "touch", "rm", "chmod", "export", "unset", "pwd"}
#: Builtins that may assign a shell variable or set an option whose name is not written as
#: such (a quoted, built or referenced name): after one, no `cd` of the line is followed.
_SETS_SHELL_STATE = frozenset(
    {"read", "mapfile", "readarray", "declare", "typeset", "local", "export", "readonly"}
    | {"getopts", "eval", "source", ".", "set", "shopt", "unset", "let", "alias", "enable"}
    | {"builtin", "exec", "trap", "hash", "pushd", "popd"}
)
#: Programs that remove or make names without making links: `rm L && mkdir L` turns a link
#: into a folder, so where one runs in the line, a path the disk resolves through a link may
#: lead elsewhere when the line runs (attacker round 81).
_RESHAPES = frozenset({"rm", "rmdir", "unlink", "mkdir"})
#: Wrappers that run their command in another directory than the line's: its relative paths
#: are not known here (attacker round 186: `env -C .. chmod 777 app`).
_MOVING_WRAPPERS = frozenset({"env -C", "find -execdir", "find -okdir"})
#: Characters that make a word's value known only at run time (expansions, globs, braces, ~).
_RUN_TIME_CHARACTERS = frozenset("$`*?[{~")
_RUN_TIME = re.compile(f"[{re.escape(''.join(sorted(_RUN_TIME_CHARACTERS)))}]")
#: Up to what closes a run-time piece (`${X}`, `$(x)`, `[ab]`, a backquote), in its component.
_PIECE_CLOSED = re.compile(r"^[^/]*[})\]`]")
#: A variable's name after `$`.
_NAME = re.compile(r"^[A-Za-z0-9_]+")


@dataclass(frozen=True)
class Lookup:
    """How a line may change what a command name runs: a function it defines may take any
    name, and a PATH it sets may lead a bare name to a program of the model's."""

    functions: bool
    path: bool

    @classmethod
    def of(cls, line: ParsedCommand) -> Lookup:
        return cls(functions=line.defines_functions, path="PATH" in line.raw)

    def trusted(self, command: SimpleCommand) -> bool:
        """Whether the command runs what its name means: the shell's builtin or the image's
        program, not a function of the line, a program PATH finds elsewhere or one given with
        another path (attacker round 83: `./cd` and `./echo` were taken for the builtins)."""
        name = command.name
        if command.dynamic or self.functions:
            return False
        if command.path == name:
            return name in _BUILTINS or not self.path
        if name in _CHANGES_DIRECTORY:
            return False  # a program cannot move the shell that runs it
        return command.path in (f"{folder}{name}" for folder in _PROGRAM_FOLDERS)

    def runs(self, command: SimpleCommand, names: frozenset[str]) -> bool:
        """Whether `command` is the shell's builtin, or the image's program, of one of `names`."""
        return command.name in names and self.trusted(command)

    def reads_only(self, command: SimpleCommand) -> bool:
        """`command_reads_only`, for a program that is the one its name means (attacker round
        84: a `find` or `cat` of the model's, given with a path or found through PATH)."""
        return self.trusted(command) and command_reads_only(command)


def may_relink(command: SimpleCommand, lookup: Lookup) -> bool:
    """Whether the command may make a link or move a name, as far as its program tells."""
    if command.dynamic:
        return True
    return not lookup.runs(command, _KEEP_NAMES) and not lookup.reads_only(command)


#: A job put in the background (`x &`, `coproc`): it runs beside what the line does after it.
_BACKGROUND = re.compile(r"(?<![&<>|])&(?![&>])|\bcoproc\b")
#: Programs that may leave what they run going on beside the rest of the line (`setsid -f`,
#: attacker round 85), or run it later.
_DETACHING = frozenset({"setsid", "nohup", "start-stop-daemon", "daemonize", "daemon", "disown"})
_DETACHING |= {"screen", "tmux", "at", "batch", "systemd-run"}


def _out_of_order(line: ParsedCommand) -> bool:
    """Whether a command of the line may run after one written later: a function's body runs
    where it is called, a background job or a detached program beside the rest (loops,
    pipeline stages and substitutions are not at the top level, see `command_facts`)."""
    if line.defines_functions or line.runs_in_background or _BACKGROUND.search(line.raw):
        return True
    return any({command.name, *command.wrappers} & _DETACHING for command in line.simple_commands)


def name_end(text: str) -> dict[str, Any]:
    """The end of the file name `text` names, as far as it is known before it runs:
    `basename` is the text after the last `/` or run-time piece, and `basename_whole` says
    whether that is the whole name (`x/$D/config`) or only its end (`conf?g`: `g`)."""
    pieces = list(_RUN_TIME.finditer(text))
    if not pieces:
        return {"basename": text.rstrip("/").rsplit("/", 1)[-1], "basename_whole": True}
    tail = text[pieces[-1].end() :]
    closed = _PIECE_CLOSED.match(tail)
    if closed:
        tail = tail[closed.end() :]
    elif pieces[-1].group() == "$":
        tail = _NAME.sub("", tail, count=1)
    return {"basename": tail.rsplit("/", 1)[-1], "basename_whole": "/" in tail}


def word_facts(
    command: SimpleCommand, cwd: str, within: str | None = None, reshaped: bool = False
) -> list[WordFact]:
    """Every argv word of `command` (after the program) with what is known of it (`within`, the
    workspace: static paths through links already in it are given as where they lead; unless
    the line `reshaped` names, then a path through a link is unknown)."""
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
        if within is not None and path and path != "/":
            # Lexically `L/` is a folder in the workspace; if L is a link to `.` it is the
            # workspace itself, and `L/..` what holds the workspace. Only names the disk holds
            # are followed; nothing is opened. A link that cannot be read: unknown.
            path = _through_links(_joined(cwd, text), path, within, reshaped)
        facts.append(WordFact(text, unknown, path))
    return facts


def command_facts(
    line: ParsedCommand, cwd: str, workspace: str, settled: bool = True
) -> list[dict[str, Any]]:
    """The policy's view of each simple command (its `to_policy()` plus `cwd`, `words` and,
    for git, `git`). A `cd` is followed only while it is certain: at the top level of the line
    and with `&&` from it up to the command (after `;` or `||` the command also runs when the
    `cd` failed, in the old directory); otherwise the directory is unknown (""). Unless the
    disk is `settled` (no command of the session changes it meanwhile), no path is known."""
    current, moved = cwd, False
    linked = not settled
    # No `cd` of such a line is followed: CDPATH makes a relative one go anywhere, and
    # `set -o physical` (`set -P`) makes each go through links, which lexical paths do not.
    unfollowed = (
        "CDPATH" in line.raw
        or "physical" in line.raw
        or re.search(r"\bset\s+-\w*P", line.raw) is not None
        # A function may be named `cd` (or anything a line runs): `cd() { :; }; cd sub && x`
        # ran x where the line started (attacker round 82).
        or line.defines_functions
    )
    lookup = Lookup.of(line)
    reshapers = sum(1 for command in line.simple_commands if reshapes_names(command))
    relinks = [may_relink(command, lookup) for command in line.simple_commands]
    # For each command: whether a command after it may relink, and one not at the top level.
    relink_after, nested_relink_after = _after_each(line.simple_commands, relinks)
    out_of_order = _out_of_order(line)
    resolved = 0
    facts = []
    for index, command in enumerate(line.simple_commands):
        # A link made by a command written later is on this one's paths too where this one may
        # run after it: in a loop (again), a function, the background, a pipeline beside it
        # (attacker round 84: `f() { rm -rf L/<ws>; }; ln -s .. L && f`); and where that one
        # may run first: a substitution in this command's words, assignments or redirections
        # is listed after it (round 85: `rm -rf L/<ws> 2>"$(ln -s .. L)x"`).
        late = nested_relink_after[index] or (
            relink_after[index] and (out_of_order or not command.top_level)
        )
        # Its own operands are resolved before it removes or makes anything: only another
        # command that does may change where they lead.
        reshaped = reshapers > (1 if reshapes_names(command) else 0)
        entry = command.to_policy()
        here = "" if _MOVING_WRAPPERS.intersection(command.wrappers) else current
        entry["cwd"] = here
        resolve = resolved < _MAX_RESOLVED
        words = word_facts(command, here, workspace if resolve else None, reshaped)
        resolved += len(words)
        if linked or late or not resolve:
            # A link made earlier in the line (or later, where this runs after it), or one not
            # looked up, may stand anywhere in these paths.
            words = [WordFact(w.text, w.dynamic, "") if w.path else w for w in words]
        perl = command.name.startswith("perl")
        entry["words"] = [w.to_policy(perl) for w in words]
        readings = [read_as(text, perl) for text in command.stdin_texts]
        if any(reading.text is not None for reading in readings):
            entry["stdin_read_as"] = [r.text for r in readings if r.text is not None]
        if any(reading.unsure for reading in readings):
            entry["stdin_unread_escape"] = True
        entry["reads_only"] = lookup.reads_only(command)
        entry["program_reads_only"] = (
            lookup.reads_only(replace(command, wrappers=()))
            if command.wrappers
            else entry["reads_only"]
        )
        if command.name == "git" and not command.dynamic:
            git: GitInvocation = parse_git(command.argv, command.dynamic_words, here)
            entry["git"] = git.to_policy()
        facts.append(entry)
        if command.dynamic or (command.path == command.name and command.name in _CHANGES_DIRECTORY):
            # The shell may move: followed only where it surely is the builtin (not a function
            # of that name, nor a program known only when it runs, such as `$C sub`).
            follow = lookup.runs(command, _CHANGES_DIRECTORY) and not unfollowed
            current, moved = (_after_cd(command, current, workspace) if follow else ""), True
        elif moved and not command.then_and:
            current = ""
        linked = linked or relinks[index]
        unfollowed = unfollowed or may_set_shell_state(command)
    return facts


def _after_each(
    commands: tuple[SimpleCommand, ...], relinks: list[bool]
) -> tuple[list[bool], list[bool]]:
    """For each command, whether one after it relinks, and whether one not at the top level
    does (in one pass from the end)."""
    after, nested_after = [False] * len(commands), [False] * len(commands)
    seen = nested = False
    for index in range(len(commands) - 1, -1, -1):
        after[index], nested_after[index] = seen, nested
        seen = seen or relinks[index]
        nested = nested or (relinks[index] and not commands[index].top_level)
    return after, nested_after


def may_set_shell_state(command: SimpleCommand) -> bool:
    """Whether the command may set a variable or an option `cd` reads (CDPATH, cdable_vars,
    physical) without naming it as written: `printf -v CD''PATH /x` set it (attacker round
    81), and so may the other builtins that assign names."""
    names = {command.name, *command.wrappers}
    if command.dynamic or names & _SETS_SHELL_STATE:
        return True
    return "printf" in names and any(
        word.startswith("-v") or dynamic
        for word, dynamic in zip(command.argv[1:], command.dynamic_words[1:], strict=False)
    )


def _after_cd(command: SimpleCommand, current: str, workspace: str) -> str:
    """The directory after a `cd` (empty: unknown from here on)."""
    if (
        command.name != "cd"
        or command.wrappers
        or command.assignments
        or not command.top_level
        or not command.then_and
        or command.after_or
    ):
        return ""  # in a subshell or a loop it stays local; before `;` or `||`, it may fail
    if any(arg.startswith("-") and "P" in arg for arg in command.argv[1:]):
        return ""  # the physical directory: through links, which lexical paths do not follow
    words = [w for w in word_facts(command, current) if w.text not in ("-L", "-e", "--")]
    if len(words) != 1 or words[0].dynamic or words[0].text == "-":
        return ""  # `cd` alone goes home, `cd -` back: neither is known here
    lexical = words[0].path
    if lexical and ".." in words[0].text.split("/"):
        # Bash takes `..` lexically, but where that names no directory it goes to the path as
        # written, through links (`L/../deep` is then the folder beside where L leads): known
        # only when both are the same directory (attacker round 80).
        physical = _followed(_joined(current, words[0].text), workspace)
        if physical is None or physical != _followed(lexical, workspace):
            return ""
    return lexical


def written_files(
    line: ParsedCommand, directories: list[str], workspace: str, settled: bool = True
) -> list[dict[str, Any]]:
    """Each output redirection's target as the files it may be: from every directory the line
    may be in when it writes (`directories`: where it starts and each `cd` it follows), with
    links on disk followed. `known` is false when a target's place cannot be told (an expansion
    in it, a `cd` that cannot be followed, a link the line may make, the disk not `settled`, or
    past the resolving budget)."""
    places = list(dict.fromkeys(directories))
    lookup = Lookup.of(line)
    linked = not settled or any(may_relink(command, lookup) for command in line.simple_commands)
    reshaped = any(reshapes_names(command) for command in line.simple_commands)
    budget = _MAX_RESOLVED
    files = []
    for target in line.written_paths:
        paths: list[str] = []
        known = not _RUN_TIME_CHARACTERS.intersection(target)
        bases = ["/"] if target.startswith("/") else places
        for base in bases if known else []:
            if not normalised(base, target) or budget <= 0:
                known = False
                continue
            budget -= 1
            followed = _through_links(
                _joined(base, target), normalised(base, target), workspace, reshaped
            )
            if not followed:
                known = False
                continue
            paths.append(followed)
        # Lexically: `.//config` and `objects/../config` are `config`.
        normal = os.path.normpath(target) if target else ""
        files.append(
            {
                "target": target,
                "normal": normal,
                "paths": list(dict.fromkeys(paths)),
                "known": known and not linked,
                **name_end(normal),
            }
        )
    return files


def _joined(base: str, word: str) -> str:
    """`word` from the directory `base`, `..` and all: the kernel takes `L/..` after following
    L, which `os.path.realpath` does too, and a lexical normalisation does not."""
    return word if word.startswith("/") else f"{base}/{word}"


def reshapes_names(command: SimpleCommand) -> bool:
    """Whether the command may remove or make names. Where it stands in the line does not
    matter: stages of a pipeline, and what runs in the background, go on beside the rest."""
    return command.dynamic or bool({command.name, *command.wrappers} & _RESHAPES)


def _through_links(joined: str, lexical: str, workspace: str, reshaped: bool) -> str:
    """Where `joined` leads on the disk now; "" when that is not known: a link that cannot be
    read, or one on the way while the line `reshaped` names (it may be gone when it runs)."""
    followed = _followed(joined, workspace)
    if followed is None or (reshaped and followed != lexical):
        return ""
    return followed


def _followed(path: str, workspace: str) -> str | None:
    """`path` with the links the workspace holds followed (nothing is opened); None when a name
    in it may be a link that cannot be read: where it leads is unknown. What leaves the
    workspace is taken as written: the command runs in a container, whose files outside the
    workspace are not the host's, and the daemon must not tell where the host's links lead."""
    try:
        return str(realpath_within(Path(path), Path(workspace)))
    except OSError:
        return None
