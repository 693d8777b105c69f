"""Code bash runs although it looks like data to a parser."""

from __future__ import annotations

import re

from daemon.shell.model import ParsedCommand

#: A `[` followed, in the same word, by code bash runs when it evaluates the subscript
#: (printf -v, test -v, [[ -v ]], declare, read, unset, arithmetic on a variable holding it).
_SUBSCRIPT_CODE = re.compile(r"\[[^\]]*(\$\(|`|\$\{)")
#: The same inside a quoted string anywhere in the line (an assignment bash keeps as text until
#: an arithmetic context evaluates it).
_QUOTED_SUBSCRIPT_CODE = re.compile(r"'[^']*\[[^'\]]*(\$\(|`)[^']*'|\"[^\"]*\[[^\"\]]*(\$\(|`)")
#: Code bash runs out of text elsewhere (found by differential fuzzing): a quoted subscript of an
#: array assignment (`b['$(x)']=1`), the prompt expansion of a variable (`${v@P}`), and a prompt
#: or PROMPT_COMMAND holding a substitution (`PS4='$(x)'; set -x`).
_TEXT_RUN_AS_CODE = re.compile(
    r"[A-Za-z_][A-Za-z0-9_]*\[[^\]]*['\"][^'\"]*(\$\(|`)|\$\{[^}]*@P\}|\b(PS[0-4]|PROMPT_COMMAND)=\S*(\$\(|`)"
)


def hidden_code(line: ParsedCommand) -> list[str]:
    """Words holding code bash runs although it looks like data to a parser: a command
    substitution inside an array subscript, which bash evaluates in printf -v, test -v,
    declare, read, unset and arithmetic contexts; a variable's prompt expansion; a prompt."""
    found = [
        word
        for command in line.simple_commands
        for word in (*command.argv, *command.assignments)
        if _SUBSCRIPT_CODE.search(word)
    ]
    found += [m.group(0) for m in _QUOTED_SUBSCRIPT_CODE.finditer(line.raw)]
    found += [m.group(0) for m in _TEXT_RUN_AS_CODE.finditer(line.raw)]
    return list(dict.fromkeys(found))[:20]
