"""What a command reads on its input where the grammar does not say so.

tree-sitter hangs a redirection or a heredoc on the statement it follows. When that statement is
a group, a loop, a subshell or a function's call, the commands inside read what it is given, and
a program that reads its commands from its input runs them unread unless the parse says so.
Attacker rounds 192 to 196 ran hidden commands that way:
- `{ bash; } <<'EOF'`;
- `bash < <(echo ...)`;
- `f() { python3 -; }; f <<'EOF'`;
- `exec < <(...)` before a later `bash`;
- a descriptor's path spelt otherwise (`/usr/../proc/self/fd//0`).

The parser keeps, per line, the node ids of commands and compound bodies that read a stream or
are fed text; these helpers find them for a command and say what leaves a line unparsed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import replace

import tree_sitter

from daemon.shell.model import SimpleCommand
from daemon.shell.words import node_text, render_word
from daemon.shell.wrappers import Word

#: How far up a command's ancestors are looked at (the grammar's own nesting bound).
_MAX_DEPTH = 256
#: What names a descriptor: reading it reads whatever stream it was given.
_DESCRIPTOR_PATH = re.compile(r"(?:.*/)?(?:fd/[0-9]+|stdin)|/proc/.+/fd/[0-9]+")


def reads_a_stream(redirect: tree_sitter.Node, data: bytes) -> bool:
    """Whether a redirection gives the command a stream to read, on its input or on another
    descriptor, which it may read as its input or through a path (`bash s 3< <(...)` with s a
    link to /dev/fd/3): a process substitution (`< <(echo ...)`), another descriptor (`<&3`), a
    descriptor's path however spelt, or a source only known when it runs (`< $F`, which may be
    one)."""
    operator = next((c.type for c in redirect.children if not c.is_named), "")
    source = redirect.child_by_field_name("destination")
    if source is None or operator not in ("<", "<&", "<>"):
        return False
    word = render_word(source, data)
    if operator == "<&":
        return word.text not in ("0", "-") or word.dynamic
    path = posixpath.normpath(re.sub("/+", "/", word.text))
    return word.dynamic or _DESCRIPTOR_PATH.fullmatch(path) is not None


def _ancestors(node: tree_sitter.Node, itself: bool = False) -> Iterable[tree_sitter.Node]:
    around = node if itself else node.parent
    for _ in range(_MAX_DEPTH):
        if around is None:
            return
        yield around
        around = around.parent


def streamed(node: tree_sitter.Node, streams: set[int]) -> bool:
    """Whether the command at `node`, or a compound command around it, reads a stream."""
    return bool(streams) and any(a.id in streams for a in _ancestors(node, itself=True))


def fed_around(node: tree_sitter.Node, fed: dict[int, list[Word]]) -> list[Word]:
    """What the compound commands around `node` are given on their input."""
    if not fed:
        return []
    return [word for around in _ancestors(node) for word in fed.get(around.id, [])]


def enclosing_function(node: tree_sitter.Node, data: bytes) -> str:
    """The name of the innermost function whose body holds `node` ("" for none)."""
    for around in _ancestors(node):
        if around.type == "function_definition":
            name = around.child_by_field_name("name")
            return node_text(name, data) if name is not None else ""
    return ""


def exec_alone(words: list[Word]) -> bool:
    """`exec` with no command (only its options; also `command exec`): what it redirects is
    the shell's own, for every command after it."""
    texts = [w.text for w in words]
    while texts and texts[0] in ("command", "builtin"):
        texts = texts[1:]
        while texts and texts[0].startswith("-") and texts[0] != "--":
            texts = texts[1:]
    if not texts or texts[0] != "exec":
        return False
    rest = texts[1:]
    while rest and rest[0].startswith("-"):
        rest = rest[2:] if rest[0] == "-a" else rest[1:]
    return not rest


def given_input(command: SimpleCommand) -> bool:
    """Whether a command is given input: fed text, a stream, or a pipe as a later stage."""
    return bool(command.stdin_texts) or command.stdin_stream or command.stage > 0


def feed_functions(
    commands: list[SimpleCommand], inside: list[str], functions: set[str]
) -> list[SimpleCommand]:
    """`commands`, where those of a function the line defines (`inside`: each one's function)
    read what a call of it is given, and so on through the functions they call: they were
    listed where it was defined, without it. Said to read a stream: a reader with no script
    there asks, the rest runs (a fork bomb's `:|:` is given a pipe)."""
    fed: set[str] = set()
    while True:
        called = {
            c.path
            for c, holder in zip(commands, inside, strict=True)
            if c.path in functions and (given_input(c) or holder in fed)
        }
        if called <= fed:
            break
        fed |= called
    return [
        replace(c, stdin_stream=True) if holder in fed else c
        for c, holder in zip(commands, inside, strict=True)
    ]


def unattributed_input(commands: list[SimpleCommand], functions: set[str]) -> str:
    """Why input may reach commands no parse attributes it to ("" when it cannot): bash's
    handler of unknown commands, a mapfile callback or an alias in a line given input."""
    given = any(given_input(c) for c in commands)
    callback = any(
        c.name in ("mapfile", "readarray") and any(re.match(r"-[A-Za-z]*C", a) for a in c.argv)
        for c in commands
    )
    aliases = any(c.name == "alias" for c in commands)
    if "command_not_found_handle" in functions or (given and ((callback and functions) or aliases)):
        return (
            "The command defines bash's command_not_found_handle, or gives input to a line that "
            "defines an alias or a mapfile callback, which may run it as commands the policy "
            "does not see; run those commands directly."
        )
    return ""
