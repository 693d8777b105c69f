"""A Bash command's secrets hidden only where the command carries one.

Patterns over text cannot tell a quoted secret from the end of one word and the start of a
later one, an assignment from a program named like one, or a value from the next line's
command: attacker rounds 141 and 144-147 hid what ran behind a masked value. So a command is
masked by the patterns, and the masked command is parsed again: it must run the same programs
with the same wrappers, redirections and heredocs, the same number of words each, and differ
only in words that carry a secret (an assignment's value, the value of an option that takes a
secret, a user:password, an authorization header, a URL's credentials), never in a program that
runs its arguments. Anything else, and the command is logged whole: the audit showing a secret
is the lesser harm than it hiding what ran.

A masked value must also stay data (attacker round 148 ran `sed -u s:x:rm:e`, masked as a
user:password, and used a masked assignment as a nameref to PATH, an option of find and a
script's text): a user:password only after curl's -u, a header's or a URL's credentials only in
the words of a network client, and an assignment only in a line whose programs are all network
clients or inert builtins (none that runs code, reads the environment or a variable by an
indirect name), whose variable no word names but such a header or URL.

The parser takes time that grows with the square of some lines' length (`a|a|...`): on the
event loop, only lines up to ON_LOOP_CHARS are parsed to be masked; a worker thread gives a
bounded parser (daemon.shell.bounded) for longer ones.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from daemon.shell.model import ParsedCommand, SimpleCommand
from daemon.shell.parse import parse_command

Parser = Callable[[str], ParsedCommand]

ON_LOOP_CHARS = 256
"""The longest line parsed to be masked without a bounded parser (a few milliseconds at most:
512 characters of `a|` took 13 ms, 32,000 took 7 s)."""

_SECRET_NAME = re.compile(
    r"[A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY)[A-Za-z0-9_]*",
    re.ASCII | re.IGNORECASE,
)
_NAMES_A_THING = re.compile(
    r"COMMAND|CMD|PROVIDER|HELPER|EXEC|PROGRAM|SCRIPT|HOOK|FILE|DIR|PATH|URL|HOST",
    re.ASCII | re.IGNORECASE,
)
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=", re.ASCII)
_LEADING_ASSIGNMENT = re.compile(
    r"(?:^|(?<=[\n;&|(]))[ \t]*(?:[A-Za-z_][A-Za-z0-9_]*=[^\s;&|()<>]*[ \t]+)*"
    r"([A-Za-z_][A-Za-z0-9_]*)=([^\s;&|()<>]*)(?=[ \t\n;&|)]|$)",
    re.ASCII,
)
"""An assignment where a command starts (after other assignments), its name and value."""
_SECRET_OPTIONS = frozenset(
    {"--token", "--password", "--passwd", "--api-key", "--apikey", "--secret", "--client-secret"}
)
_USER_OPTIONS = frozenset({"-u", "--user"})
"""curl's options taking user:password (`sort -u`, `sed -u` take no value: round 148)."""
_HTTP_CLIENTS = frozenset({"curl", "wget", "http", "https", "xh"})
"""Programs whose header words carry a secret to a server."""
_NETWORK_CLIENTS = _HTTP_CLIENTS | frozenset(
    {"git", "gh", "glab", "pip", "pip3", "twine", "docker", "podman", "helm", "kubectl", "aws",
     "gcloud", "gsutil", "az", "psql", "mysql", "mongosh", "redis-cli", "rsync", "scp", "sftp",
     "svn", "openai", "huggingface-cli"}
)  # fmt: skip
"""Programs that take a secret to send it somewhere (an option's value, a URL's credentials).
Most run other programs that inherit their environment (git's --upload-pack, pip's builds,
psql's shell escape), so only HTTP clients may be given a masked assignment (round 150)."""
_INERT = frozenset(
    {"", "export", "declare", "typeset", "readonly", "local", "unset", "cd", "true", "false",
     ":", "echo"}
)  # fmt: skip
"""Builtins a line with a masked assignment may hold besides HTTP clients: none runs code,
reads the environment or a variable it is not named (an option, `-n` or `-p`, is refused)."""
_GIVEN_ASSIGNMENTS = _HTTP_CLIENTS | _INERT
"""The programs a line with a masked assignment may run."""
_ASSIGNING = frozenset({"export", "declare", "typeset", "local", "readonly", "env"})
"""Programs whose NAME=value arguments are assignments."""
_RUNNERS = frozenset(
    {".", "source", "eval", "exec", "bash", "sh", "dash", "zsh", "ksh", "fish", "busybox",
     "python", "python3", "perl", "ruby", "node", "php", "lua", "awk", "gawk", "xargs"}
)  # fmt: skip
"""Programs that run what their words name or hold: none of their words is masked."""
_NAME = re.compile(r"(?<!\w)[A-Za-z_]\w*", re.ASCII)
"""A whole name anywhere in a line (a variable's, a word's, a part of one)."""
_REFERENCE = re.compile(r"\$(?:([A-Za-z_]\w*)|\{([A-Za-z_]\w*)\})", re.ASCII)
"""`$NAME` or `${NAME}`."""
_OPTION_CARRIER = re.compile(
    r"(?:--token|--password|--passwd|--api-key|--apikey|--secret|--client-secret)=",
    re.ASCII | re.IGNORECASE,
)
_HEADER_CARRIER = re.compile(
    r"(?:authorization|x-api-key|api-key|x-auth-token|private-token):", re.ASCII | re.IGNORECASE
)
_URL_CARRIER = re.compile(r"[a-z][a-z0-9+.-]+://", re.ASCII | re.IGNORECASE)
"""How a word that carries a secret after a fixed start begins (an option's value, a header,
a URL's credentials): the start stays when the secret is masked."""


