"""Code bash runs although it looks like data to a parser.

Every scan here is linear in the line's length (split at the closing character, then one look
per piece): a regular expression such as `\\[[^\\]]*\\$\\(` starts again at each `[` and took
minutes on 10 MB of them.
"""

from __future__ import annotations

import re

from daemon.shell.model import ParsedCommand
from daemon.shell.parse import MAX_COMMAND_BYTES

_SUBSTITUTIONS = ("$(", "`")
#: What a subscript runs when bash evaluates it (printf -v, test -v, [[ -v ]], declare, read,
#: unset, arithmetic on a variable holding it).
_SUBSCRIPT_CODE = (*_SUBSTITUTIONS, "${")
_WORD_THEN_BRACKET = re.compile(r"\w\[")
_PROMPT = re.compile(r"\b(?:PS[0-4]|PROMPT_COMMAND)=")
MAX_SHOWN = 20


def hidden_code(line: ParsedCommand) -> list[str]:
    """Text holding code bash runs although it looks like data to a parser: a command
    substitution inside an array subscript, which bash evaluates in printf -v, test -v, declare,
    read, unset and arithmetic contexts (in a word, or in a quoted string an assignment keeps
    until arithmetic evaluates it); a quoted subscript of an array assignment (`b['$(x)']=1`);
    a variable's prompt expansion (`${v@P}`); a prompt or PROMPT_COMMAND holding a substitution
    (`PS4='$(x)'; set -x`)."""
    # A longer line is never parsed (the policy does not let it run unasked): not scanned.
    raw = line.raw if len(line.raw) <= MAX_COMMAND_BYTES else ""
    found = [
        word
        for command in line.simple_commands
        for word in (*command.argv, *command.assignments)
        if _subscripts_with(word, _SUBSCRIPT_CODE)
    ]
    for quote in "'\"":
        for piece in raw.split(quote)[1:]:
            found += [f"{quote}{s}" for s in _subscripts_with(piece, _SUBSTITUTIONS)]
    found += _quoted_subscripts(raw)
    found += [
        f"{piece[piece.rfind('${') :]}}}" for piece in raw.split("}") if _prompt_expansion(piece)
    ]
    prompt = _PROMPT.search(raw)
    if prompt is not None and any(s in raw[prompt.end() :] for s in _SUBSTITUTIONS):
        found.append(raw[prompt.start() : prompt.start() + 80])
    return list(dict.fromkeys(found))[:MAX_SHOWN]


def _subscripts_with(text: str, code: tuple[str, ...]) -> list[str]:
    """Each `[` up to the next `]` (or the end) holding one of `code`."""
    subscripts = []
    for piece in text.split("]"):
        start = piece.find("[")
        if start >= 0 and any(c in piece[start:] for c in code):
            subscripts.append(piece[start:] + "]")
    return subscripts


def _quoted_subscripts(raw: str) -> list[str]:
    """`b['$(x)']`: a name's subscript holding a quote and then a substitution."""
    found = []
    for piece in raw.split("]"):
        opened = _WORD_THEN_BRACKET.search(piece)
        if opened is None:
            continue
        inside = piece[opened.end() :]
        quoted = min((i for i in (inside.find("'"), inside.find('"')) if i >= 0), default=-1)
        if quoted >= 0 and any(s in inside[quoted:] for s in _SUBSTITUTIONS):
            found.append(piece[opened.start() :] + "]")
    return found


def _prompt_expansion(piece: str) -> bool:
    """`${v@P}`, cut before its `}`."""
    return piece.endswith("@P") and "${" in piece
