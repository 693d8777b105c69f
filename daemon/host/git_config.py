"""The entries of a git configuration file, as git reads them: sections (`[core]`, `[remote
"origin"]`, the older `[branch.main]`), `name = value` lines or a bare `name` (true), comments
after `#` or `;` outside quotes, double quotes, the escapes `\\n \\t \\b \\" \\\\`, and a backslash
at the end of a line continuing the value on the next.

Keys come back as git names them: the section and the variable's name in lower case, a
subsection as written (`includeif.gitdir:~/work/.path`). A line git would refuse is an error
here too, never skipped: what the daemon holds read-only is decided from these entries.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_SECTION = re.compile(r"[A-Za-z0-9.-]+")
_SPECIAL = re.compile(r'["\\#;]')
_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}


class UnreadableConfig(ValueError):
    """The text is not a configuration git would read."""


def config_entries(text: str) -> list[tuple[str, str]]:
    """Every (key, value) of the file, in order (git lets the last one win, and adds up the
    ones that are lists, such as `include.path`).

    Raises:
        UnreadableConfig: A line git would refuse (its number says which).
    """
    entries: list[tuple[str, str]] = []
    section = ""
    lines = text.split("\n")
    number = 0
    while number < len(lines):
        line = lines[number].lstrip()
        number += 1
        if line.startswith("["):
            try:
                section, line = _header(line)
            except UnreadableConfig as exc:
                raise UnreadableConfig(f"line {number}: {exc}") from exc
            line = line.lstrip()
        if not line or line[0] in "#;":
            continue
        name = _NAME.match(line)
        if name is None:
            raise UnreadableConfig(f"line {number}: neither a section nor a variable")
        key = f"{section}.{name.group().lower()}" if section else name.group().lower()
        rest = line[name.end() :].lstrip()
        if not rest or rest[0] in "#;":
            entries.append((key, "true"))
            continue
        if rest[0] != "=":
            raise UnreadableConfig(f"line {number}: a variable's name is followed by '='")
        try:
            value, used = _value(rest[1:], lines[number:])
        except UnreadableConfig as exc:
            raise UnreadableConfig(f"line {number}: {exc}") from exc
        number += used
        entries.append((key, value))
    return entries


def _header(line: str) -> tuple[str, str]:
    """The section a `[...]` line opens (as a key's prefix) and what follows it on the line."""
    name = _SECTION.match(line, 1)
    if name is None:
        raise UnreadableConfig("a section header without a name")
    section = name.group().lower()
    at = name.end()
    if line.startswith("]", at):
        return section, line[at + 1 :]
    if not line.startswith(' "', at) or "." in section:
        raise UnreadableConfig("a section header git cannot read")
    subsection = []
    at += 2
    while at < len(line) and line[at] != '"':
        if line[at] == "\\" and at + 1 < len(line):
            at += 1
        subsection.append(line[at])
        at += 1
    if not line.startswith('"]', at):
        raise UnreadableConfig("a subsection that does not end")
    return f"{section}.{''.join(subsection)}", line[at + 2 :]


def _value(text: str, following: list[str]) -> tuple[str, int]:
    """A value from `text` (after its '='), continued over `following` lines when a line ends
    with a backslash; and how many of those it took."""
    if not _SPECIAL.search(text):  # most values: no quote, escape or comment
        return text.strip(" \t\r"), 0
    out: list[str] = []
    pending_space = ""
    quoted = False
    used = 0
    at = 0
    text = text.lstrip(" \t")
    while True:
        if at >= len(text):
            if quoted:
                raise UnreadableConfig("a quote that does not end")
            return "".join(out), used
        char = text[at]
        at += 1
        if char == "\\":
            if at >= len(text):  # the value goes on on the next line
                if used >= len(following):
                    raise UnreadableConfig("a continued value at the end of the file")
                text = following[used]
                used += 1
                at = 0
                continue
            escaped = _ESCAPES.get(text[at])
            if escaped is None:
                raise UnreadableConfig(f"an unknown escape \\{text[at]}")
            out.append(pending_space + escaped)
            pending_space = ""
            at += 1
        elif char == '"':
            quoted = not quoted
            out.append(pending_space)
            pending_space = ""
        elif not quoted and char in "#;":
            return "".join(out), used
        elif not quoted and char in " \t\r":
            pending_space += char  # kept only when more of the value follows
        else:
            out.append(pending_space + char)
            pending_space = ""
