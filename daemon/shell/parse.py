"""A Bash command line as the policy sees it: every simple command, unwrapped, and every redirect.

This is `input.command` of the policy input (version 1; see policies/README.md). Parsing only:
nothing is executed or looked up. tree-sitter-bash gives an error-tolerant syntax tree, so a line
it cannot parse is still mined for commands, but marked `parsed: false` for the policy to ask or
deny. Command strings of `bash -c`, `eval` and heredocs fed to a shell are parsed again, to a
bounded depth; time, size, nesting and output are bounded too, so no input crashes or hangs this.
"""

from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass, field
from typing import Any

import tree_sitter
import tree_sitter_bash

from daemon.shell.wrappers import (
    Word,
    basename,
    deferred_scripts,
    find_exec_commands,
    unwrap,
)

MAX_COMMAND_BYTES = 100_000
"""Longer lines are refused as unparsed (a command that long belongs in a script file)."""
MAX_SCRIPT_DEPTH = 3
"""How many levels of `bash -c '...'` (or eval, heredoc-fed shells) inside each other are parsed."""
MAX_TREE_DEPTH = 256
"""Syntax nested deeper than this is not descended into (and marks the line unparsed)."""
MAX_SIMPLE_COMMANDS = 5_000
MAX_REDIRECTS = 5_000
TIME_BUDGET_S = 2.0
"""Wall-clock budget for parsing one line with everything nested in it."""

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_READ_CHUNK = 4_096
# tree-sitter-bash 0.25.1 can crash the process on some non-ASCII input (`{` then U+E0001, found
# by fuzzing). Bash's syntax is ASCII and every other byte is a word character to it, so the
# parser gets 'x' for each non-ASCII byte: same byte offsets, same structure, no crash. Texts are
# still cut from the real bytes.
_ASCII_ONLY = bytes(range(128)) + b"x" * 128

# Node types whose text is literal: nothing inside runs, so the scans below skip them.
_LITERAL_NODES = frozenset({"comment", "raw_string", "ansi_c_string"})
_EXPANSIONS = frozenset(
    {"simple_expansion", "expansion", "command_substitution", "process_substitution"}
    | {"arithmetic_expansion", "brace_expression"}
)
_CONTEXTS = {
    "list": "list",
    "subshell": "subshell",
    "compound_statement": "group",
    "command_substitution": "command_substitution",
    "process_substitution": "process_substitution",
    "if_statement": "if",
    "elif_clause": "if",
    "else_clause": "if",
    "while_statement": "while",
    "for_statement": "for",
    "c_style_for_statement": "for",
    "select_statement": "for",
    "case_statement": "case",
    "function_definition": "function",
}
_OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_UNESCAPED_SUBSTITUTION = re.compile(rb"`|\$\((?!\()")
_BRACE_PATTERN = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")
_ANSI_C_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


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


def parse_command(raw: str) -> ParsedCommand:
    """Parse a Bash command line. Never raises and never runs anything."""
    errors: list[str] = []
    try:
        data = raw.encode("utf-8")
    except UnicodeEncodeError as exc:
        data = raw.encode("utf-8", "replace")
        errors.append(
            f"The command contains text that is not valid Unicode (at character {exc.start}); "
            "remove it."
        )
    if len(data) > MAX_COMMAND_BYTES:
        errors.append(
            f"The command is {len(data)} bytes; commands over {MAX_COMMAND_BYTES} bytes are not "
            "analysed. Write the commands to a script file and run that, or split them."
        )
        return ParsedCommand(raw, False, " ".join(errors), (), ())
    if b"\x00" in data:
        errors.append(
            f"The command contains a NUL byte (at byte {data.index(0)}), which bash cannot "
            "take; remove it."
        )
    analyser = _Analyser(errors)
    analyser.line(data, (), 0, _Ctx("simple"), "")
    return ParsedCommand(
        raw,
        not errors,
        " ".join(errors),
        tuple(analyser.commands),
        tuple(analyser.redirects),
    )


