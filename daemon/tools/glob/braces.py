"""Brace expansion for Glob patterns: `{a,b}` alternatives, nested allowed, bounded and iterative.

Rules: a `{` and the `}` that closes it (braces nest, counted as written) form a group; a group
with a comma at its own level is an alternative list, one without stays literal (its inside can
still hold alternatives: `{x{a,b}}` gives `{xa}`, `{xb}`); a `{` never closed, a stray `}` and
commas outside a group are literal. Alternatives come out in order, leftmost group first.

The pattern is read once, left to right, with an explicit stack instead of recursion, so a
hostile nesting thousands deep costs a list, not the interpreter's stack. Braces and commas are
kept as literal text until a `}` closes a group with commas: only then is the group replaced by
its choices. The number of alternatives only grows as the pattern is read (a group adds its
alternatives' counts, a sequence multiplies them), so expansion gives up as soon as any part
exceeds the limit, before more is built.
"""

from __future__ import annotations

import itertools

from daemon.errors import ToolInputError
from daemon.tools.summaries import quoted

MAX_PATTERNS = 64
"""Brace expansion may not produce more alternatives than this."""

_Token = str | list[str]
"""Literal text, or the choices a group of alternatives expanded to."""


class TooManyAlternatives(ToolInputError):
    """The pattern expands to more than MAX_PATTERNS alternatives."""


class _Overflow(Exception):
    """A part of the pattern already has more alternatives than the limit."""


def expand_braces(pattern: str, limit: int = MAX_PATTERNS) -> list[str]:
    """Every alternative `pattern` spells, in order; TooManyAlternatives past `limit`."""
    if "{" not in pattern:
        return [pattern]
    try:
        return _expand(pattern, limit)
    except _Overflow:
        raise TooManyAlternatives(
            f"pattern {quoted(pattern, 80)} expands to more than {limit} alternatives; split "
            "it into several Glob calls."
        ) from None


def _expand(pattern: str, limit: int) -> list[str]:
    tokens: list[_Token] = []
    open_groups: list[tuple[int, list[int]]] = []
    """For each `{` not closed yet: its token's index, and those of the commas at its level."""
    start = 0
    for index, char in enumerate(pattern):
        if char not in "{,}":
            continue
        if start < index:
            tokens.append(pattern[start:index])
        start = index + 1
        tokens.append(char)  # literal, unless it turns out to delimit alternatives
        if char == "{":
            open_groups.append((len(tokens) - 1, []))
        elif not open_groups:
            continue
        elif char == ",":
            open_groups[-1][1].append(len(tokens) - 1)
        else:
            opened, commas = open_groups.pop()
            if commas:  # a group of alternatives: it becomes its choices
                choices: list[str] = []
                for first, end in itertools.pairwise([opened, *commas, len(tokens) - 1]):
                    choices.extend(_sequence(tokens[first + 1 : end], limit))
                    if len(choices) > limit:
                        raise _Overflow
                del tokens[opened:]
                tokens.append(choices)
    if start < len(pattern):
        tokens.append(pattern[start:])
    return _sequence(tokens, limit)


def _sequence(tokens: list[_Token], limit: int) -> list[str]:
    """The texts a sequence of tokens spells: every combination of its choices, in order."""
    count = 1
    for token in tokens:
        if isinstance(token, list):
            count *= len(token)
            if count > limit:
                raise _Overflow
    options = [[token] if isinstance(token, str) else token for token in tokens]
    return ["".join(combination) for combination in itertools.product(*options)]