def hide_in_command(
    command: str, hide: Callable[[str], str], masked: str, parse: Parser | None = None
) -> str:
    """`command` with `hide` applied where it only hides secrets the command carries (`masked`:
    what a hidden secret reads as); else the command whole. `parse`: a bounded parser (from a
    worker thread); without one, a line over ON_LOOP_CHARS is logged whole."""
    shown = hide(command)
    if shown == command:
        return command
    if parse is None:
        if len(command) > ON_LOOP_CHARS:
            return command
        parse = parse_command
    line = parse(command)
    in_words = _secrets_hidden(line, parse(shown), masked)
    if in_words is None or not _values_stay_data(line, shown, masked):
        return command
    # Every mask is one a check accounted for: in a word of a command, or the value of a
    # secret's assignment where a command starts (one standing alone, or before a command
    # whose wrapper the parsed model peels off); none where the model does not look.
    plain = _plain(shown)
    leading = sum(
        1
        for found in _LEADING_ASSIGNMENT.finditer(shown)
        if found.group(2) == masked
        and _secret_name(found.group(1))
        # Where a command starts, not in a quoted word or a comment (round 147 counted
        # `BASH_ENV='x;A_TOKEN=***masked***;'` as one).
        and plain[found.start(1)]
        and (found.start() == 0 or plain[found.start() - 1])
    )
    return shown if in_words + leading == shown.count(masked) else command


