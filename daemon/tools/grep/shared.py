"""One ripgrep walk for several Grep calls of a parallel group.

An assistant turn often greps one tree for several names at once. Searched apart, each call walks
and reads the whole tree, which on a large tree costs far more than the matching. Calls of one
parallel group that search the same path with the same file choice (glob, type) and case rule, in
files_with_matches mode without multiline, share one walk instead:

1. ripgrep searches once for all their patterns (`-e` each) and prints every matching line
   (JSON, so that lines that are not UTF-8 come through as bytes);
2. which pattern matched which of those lines is settled on those lines alone: a plain literal by
   a substring test, any other pattern by ripgrep again, over the lines (so the regex dialect is
   ripgrep's own);
3. each call gets the files where its own pattern matched a line.

A line matches one of the patterns exactly when step 1 prints it, so each call gets the files a
search of its own would list. Where that does not hold, nothing is shared and every call searches
alone (`None`): a file cut short as binary (a search of its own, stopping at its first match,
could list a file whose NUL byte comes later), any error ripgrep reports (a bad pattern, an
unreadable file: each call gives its own message), or more output than MAX_SHARED_OUTPUT_BYTES
(patterns that match most lines are cheaper apart: a files_with_matches search stops reading a
file at its first match).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from daemon.host.child import Child
from daemon.host.landlock import Confined, started_in

MAX_SHARED_OUTPUT_BYTES = 4 * 1024 * 1024
"""Output of the shared walk beyond which the calls search apart."""

# A pattern made only of these characters matches itself, byte for byte, in ripgrep's dialect.
_PLAIN_LITERAL = re.compile(r"[A-Za-z0-9_ \-:,;=<>/@!%&'\"~`]+")


def _text_of(field: dict[str, Any]) -> bytes:
    """A JSON message's "text" or base64 "bytes" field as the bytes ripgrep read."""
    if "text" in field:
        return str(field["text"]).encode()
    return base64.b64decode(field["bytes"])


def _one_line(line: bytes) -> bytes:
    """The line with exactly one line feed at its end (a file's last line may lack it)."""
    return line if line.endswith(b"\n") else line + b"\n"


async def _json_messages(child: Child, limit: int) -> list[dict[str, Any]] | None:
    """ripgrep's JSON messages, once its output has ended; None past `limit` bytes."""
    messages: list[dict[str, Any]] = []
    pending, seen = b"", 0
    while chunk := await child.read(child.stdout):
        seen += len(chunk)
        if seen > limit:
            return None
        pending += chunk
        *complete, pending = pending.split(b"\n")
        try:
            messages.extend(json.loads(line) for line in complete if line)
        except ValueError:  # not ripgrep's JSON after all: let each call search alone
            return None
    if pending:
        return None  # every JSON message ends with a line feed: the output was cut short
    return messages


async def _run_json(
    argv: list[str], *, cwd: str, pass_fds: tuple[int, ...] = (), stdin: int | None = None
) -> list[dict[str, Any]] | None:
    """Run ripgrep in JSON mode; its messages, or None on any error or too much output."""
    child = Child(argv, cwd=cwd, pass_fds=pass_fds, stdin=stdin)
    try:
        messages = await _json_messages(child, MAX_SHARED_OUTPUT_BYTES)
        if messages is None:
            return None
        code = await child.wait()
        while await child.read(child.stderr):
            code = 2  # ripgrep said something: a warning belongs to each call's own answer
    finally:
        await child.close()
    return messages if code in (0, 1) else None


async def _matching_lines(
    rg: Confined, root_fd: int, target: str, scope: Sequence[str], patterns: Sequence[str]
) -> list[tuple[str, bytes]] | None:
    """(path as ripgrep prints it, line) for every line matching any of the patterns."""
    argv = [*rg.command, "--no-config", "--json", "--hidden", *scope]
    for pattern in patterns:
        argv += ["-e", pattern]
    argv += ["--", target]
    messages = await _run_json(started_in(argv, root_fd), cwd="/", pass_fds=(root_fd, *rg.fds))
    if messages is None:
        return None
    found: list[tuple[str, bytes]] = []
    for message in messages:
        kind, data = message.get("type"), message.get("data", {})
        if kind == "end" and data.get("binary_offset") is not None:
            return None
        if kind == "match":
            path = os.fsdecode(_text_of(data["path"]))
            line = _one_line(_text_of(data["lines"]))
            if b"\0" in line:
                return None
            found.append((path, line))
    return found


async def _lines_matching(
    rg: Confined, pattern: str, ignore_case: bool, lines: Sequence[bytes], lines_fd: int
) -> set[int] | None:
    """Indexes of the lines the pattern matches (`lines_fd`: a file holding them, one each)."""
    if not ignore_case and _PLAIN_LITERAL.fullmatch(pattern):
        needle = pattern.encode()
        return {index for index, line in enumerate(lines) if needle in line}
    argv = [*rg.command, "--no-config", "--json", *(["--ignore-case"] if ignore_case else [])]
    # A descriptor of its own: children reading one descriptor would share its offset.
    own = os.open(f"/proc/self/fd/{lines_fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        messages = await _run_json([*argv, "--", pattern, "-"], cwd="/", pass_fds=rg.fds, stdin=own)
    finally:
        os.close(own)
    if messages is None:
        return None
    return {
        int(message["data"]["line_number"]) - 1
        for message in messages
        if message.get("type") == "match"
    }


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


async def files_per_pattern(
    rg: Confined,
    root_fd: int,
    target: str,
    scope: Sequence[str],
    patterns: Sequence[str],
    ignore_case: bool,
) -> list[list[str]] | None:
    """For each pattern, the files (as ripgrep prints them) where it matches a line, from one
    walk; None when the calls must search apart (see the module docstring).

    `scope` holds the flags the calls share (case, glob, type), as a search alone has them.
    """
    found = await _matching_lines(rg, root_fd, target, scope, patterns)
    if found is None:
        return None
    unique = list(dict.fromkeys(line for _, line in found))
    lines_fd = os.memfd_create("tooljail-grep-lines", os.MFD_CLOEXEC)
    try:
        _write_all(lines_fd, b"".join(unique))
        # One after the other: the walk's turn stands for one ripgrep's memory (attacker round
        # 143: ten at once per turn, each with its own automaton, held 2.5 GB and both cores).
        matched = [await _lines_matching(rg, p, ignore_case, unique, lines_fd) for p in patterns]
    finally:
        os.close(lines_fd)
    place = {line: index for index, line in enumerate(unique)}
    per_pattern: list[list[str]] = []
    for indexes in matched:
        if indexes is None:
            return None
        files = (path for path, line in found if place[line] in indexes)
        per_pattern.append(list(dict.fromkeys(files)))
    return per_pattern