# --- words ----------------------------------------------------------------------------------


def _text(node: tree_sitter.Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def _decode_ansi_c(body: str) -> str:
    """The value of $'...' (body without the quotes)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        i += 2
        if nxt in _ANSI_C_SIMPLE:
            out.append(_ANSI_C_SIMPLE[nxt])
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{0,2}", body[i:])
            code = nxt + (digits.group() if digits else "")
            i += len(code) - 1
            out.append(chr(int(code, 8) & 0xFF))
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = re.match(rf"[0-9a-fA-F]{{1,{width}}}", body[i:])
            if digits is None:
                out.append("\\" + nxt)
                continue
            i += len(digits.group())
            out.append(chr(min(int(digits.group(), 16), 0x10FFFF)))
        elif nxt == "c" and i < len(body):
            out.append(chr(ord(body[i]) & 0x1F))
            i += 1
        else:
            out.append("\\" + nxt)
    return "".join(out)


def _dq_unescape(text: str) -> str:
    """Inside double quotes a backslash only escapes $ ` " \\ and newline."""
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _scan_unquoted(text: str) -> Word:
    """Quote and escape removal for text outside any quotes (tolerates quotes inside it)."""
    out: list[str] = []
    bare: list[str] = []  # unquoted, unescaped characters: where globs and braces count
    dynamic = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if text[i + 1 : i + 2] != "\n":
                out.append(text[i + 1 : i + 2] or "\\")
            bare.append(" ")
            i += 2
        elif ch == "'" or text.startswith("$'", i):
            start = i + 2 if ch == "$" else i + 1
            end = text.find("'", start) if ch == "'" else _ansi_c_end(text, start)
            end = len(text) if end < 0 else end
            body = text[start:end]
            out.append(_decode_ansi_c(body) if ch == "$" else body)
            bare.append(" ")
            i = end + 1
        elif ch == '"':
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            body = text[i + 1 : end]
            dynamic = dynamic or "$" in body or "`" in body
            out.append(_dq_unescape(body))
            bare.append(" ")
            i = end + 1
        else:
            dynamic = dynamic or ch in "*?[`" or (ch == "$" and i + 1 < len(text))
            out.append(ch)
            bare.append(ch)
            i += 1
    dynamic = dynamic or bool(_BRACE_PATTERN.search("".join(bare)))
    return Word("".join(out), dynamic)


def _ansi_c_end(text: str, start: int) -> int:
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == "'":
            return i
        else:
            i += 1
    return -1


def _render_string(node: tree_sitter.Node, data: bytes) -> Word:
    """A "..." string: escapes removed, expansions inside kept as written."""
    raw = _text(node, data)
    end = node.end_byte - 1 if len(raw) >= 2 and raw.endswith('"') else node.end_byte
    parts: list[str] = []
    dynamic = False
    pos = node.start_byte + 1
    for child in node.named_children:
        if child.type not in _EXPANSIONS:
            continue
        parts.append(_dq_unescape(data[pos : child.start_byte].decode("utf-8", "replace")))
        parts.append(_text(child, data))
        dynamic = True
        pos = child.end_byte
    parts.append(_dq_unescape(data[pos:end].decode("utf-8", "replace")))
    return Word("".join(parts), dynamic)


def _render(node: tree_sitter.Node, data: bytes, depth: int = 0) -> Word:
    """One word (or word-like node) after quote removal."""
    kind = node.type
    if kind in _EXPANSIONS:
        return Word(_text(node, data), True)
    if kind == "string":
        return _render_string(node, data)
    if kind == "translated_string":
        inner = next((c for c in node.named_children if c.type == "string"), None)
        return _render_string(inner, data) if inner else _scan_unquoted(_text(node, data))
    if kind in ("raw_string", "ansi_c_string") or node.child_count == 0 or depth > 8:
        return _scan_unquoted(_text(node, data))
    parts: list[str] = []
    dynamic = False
    pos = node.start_byte
    for child in node.children:
        gap = data[pos : child.start_byte].decode("utf-8", "replace")
        word = (
            _render(child, data, depth + 1)
            if child.is_named
            else _scan_unquoted(_text(child, data))
        )
        gap_word = _scan_unquoted(gap)
        parts += [gap_word.text, word.text]
        dynamic = dynamic or gap_word.dynamic or word.dynamic
        pos = max(pos, child.end_byte)
    tail = _scan_unquoted(data[pos : node.end_byte].decode("utf-8", "replace"))
    return Word("".join([*parts, tail.text]), dynamic or tail.dynamic)


# --- syntax tree ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Ctx:
    context: str
    pipeline: int = 0
    stage: int = 0


@dataclass
class _Line:
    """What the walk of one parsed line (the top line or a nested command string) collects."""

    data: bytes
    where: str
    extras: dict[int, list[tree_sitter.Node]] = field(default_factory=dict)
    """Words tree-sitter put after a redirection target; bash gives them to the command."""
    stdin: dict[int, list[str]] = field(default_factory=dict)
    """Heredoc bodies and here-strings a command reads, by command node id."""
    pipeline_start: dict[int, tuple[int, int]] = field(default_factory=dict)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    """Byte spans already analysed (substitutions) or literal (quotes, comments)."""
    complete: bool = True


def _heredoc_is_quoted(heredoc: tree_sitter.Node, data: bytes) -> bool:
    start = next((c for c in heredoc.children if c.type == "heredoc_start"), None)
    return start is not None and any(q in _text(start, data) for q in "'\"\\")


def _literal_spans(root: tree_sitter.Node, data: bytes) -> list[tuple[int, int]]:
    """Spans where bash takes text literally: comments, '...', $'...', quoted heredoc bodies."""
    spans: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in _LITERAL_NODES:
            spans.append((node.start_byte, node.end_byte))
            continue
        if node.type == "heredoc_redirect" and _heredoc_is_quoted(node, data):
            spans += [(c.start_byte, c.end_byte) for c in node.children if c.type == "heredoc_body"]
        stack.extend(node.children)
    return _merge(spans)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint spans covering the same bytes as the given (possibly nested) ones."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _inside(merged: list[tuple[int, int]], pos: int) -> bool:
    """Whether pos lies in one of the spans returned by _merge."""
    i = bisect.bisect_right(merged, pos, key=lambda span: span[0]) - 1
    return i >= 0 and merged[i][0] <= pos < merged[i][1]


def _escaped(data: bytes, pos: int) -> bool:
    run = 0
    while pos - run - 1 >= 0 and data[pos - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def _join_continuations(data: bytes, root: tree_sitter.Node) -> bytes:
    """Remove backslash-newline outside literal text, as bash does before splitting words.

    tree-sitter-bash splits `r\\<newline>m` into two words where bash reads `rm`.
    """
    literal = _literal_spans(root, data)
    out = bytearray()
    pos = 0
    found = data.find(b"\\\n")
    while found >= 0:
        if not _escaped(data, found) and not _inside(literal, found):
            out += data[pos:found]
            pos = found + 2
        found = data.find(b"\\\n", found + 2)
    return bytes(out + data[pos:])


_COMPOUND_STARTS = frozenset({"{", "(", "((", "[[", "!", "if", "while", "until", "for", "case"})
_COMPOUND_STARTS |= {"select", "function"}
# Reserved words bash never runs as a command; tree-sitter only makes one a command name when
# it misread the structure around it.
_RESERVED = frozenset({"{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while"})
_RESERVED |= {"until", "for", "case", "esac", "select", "function", "[[", "]]"}


def _blank_keyword_prefixes(root: tree_sitter.Node, data: bytes) -> bytes:
    """Blank out `time`, `coproc`, `!` before a compound command: tree-sitter-bash misreads them.

    It takes `time { rm x; }` for a command `time` with arguments `{ rm x` and a command `}`.
    Without the keyword the structure is the one bash runs; only the timing is lost.
    """
    spans: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type == "negated_command" and node.named_children:
            # `! { rm x; }` is misread the same way; the negation does not matter here.
            first = node.named_children[0]
            head = first.child_by_field_name("name") if first.type == "command" else None
            if head is not None and _text(head, data) in _COMPOUND_STARTS:
                spans.append((node.start_byte, first.start_byte))
            continue
        name = node.child_by_field_name("name") if node.type == "command" else None
        if name is None or _text(name, data) not in ("time", "coproc"):
            continue
        args = node.children_by_field_name("argument")
        k = 0
        while k < len(args) and _text(args[k], data) in ("-p", "--"):
            k += 1
        if k < len(args) and _text(args[k], data) in _COMPOUND_STARTS:
            spans.append((name.start_byte, args[k].start_byte))
    out = bytearray(data)
    for start, end in spans:
        out[start:end] = bytes(b if b == 0x0A else 0x20 for b in data[start:end])
    return bytes(out)


def _first_error(root: tree_sitter.Node) -> tree_sitter.Node:
    """The first (innermost) node that tree-sitter marks as an error or as missing."""
    node = root
    for _ in range(MAX_TREE_DEPTH * 4):
        if node.is_missing:
            return node
        flagged = (c for c in node.children if c.is_error or c.is_missing or c.has_error)
        nxt = next(flagged, None)
        if nxt is None:
            return node
        node = nxt
    return node


def _where(node: tree_sitter.Node) -> str:
    row, column = node.start_point
    return f"line {row + 1}, column {column + 1}"


def _last_command(node: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """The simple command a trailing redirection belongs to (bash binds it to the last one)."""
    for _ in range(MAX_TREE_DEPTH):
        if node is None or node.type == "command":
            return node
        if node.type == "redirected_statement":
            node = node.child_by_field_name("body")
        elif node.type in ("pipeline", "list", "negated_command"):
            named = [c for c in node.named_children if c.type != "comment"]
            node = named[-1] if named else None
        else:
            return None
    return None


class _Analyser:
    """Walks syntax trees and collects simple commands and redirects."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.commands: list[SimpleCommand] = []
        self.redirects: list[Redirect] = []
        self.deadline = time.monotonic() + TIME_BUDGET_S
        self.pipelines = 0
        self.truncated = False
        """Set once the command limit is reached: the walks stop there."""

    def error(self, message: str) -> None:
        if message not in self.errors and len(self.errors) < 8:
            self.errors.append(message)

    def line(
        self, data: bytes, wrappers: tuple[str, ...], depth: int, ctx: _Ctx, where: str
    ) -> None:
        """Parse one line (or nested command string) and walk it."""
        tree = self._parse(data, where)
        if tree is not None and b"\\\n" in data:
            joined = _join_continuations(data, tree.root_node)
            if joined != data:
                data = joined
                tree = self._parse(data, where)
        for _ in range(3):  # each round can reveal a `time {` nested in the one blanked before
            if tree is None:
                return
            blanked = _blank_keyword_prefixes(tree.root_node, data)
            if blanked == data:
                break
            data = blanked
            tree = self._parse(data, where)
        if tree is None:
            return
        root = tree.root_node
        if root.has_error:
            bad = _first_error(root)
            if bad.is_missing:
                self.error(
                    f"{where}At {_where(bad)}: bash syntax incomplete, missing {bad.type!r}; "
                    "check the quotes and brackets."
                )
            else:
                self.error(
                    f"{where}At {_where(bad)}: bash syntax that could not be parsed near "
                    f"{_text(bad, data)[:30]!r}; check the quotes and brackets, or split the "
                    "command."
                )
        line = _Line(data, where)
        self._walk(root, line, wrappers, depth, ctx)
        if line.complete:
            self._check_substitutions(line)

    def _parse(self, data: bytes, where: str) -> tree_sitter.Tree | None:
        # A fresh parser per call: a tree_sitter.Parser must not be shared between threads.
        parser = tree_sitter.Parser(_LANGUAGE)
        ascii_data = data.translate(_ASCII_ONLY)
        try:
            return parser.parse(
                lambda offset, _point: ascii_data[offset : offset + _READ_CHUNK],
                progress_callback=lambda _offset, _has_error: time.monotonic() > self.deadline,
            )
        except ValueError:
            self.error(
                f"{where}Parsing took longer than {TIME_BUDGET_S} s and was stopped; "
                "simplify the command or split it."
            )
            return None

    def _walk(
        self,
        root: tree_sitter.Node,
        line: _Line,
        wrappers: tuple[str, ...],
        depth: int,
        ctx: _Ctx,
    ) -> None:
        stack: list[tuple[tree_sitter.Node, _Ctx, int, str]] = [(root, ctx, 0, "")]
        steps = 0
        while stack:
            node, ctx, level, parent = stack.pop()
            steps += 1
            if self.truncated:
                line.complete = False
                return
            if steps % 512 == 0 and time.monotonic() > self.deadline:
                self.error(
                    f"{line.where}Analysing the command took longer than "
                    f"{TIME_BUDGET_S} s and was stopped; simplify it or split it."
                )
                line.complete = False
                return
            if level > MAX_TREE_DEPTH:
                self.error(
                    f"{line.where}Shell syntax nested more than {MAX_TREE_DEPTH} levels "
                    "deep is not analysed; flatten it."
                )
                line.complete = False
                continue
            kind = node.type
            if kind in _LITERAL_NODES:
                line.skipped.append((node.start_byte, node.end_byte))
                continue
            children = [c for c in node.children if c.is_named]
            child_ctx = ctx
            if kind == "program":
                statements = [c for c in children if c.type not in ("comment", "ERROR")]
                child_ctx = _Ctx("list", ctx.pipeline, ctx.stage) if len(statements) > 1 else ctx
            elif kind == "pipeline":
                number, first = line.pipeline_start.pop(node.id, (0, 0))
                number = number or self._new_pipeline()
                stages = [c for c in children if c.type != "comment"]
                for stage, child in reversed(list(enumerate(stages, start=first))):
                    stack.append((child, _Ctx("pipeline", number, stage), level + 1, kind))
                continue
            elif kind in ("command_substitution", "process_substitution"):
                line.skipped.append((node.start_byte, node.end_byte))
                child_ctx = _Ctx(_CONTEXTS[kind])
                text = _text(node, line.data)
                if text.startswith("`") and "\\" in text:
                    # Inside `...` bash first removes the backslashes before $ ` \ and parses
                    # the rest, so `echo \`rm x\`` runs rm; tree-sitter does not.
                    inner = text[1:-1] if len(text) > 1 and text.endswith("`") else text[1:]
                    inner = re.sub(r"\\([$`\\])", r"\1", inner)
                    self._nested("", inner, wrappers, depth, child_ctx)
                    continue
            elif kind == "compound_statement" and parent == "function_definition":
                child_ctx = _Ctx("function", ctx.pipeline, ctx.stage)
            elif kind in _CONTEXTS:
                child_ctx = _Ctx(_CONTEXTS[kind], ctx.pipeline, ctx.stage)
            elif kind == "redirected_statement":
                body_ctx = self._prepare_redirected(node, line)
                body = node.child_by_field_name("body")
                for child in reversed(children):
                    use = body_ctx if body_ctx and body and child.id == body.id else ctx
                    stack.append((child, use, level + 1, kind))
                continue
            elif kind == "heredoc_redirect":
                if _heredoc_is_quoted(node, line.data):
                    line.skipped += [
                        (c.start_byte, c.end_byte) for c in children if c.type == "heredoc_body"
                    ]
                child_ctx = _Ctx("list", ctx.pipeline, ctx.stage)
            elif kind == "command":
                self._command(node, line, wrappers, depth, ctx)
            elif kind in ("declaration_command", "unset_command"):
                words = [_scan_unquoted(_text(node.children[0], line.data))]
                words += [_render(c, line.data) for c in children]
                self._emit(words, (), ctx, wrappers, depth, [])
            elif kind == "file_redirect":
                self._redirect(node, line.data, line.where)
            stack.extend((c, child_ctx, level + 1, kind) for c in reversed(children))

    def _new_pipeline(self) -> int:
        self.pipelines += 1
        return self.pipelines

    def _prepare_redirected(self, node: tree_sitter.Node, line: _Line) -> _Ctx | None:
        """Attach what tree-sitter hangs on a redirected statement to the command it belongs to.

        Returns the context of the body when a heredoc continues it into a pipeline.
        """
        target = _last_command(node.child_by_field_name("body"))
        extras: list[tree_sitter.Node] = []
        scripts: list[str] = []
        body_ctx: _Ctx | None = None
        for redirect in node.children_by_field_name("redirect"):
            inner = [redirect, *redirect.named_children]
            for sub in inner:
                if sub.type == "file_redirect":
                    extras += sub.children_by_field_name("destination")[1:]
            if redirect.type == "herestring_redirect" and redirect.named_children:
                scripts.append(_render(redirect.named_children[-1], line.data).text)
            if redirect.type != "heredoc_redirect":
                continue
            for child in redirect.named_children:
                if child.type == "heredoc_body":
                    scripts.append(_text(child, line.data))
                elif child.type == "pipeline" and body_ctx is None:
                    number = self._new_pipeline()
                    line.pipeline_start[child.id] = (number, 1)
                    body_ctx = _Ctx("pipeline", number, 0)
        if target is not None:
            line.extras.setdefault(target.id, []).extend(extras)
            line.stdin.setdefault(target.id, []).extend(scripts)
        elif extras:
            self.error(
                f"{line.where}At {_where(extras[0])}: words after the redirection of a "
                "compound command, which bash rejects; move them into the command."
            )
            words = [_render(e, line.data) for e in extras]
            self._emit(words, (), _Ctx("list"), (), MAX_SCRIPT_DEPTH, [])
        return body_ctx

    def _command(
        self,
        node: tree_sitter.Node,
        line: _Line,
        wrappers: tuple[str, ...],
        depth: int,
        ctx: _Ctx,
    ) -> None:
        data = line.data
        words: list[Word] = []
        assignments: list[str] = []
        scripts: list[str] = []
        for index, child in enumerate(node.children):
            role = node.field_name_for_child(index)
            if role == "name" and _text(child, data) in _RESERVED:
                self.error(
                    f"{line.where}At {_where(child)}: the reserved word {_text(child, data)!r} "
                    "where a command should be; the structure could not be parsed reliably. "
                    "Check the braces and keywords, or split the command."
                )
            if role in ("name", "argument"):
                word = _render(child, data)
                if word.text or not child.has_error:  # not a word tree-sitter made up
                    words.append(word)
            elif child.type == "variable_assignment" and not words:
                assignments.append(_render(child, data).text)
            elif child.type == "file_redirect":
                words += [_render(d, data) for d in child.children_by_field_name("destination")[1:]]
            elif child.type == "herestring_redirect" and child.named_children:
                scripts.append(_render(child.named_children[-1], data).text)
            elif child.type == "heredoc_redirect":
                scripts += [_text(c, data) for c in child.children if c.type == "heredoc_body"]
        words += [_render(d, data) for d in line.extras.pop(node.id, [])]
        scripts += line.stdin.pop(node.id, [])
        if words:
            self._emit(words, tuple(assignments), ctx, wrappers, depth, scripts)

    def _emit(
        self,
        words: list[Word] | tuple[Word, ...],
        assignments: tuple[str, ...],
        ctx: _Ctx,
        wrappers: tuple[str, ...],
        depth: int,
        scripts: list[str],
    ) -> None:
        """Unwrap one simple command and record it, or the commands of the string it runs."""
        found = unwrap(words)
        chain = wrappers + found.wrappers
        assignments += found.assignments
        nested: list[tuple[str, str]] = []
        if found.script is not None:
            nested = [(found.script.label, found.script.text)]
        elif found.stdin_shell:
            nested = [(f"{basename(found.argv[0].text)} -s", s) for s in scripts]
        before = len(self.commands)
        for label, text in nested:
            self._nested(label, text, chain, depth, ctx)
        if len(self.commands) > before or not found.argv:
            return
        self._record(found.argv, chain, assignments, ctx)
        for script in deferred_scripts(found.argv):
            self._nested(script.label, script.text, chain, depth, ctx)
        argv0 = found.argv[0]
        if basename(argv0.text) == "find" and not argv0.dynamic:
            for action in find_exec_commands(found.argv):
                self._emit(action, (), ctx, (*chain, "find -exec"), depth, [])

    def _nested(self, label: str, text: str, chain: tuple[str, ...], depth: int, ctx: _Ctx) -> None:
        """Parse a command string that `label` runs, listing its commands with that wrapper.

        An empty label is a backquoted substitution: parsed again, but no wrapper.
        """
        what = f"`{label}`" if label else "backquoted command substitutions"
        if depth >= MAX_SCRIPT_DEPTH:
            self.error(
                f"Command strings nested more than {MAX_SCRIPT_DEPTH} levels deep (in {what} "
                "inside each other) are not analysed; run the inner command directly."
            )
            return
        where = f"In the command string run by {what}: " if label else f"In {what}: "
        chain = (*chain, label) if label else chain
        self.line(text.encode("utf-8", "replace"), chain, depth + 1, ctx, where)

    def _record(
        self,
        argv: tuple[Word, ...],
        wrappers: tuple[str, ...],
        assignments: tuple[str, ...],
        ctx: _Ctx,
    ) -> None:
        if len(self.commands) >= MAX_SIMPLE_COMMANDS:
            self.truncated = True
            self.error(
                f"The command holds more than {MAX_SIMPLE_COMMANDS} simple commands; only "
                "the first are analysed. Split it."
            )
            return
        first = argv[0]
        self.commands.append(
            SimpleCommand(
                argv=tuple(w.text for w in argv),
                name=basename(first.text),
                path=first.text,
                wrappers=wrappers,
                assignments=assignments,
                context=ctx.context,
                pipeline=ctx.pipeline,
                stage=ctx.stage,
                dynamic=first.dynamic,
            )
        )

    def _redirect(self, node: tree_sitter.Node, data: bytes, where: str) -> None:
        if len(self.redirects) >= MAX_REDIRECTS:
            self.error(
                f"{where}The command holds more than {MAX_REDIRECTS} redirections; "
                "only the first are analysed. Split it."
            )
            return
        descriptor = next((c for c in node.children if c.type == "file_descriptor"), None)
        operator = next((c for c in node.children if not c.is_named), None)
        destinations = node.children_by_field_name("destination")
        target = _render(destinations[0], data).text if destinations else ""
        op = _text(operator, data) if operator is not None else ""
        writes = bool(target) and (
            op in _OUTPUT_OPS or (op == ">&" and not target.isdigit() and target != "-")
        )
        if destinations and destinations[0].type == "process_substitution":
            writes = False
        fd = _text(descriptor, data) if descriptor is not None else ""
        self.redirects.append(Redirect(fd + op, target, writes))

    def _check_substitutions(self, line: _Line) -> None:
        """Flag `...` or $(...) the tree did not analyse (tree-sitter misses some in ${x/pat/})."""
        spans = _merge(line.skipped)
        for match in _UNESCAPED_SUBSTITUTION.finditer(line.data):
            pos = match.start()
            if _inside(spans, pos) or _escaped(line.data, pos):
                continue
            row = line.data.count(b"\n", 0, pos)
            column = pos - (line.data.rfind(b"\n", 0, pos) + 1)
            self.error(
                f"{line.where}At line {row + 1}, column {column + 1}: a command "
                "substitution the parser could not look into; assign its result to a "
                "variable in a separate command first."
            )
            return
