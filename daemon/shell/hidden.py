"""Code bash runs although it looks like data to a parser.

Every scan here is linear in the line's length (split at the closing character, then one look
per piece): a regular expression such as `\\[[^\\]]*\\$\\(` starts again at each `[` and took
minutes on 10 MB of them.
"""

from __future__ import annotations

import re

from daemon.shell.model import ParsedCommand
from daemon.shell.parse import MAX_COMMAND_BYTES
from daemon.shell.words import decode_ansi_c

_SUBSTITUTIONS = ("$(", "`")
#: What a subscript runs when bash evaluates it (printf -v, test -v, [[ -v ]], declare, read,
#: unset, arithmetic on a variable holding it).
_SUBSCRIPT_CODE = (*_SUBSTITUTIONS, "${")
#: A prompt bash expands (PS4 with `set -x`), however it is set (`PS4=`, `PS4+=`, `read PS4`,
#: `printf -v PS4`) and whatever it is set from (a file the line reads).
_PROMPT = re.compile(r"\b(?:PS[0-4]|PROMPT_COMMAND)\b")
MAX_SHOWN = 20
#: bash's $'...' strings, their bodies.
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.DOTALL)


def hidden_code(line: ParsedCommand) -> list[str]:
    """Text holding code bash runs although it looks like data to a parser: a command
    substitution inside an array subscript, nested or not, which bash evaluates in printf -v,
    test -v, declare, read, unset and arithmetic contexts (in a word, in a quoted string an
    assignment keeps until arithmetic evaluates it, or after a name: `b['$(x)']=1`); a
    variable's prompt expansion (`${v@P}`); a prompt or PROMPT_COMMAND set at all; an indirect
    expansion (`${!x}`), whose name, subscript included, is only known when it runs."""
    # A longer line is never parsed (the policy does not let it run unasked): not scanned.
    raw = line.raw if len(line.raw) <= MAX_COMMAND_BYTES else ""
    found = [
        word
        for command in line.simple_commands
        for word in (*command.argv, *command.assignments)
        if _subscript_code(word, _SUBSCRIPT_CODE, named=False)
    ]
    for quote in "'\"":
        for piece in raw.split(quote)[1:]:
            found += _subscript_code(piece, _SUBSTITUTIONS, named=False)
    # Its escapes decoded, as an assignment alone keeps it (attacker round 193:
    # `x=$'a\x5b\x24(id)\x5d'; echo $((x))`, no command to list its words).
    for ansi_c in _ANSI_C.finditer(raw):
        found += _subscript_code(decode_ansi_c(ansi_c.group(1)), _SUBSCRIPT_CODE, named=False)
    found += _subscript_code(raw, _SUBSTITUTIONS, named=True)
    found += [
        f"{piece[piece.rfind('${') :]}}}" for piece in raw.split("}") if _prompt_expansion(piece)
    ]
    prompt = _PROMPT.search(raw)
    if prompt is not None:
        found.append(raw[prompt.start() : prompt.start() + 80])
    # An indirect expansion evaluates the subscript of a name only known when it runs
    # (attacker round 150: `x=$(printf 'a\x5b\x24\x28rm ...'); echo ${!x}`).
    indirect = raw.find("${!")
    if indirect >= 0:
        found.append(raw[indirect : indirect + 80])
    return list(dict.fromkeys(found))[:MAX_SHOWN]


def _subscript_code(text: str, code: tuple[str, ...], named: bool) -> list[str]:
    """The first subscript (`[`, nested ones matched as bash matches them) holding one of
    `code`, as a list of at most one. `named`: only a `[` right after a name's character opens
    one (`a[`, not the test `[ -n "$(x)" ]`); inside one, every `[` nests. One pass: linear."""
    depth = 0
    opened = 0
    for at, char in enumerate(text):
        if char == "[" and (
            depth or not named or (at and (text[at - 1].isalnum() or text[at - 1] == "_"))
        ):
            opened = at if depth == 0 else opened
            depth += 1
        elif char == "]" and depth:
            depth -= 1
        elif depth and char in "$`" and any(text.startswith(c, at) for c in code):
            return [text[opened : opened + 80]]
    return []


def _prompt_expansion(piece: str) -> bool:
    """`${v@P}`, cut before its `}`."""
    return piece.endswith("@P") and "${" in piece
