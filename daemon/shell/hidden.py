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


def hidden_code(line: ParsedCommand) -> list[str]:
    """Words holding code bash runs although it looks like data to a parser: a command
    substitution inside an array subscript, which bash evaluates in printf -v, test -v,
    declare, read, unset and arithmetic contexts."""
    found = [
        word
        for command in line.simple_commands
        for word in (*command.argv, *command.assignments)
        if _SUBSCRIPT_CODE.search(word)
    ]
    found += [m.group(0) for m in _QUOTED_SUBSCRIPT_CODE.finditer(line.raw)]
    return list(dict.fromkeys(found))[:20]
