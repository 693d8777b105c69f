"""The parsed form of a Bash command line, as the policy sees it (`input.command`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SimpleCommand:
    """One simple command found anywhere in the line, with its wrappers peeled off."""

    argv: tuple[str, ...]
    """The real command's words after quote removal; expansions are kept as written."""
    name: str
    """Basename of the executable (`rm` for `/bin/rm`)."""
    path: str
    """The executable as written (after quote removal)."""
    wrappers: tuple[str, ...]
    """What was peeled off, outermost first: `sudo`, `env`, ..., `bash -c`, `find -exec`."""
    assignments: tuple[str, ...]
    """NAME=value words before the command or given to sudo/env."""
    context: str
    """Innermost construct around it: simple, list, pipeline, subshell, group, if, ..."""
    pipeline: int = 0
    """Number of the pipeline it is a stage of (1, 2, ... in order of appearance); 0: none."""
    stage: int = 0
    """Its position in that pipeline, from 0 (the stage whose output the next one reads)."""
    dynamic: bool = False
    """The executable word holds an expansion or pattern, so the real program is only known at
    run time (`$CMD x`, `$(which rm)`, `/bin/r?`)."""
    top_level: bool = True
    """It runs at the line's top level, not inside a subshell, group, pipeline stage,
    substitution, loop, condition or function body (where a `cd` stays local)."""
    then_and: bool = False
    """It is followed by `&&`: the next command runs only if this one succeeded."""
    after_or: bool = False
    """It follows `||`: it runs only if what precedes it failed."""
    dynamic_words: tuple[bool, ...] = ()
    """For each word of argv: whether its value is only known at run time (an expansion, a
    glob, a brace pattern)."""
    stdin_texts: tuple[str, ...] = ()
    """The heredoc bodies and here-strings it is fed, as written: an interpreter with no
    program named reads its program there (`python3 <<EOF`)."""
    stdin_dynamic: bool = False
    """One of them is only known when it runs (`python3 <<< "$C"`, a heredoc that expands)."""
    stdin_stream: bool = False
    """Its input is a stream another command writes, as a later pipeline stage's is: a process
    substitution (`bash < <(echo ...)`), or a descriptor it was given (`<&3`, `< /dev/fd/3`)."""

    def to_policy(self) -> dict[str, Any]:
        """The JSON object of input.command.simple_commands[i]."""
        return {
            "argv": list(self.argv),
            "name": self.name,
            "path": self.path,
            "wrappers": list(self.wrappers),
            "assignments": list(self.assignments),
            "context": self.context,
            "pipeline": self.pipeline,
            "stage": self.stage,
            "dynamic": self.dynamic,
            **({"stdin_texts": list(self.stdin_texts)} if self.stdin_texts else {}),
            **({"stdin_dynamic": True} if self.stdin_dynamic else {}),
            **({"stdin_stream": True} if self.stdin_stream else {}),
        }


@dataclass(frozen=True)
class Redirect:
    """One redirection: operator with its file descriptor (`2>`) and the target as written."""

    op: str
    target: str
    writes: bool
    """The target is a path the command writes (output redirections, not fd duplications)."""

    def to_policy(self) -> dict[str, Any]:
        return {"op": self.op, "target": self.target}


@dataclass(frozen=True)
class ParsedCommand:
    """The parsed form of a Bash tool's `command`."""

    raw: str
    parsed: bool
    """False when any part could not be parsed or analysed; the other fields are best effort."""
    parse_error: str
    """What could not be parsed, where, and what to do about it ("" when parsed)."""
    simple_commands: tuple[SimpleCommand, ...]
    redirects: tuple[Redirect, ...]
    defines_functions: bool = False
    """It defines a shell function, which may take the name of any command it runs (`cd`)."""
    runs_in_background: bool = False
    """It puts a job in the background (`&`), in the line or in a string it runs."""

    @property
    def written_paths(self) -> tuple[str, ...]:
        """Targets of output redirections, in order, without repeats."""
        return tuple(dict.fromkeys(r.target for r in self.redirects if r.writes))

    def to_policy(self) -> dict[str, Any]:
        """The JSON object of input.command."""
        return {
            "raw": self.raw,
            "parsed": self.parsed,
            "parse_error": self.parse_error,
            "simple_commands": [c.to_policy() for c in self.simple_commands],
            "redirects": [r.to_policy() for r in self.redirects],
            "written_paths": list(self.written_paths),
        }