def _plain(text: str) -> list[bool]:
    """For each character of `text`: whether bash reads it outside quotes, escapes and
    comments (a conservative reading: what it cannot place is not plain)."""
    plain = [False] * len(text)
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                quote = ""
        elif char == "\\":
            index += 1
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t\n;&|("):
            while index < len(text) and text[index] != "\n":
                index += 1
            continue
        else:
            plain[index] = True
        index += 1
    return plain


def _secrets_hidden(before: ParsedCommand, after: ParsedCommand, masked: str) -> int | None:
    """How many secrets `after` hides of `before`, each in a word that carries one; None when
    it differs in anything else."""
    if not (before.parsed and after.parsed):
        return None
    if (before.redirects, before.defines_functions, before.runs_in_background) != (
        after.redirects,
        after.defines_functions,
        after.runs_in_background,
    ):
        return None
    if len(before.simple_commands) != len(after.simple_commands):
        return None
    hidden = 0
    for old, new in zip(before.simple_commands, after.simple_commands, strict=True):
        found = _hidden_in(old, new, masked)
        if found is None:
            return None
        hidden += found
    return hidden


_FIXED = (
    "name", "path", "wrappers", "context", "pipeline", "stage", "dynamic", "then_and",
    "after_or", "stdin_texts", "stdin_dynamic", "stdin_stream",
)  # fmt: skip
"""What a simple command must keep whatever is masked in it."""


def _hidden_in(before: SimpleCommand, after: SimpleCommand, masked: str) -> int | None:
    """How many secrets `after` hides in `before`'s words; None when it differs otherwise."""
    if any(getattr(before, field) != getattr(after, field) for field in _FIXED):
        return None
    if len(before.argv) != len(after.argv) or len(before.assignments) != len(after.assignments):
        return None
    if before.argv[:1] != after.argv[:1]:
        return None
    hidden = 0
    for word, shown in zip(before.assignments, after.assignments, strict=True):
        if word != shown and not _secret_assignment(word, shown, masked):
            return None
    runner = before.name in _RUNNERS or any(
        wrapper.split(" ", 1)[0] in _RUNNERS for wrapper in before.wrappers
    )
    for index in range(1, len(before.argv)):
        word, shown = before.argv[index], after.argv[index]
        if word == shown:
            continue
        if runner or not _secret_word(before, index, shown, masked):
            return None
        hidden += shown.count(masked)
    return hidden


def _secret_word(command: SimpleCommand, index: int, shown: str, masked: str) -> bool:
    """Whether argv[index] of `command`, shown as `shown`, has only a secret it carries hidden."""
    word, previous = command.argv[index], command.argv[index - 1].lower()
    if previous in _SECRET_OPTIONS:
        # A client's option, whose value is never an option (round 149: `rm -rf -- --token
        # keep`, `find ... --token -delete` hid what was deleted).
        return _takes_an_option(command, index - 1) and not word.startswith("-") and shown == masked
    if previous in _USER_OPTIONS and command.name == "curl":
        user = word.split(":", 1)[0]
        return ":" in word and shown == f"{user}:{masked}"
    if _ASSIGNMENT.match(word):
        return command.name in _ASSIGNING and _secret_assignment(word, shown, masked)
    start = _carrier(command, index)
    return start is not None and shown.startswith(start) and masked in shown


def _takes_an_option(command: SimpleCommand, index: int) -> bool:
    """Whether argv[index] of `command`, a network client, is read as an option: it follows the
    program or an operand, never an option that may take it as its value (round 150: in `git
    -C --token X`, `--token` is -C's folder and X git's command)."""
    return command.name in _NETWORK_CLIENTS and (
        index == 1 or not command.argv[index - 1].startswith("-")
    )


def _carrier(command: SimpleCommand, index: int) -> str | None:
    """The fixed start of argv[index] after which `command`, a network client, takes a secret
    (an option's value that is no option itself, a header or URL credentials), or None."""
    if command.name not in _NETWORK_CLIENTS:
        return None
    word = command.argv[index]
    found = _OPTION_CARRIER.match(word)
    if found is not None and (
        word[found.end() :].startswith("-") or not _takes_an_option(command, index)
    ):
        return None
    if found is None and command.name in _HTTP_CLIENTS:
        found = _HEADER_CARRIER.match(word)
    if found is None:
        found = _URL_CARRIER.match(word)
    return None if found is None else found.group(0)


def _values_stay_data(line: ParsedCommand, shown: str, masked: str) -> bool:
    """Whether every variable `shown` gives a masked value is one no program of `line` runs or
    takes as an argument: the line's programs are network clients or inert builtins (no
    option to an assigning one, no wrapper but a plain `env`, no indirection), and the variable
    is named nowhere else but in such a client's header or URL (`$NAME` there)."""
    assigned = Counter(
        found.group(1)
        for found in re.finditer(rf"(?<![\w-])([A-Za-z_]\w*)={re.escape(masked)}", shown, re.ASCII)
    )
    if not assigned:
        return True
    if "${!" in shown:
        return False
    for command in line.simple_commands:
        if command.dynamic or command.name not in _GIVEN_ASSIGNMENTS:
            return False
        if any(wrapper != "env" for wrapper in command.wrappers):
            return False
        if command.name in _ASSIGNING and any(w.startswith("-") for w in command.argv[1:]):
            return False
    # One pass over the line and one over the words, however many names (round 149: a pass
    # per name held the GIL 1.4 s over 1,300 of them).
    named = Counter(_NAME.findall(shown))
    carried: Counter[str] = Counter()
    for command in line.simple_commands:
        for index in range(1, len(command.argv)):
            word = command.argv[index]
            if _carrier(command, index) is not None and not _OPTION_CARRIER.match(word):
                carried.update(plain or braced for plain, braced in _REFERENCE.findall(word))
    return all(named[name] == count + carried[name] for name, count in assigned.items())


def _secret_assignment(word: str, shown: str, masked: str) -> bool:
    """NAME=value where the name says it holds a secret, its whole value hidden."""
    name = _ASSIGNMENT.match(word)
    return name is not None and _secret_name(name.group(1)) and shown == f"{name.group(1)}={masked}"


def _secret_name(name: str) -> bool:
    """A variable's name that says it holds a secret, and not a command, a file or a folder
    that a program runs or reads (round 147: RESTIC_PASSWORD_COMMAND names the program restic
    runs)."""
    return _SECRET_NAME.fullmatch(name) is not None and not _NAMES_A_THING.search(name)
