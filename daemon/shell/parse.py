"""A Bash command line as the policy sees it: every simple command, unwrapped, and every redirect.

This is `input.command` of the policy input (version 1; see policies/README.md). Parsing only:
nothing is executed or looked up. tree-sitter-bash gives an error-tolerant syntax tree (its quirks
are made up for in `daemon.shell.grammar`), so a line it cannot parse is still mined for
commands, but marked `parsed: false` for the policy to ask or deny. Command strings of `bash -c`,
`eval` and heredocs fed to a shell are parsed again, to a bounded depth; time, size, nesting and
output are bounded too, so no input crashes or hangs this.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import tree_sitter
import tree_sitter_bash

from daemon.shell import grammar, inputs
from daemon.shell.model import ParsedCommand, Redirect, SimpleCommand
from daemon.shell.words import node_text, render_word, scan_unquoted
from daemon.shell.wrappers import (
    SHELLS,
    Word,
    basename,
    deferred_scripts,
    find_exec_commands,
    unwrap,
)

__all__ = ["ParsedCommand", "Redirect", "SimpleCommand", "parse_command"]

MAX_COMMAND_BYTES = 32_768
"""Longer lines are refused as unparsed (a command that long belongs in a script file)."""
MAX_SCRIPT_DEPTH = 3
"""How many levels of `bash -c '...'` (or eval, heredoc-fed shells) inside each other are parsed."""
MAX_TREE_DEPTH = grammar.MAX_DEPTH
"""Syntax nested deeper than this is not descended into (and marks the line unparsed)."""
MAX_SIMPLE_COMMANDS = 5_000
MAX_WORDS = 4_000
MAX_WORD_CHARS = 64 * 1024
"""Characters of all recorded words together (nested substitutions repeat their text in every
command around them), which bounds the policy input too."""
"""Words analysed in one line, all commands together: each costs Python work on the event
loop and policy input, so a line of tens of thousands of words is not analysed (it asks)."""
MAX_REDIRECTS = 5_000
TIME_BUDGET_S = 0.25
"""Analysis runs on the event loop: a line that takes longer is not analysed (it asks)."""
"""Wall-clock budget for parsing one line with everything nested in it."""

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
_READ_CHUNK = 4_096
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
    unattributed = inputs.unattributed_input(analyser.commands, analyser.functions)
    if unattributed:
        errors.append(unattributed)
    analyser.commands = inputs.feed_functions(
        analyser.commands, analyser.inside, analyser.functions
    )
    return ParsedCommand(
        raw,
        not errors,
        " ".join(errors),
        tuple(analyser.commands),
        tuple(analyser.redirects),
        analyser.defines_functions,
        analyser.backgrounds,
    )


_REWRITES = (
    grammar.blank_keyword_prefixes,
    grammar.end_run_together_commands,
    grammar.quote_dropped_dash,
)
"""Rewrites of a line bash reads the same, after which the grammar reads it as bash does."""


@dataclass(frozen=True)
class _Ctx:
    context: str
    pipeline: int = 0
    stage: int = 0
    nested: bool = False
    """Inside a construct that runs apart from the line's top level (a subshell, group,
    pipeline stage, substitution, loop, condition or function body)."""
    then_and: bool = False
    """The command is the left side of `&&`: what follows runs only if it succeeded."""
    after_or: bool = False
    """The command is on the right of `||`: it runs only if what precedes it failed."""


@dataclass
class _Line:
    """What the walk of one parsed line (the top line or a nested command string) collects."""

    data: bytes
    where: str
    extras: dict[int, list[tree_sitter.Node]] = field(default_factory=dict)
    """Words tree-sitter put after a redirection target; bash gives them to the command."""
    stdin: dict[int, list[Word]] = field(default_factory=dict)
    """Heredoc bodies and here-strings a command reads, by command node id."""
    streams: set[int] = field(default_factory=set)
    """Commands, and bodies of compound commands, whose input is a stream (`stdin_stream`)."""
    stdin_around: dict[int, list[Word]] = field(default_factory=dict)
    """Those given to a compound command (`{ bash; } <<E`, a loop, a subshell), by the node id
    of its body: every command inside may read them (attacker round 192)."""
    pipeline_start: dict[int, tuple[int, int]] = field(default_factory=dict)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    """Byte spans already analysed (substitutions) or literal (quotes, comments)."""
    complete: bool = True


def _touching_joined(nodes: list[tree_sitter.Node], data: bytes) -> list[Word]:
    """The words of a declaration's arguments. tree-sitter splits one at a quote inside its name
    (`export A""B=x`: `A`, then `""B=x`) where bash reads one word (`AB=x`): nodes with no
    blank between them are one word (attacker round 156: `export MANPA""GER=...` named no
    MANPAGER to the policy)."""
    words: list[Word] = []
    end = -1
    for node in nodes:
        word = render_word(node, data)
        if words and node.start_byte == end:
            words[-1] = Word(words[-1].text + word.text, words[-1].dynamic or word.dynamic)
        else:
            words.append(word)
        end = node.end_byte
    return words


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


def _heredoc_bodies(heredoc: tree_sitter.Node, data: bytes) -> list[Word]:
    """A heredoc's bodies as the command reads them: known as written when its delimiter is
    quoted; when it is not, known once bash has taken the backslashes before `\\`, `$`, a
    backquote and a line's end (attacker round 191: `"\\\\x73ystem"` reached python3 as
    `"\\x73ystem"`) if the body expands nothing, only when it runs otherwise (`python3 <<E`
    with `$C`)."""
    quoted = grammar.heredoc_is_quoted(heredoc, data)
    bodies = [node_text(c, data) for c in heredoc.children if c.type == "heredoc_body"]
    if quoted:
        return [Word(body, False) for body in bodies]
    return [
        Word(_UNQUOTED_BODY.sub(_unescaped, body), "$" in body or "`" in body) for body in bodies
    ]


#: What a backslash quotes in the body of a heredoc whose delimiter is not quoted.
_UNQUOTED_BODY = re.compile(r"\\([\\$`\n])")


def _unescaped(escape: re.Match[str]) -> str:
    return "" if escape.group(1) == "\n" else escape.group(1)


def _where(node: tree_sitter.Node) -> str:
    row, column = node.start_point
    return f"line {row + 1}, column {column + 1}"


class _Analyser:
    """Walks syntax trees and collects simple commands and redirects."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.commands: list[SimpleCommand] = []
        self.redirects: list[Redirect] = []
        self.defines_functions = False
        self.functions: set[str] = set()
        """The names of the functions the line defines."""
        self.function = ""
        """The function whose body holds the command being recorded ("" for none)."""
        self.inside: list[str] = []
        """For each of `commands`, the function whose body holds it."""
        self.backgrounds = False
        self.deadline = time.monotonic() + TIME_BUDGET_S
        self.pipelines = 0
        self.truncated = False
        self.words = 0
        self.chars = 0
        """Set once the command limit is reached: the walks stop there."""
        self.streamed = False
        """The command being recorded (and those of a string it runs) reads a stream."""
        self.coproc = False
        """The line starts a coprocess, which the rest of it may write commands to through a
        descriptor (`coproc { bash; }; echo ... >&60`: attacker round 193)."""
        self.fed: tuple[Word, ...] = ()
        """What the command whose string is being parsed again (`bash -c`, eval) is fed on its
        input: each command of that string may read it (`bash -c bash <<< ...`)."""

    def error(self, message: str) -> None:
        if message not in self.errors and len(self.errors) < 8:
            self.errors.append(message)

    def line(
        self, data: bytes, wrappers: tuple[str, ...], depth: int, ctx: _Ctx, where: str
    ) -> None:
        """Parse one line (or nested command string) and walk it."""
        self.coproc = self.coproc or re.search(rb"\bcoproc\b", data) is not None
        repaired = self._repaired(data, where)
        if repaired is None:
            return
        tree, data = repaired
        root = tree.root_node
        if grammar.newlines_between_words(root, data) != []:
            self.error(
                f"{where}A command's words run over a line break where the parser cannot tell "
                "where the command ends; end each command with ';' or put it on its own line."
            )
        dropped = None if root.has_error else grammar.uncovered(root, data)
        if dropped is not None:
            row = data.count(b"\n", 0, dropped)
            column = dropped - (data.rfind(b"\n", 0, dropped) + 1)
            self.error(
                f"{where}At line {row + 1}, column {column + 1}: text the parser dropped "
                f"({data[dropped : dropped + 20].decode('utf-8', 'replace')!r}); write that "
                "part of the command another way, or split the command."
            )
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
                    f"{node_text(bad, data)[:30]!r}; check the quotes and brackets, or split the "
                    "command."
                )
        line = _Line(data, where)
        self._walk(root, line, wrappers, depth, ctx)
        if line.complete:
            self._check_substitutions(line)

    def _repaired(self, data: bytes, where: str) -> tuple[tree_sitter.Tree, bytes] | None:
        """The line parsed after the rewrites that make up for the grammar's misreadings
        (quirks 2, 3, 9, 11 and 14), each round on the tree of the one before; None when
        parsing was stopped."""
        tree = self._parse(data, where)
        if tree is not None and b"\\\n" in data:
            joined = grammar.join_continuations(data, tree.root_node)
            if joined != data:
                data = joined
                tree = self._parse(data, where)
        for rewrite in _REWRITES:
            for _ in range(3):  # a round can reveal what the one before hid
                if tree is None:
                    return None
                rewritten = rewrite(tree.root_node, data)
                if rewritten is None or rewritten == data:
                    break
                data = rewritten
                tree = self._parse(data, where)
        return None if tree is None else (tree, data)

    def _parse(self, data: bytes, where: str) -> tree_sitter.Tree | None:
        # A fresh parser per call: a tree_sitter.Parser must not be shared between threads.
        parser = tree_sitter.Parser(_LANGUAGE)
        ascii_data = grammar.ascii_only(data)
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
            if kind in grammar.LITERAL_NODES:
                if kind == "ansi_c_string" and not grammar.ansi_c_ends_as_bash(node, line.data):
                    self.error(
                        f"{line.where}At {_where(node)}: a $'...' string ending in an escaped "
                        "backslash, which bash ends sooner than it could be read; write the "
                        "backslash another way (\\x5c)."
                    )
                line.skipped.append((node.start_byte, node.end_byte))
                continue
            children = [c for c in node.children if c.is_named]
            child_ctx = ctx
            if any(c.type == "&" and not c.is_named for c in node.children):
                # Found in the tree, so also in a string run by eval or `bash -c` (attacker
                # round 86: `eval $'... \x26'` has no `&` in the line's text).
                self.backgrounds = True
            if kind == "program":
                statements = [c for c in children if c.type not in ("comment", "ERROR")]
                child_ctx = (
                    _Ctx("list", ctx.pipeline, ctx.stage, ctx.nested)
                    if len(statements) > 1
                    else ctx
                )
            elif kind == "pipeline":
                number, first = line.pipeline_start.pop(node.id, (0, 0))
                number = number or self._new_pipeline()
                stages = [c for c in children if c.type != "comment"]
                if stages and stages[-1].type == "list":
                    # Quirk 10: `a | b | c && d` read as `a | (b | c && d)`. The list runs
                    # after the whole pipeline, whose stages go on in its leftmost operand.
                    tail = stages.pop()
                    head = grammar.leftmost_operand(tail)
                    if head.type != "pipeline":
                        self.error(
                            f"{line.where}At {_where(head)}: the stages of a pipeline could not "
                            "be told apart; put the pipeline in a group: {{ a | b; }} && c."
                        )
                    line.pipeline_start[head.id] = (number, first + len(stages))
                    stack.append((tail, ctx, level + 1, kind))
                for stage, child in reversed(list(enumerate(stages, start=first))):
                    stack.append((child, _Ctx("pipeline", number, stage, True), level + 1, kind))
                continue
            elif kind in ("command_substitution", "process_substitution"):
                line.skipped.append((node.start_byte, node.end_byte))
                if line.data.startswith(b">(", node.start_byte):
                    # What it runs reads what the command writes, as a pipe's next stage does
                    # (attacker round 198: `echo ... > >(bash)`).
                    line.streams.add(node.id)
                child_ctx = _Ctx(_CONTEXTS[kind], nested=True)
                inner = grammar.backquoted_body(node_text(node, line.data))
                if inner is not None:
                    self._nested("", inner, wrappers, depth, child_ctx)
                    continue
            elif kind == "function_definition":
                self.defines_functions = True
                name = node.child_by_field_name("name")
                if name is not None:
                    self.functions.add(node_text(name, line.data))
                if any("redirect" in c.type for c in node.children):
                    self.error(
                        f"{line.where}At {_where(node)}: a function defined with a redirection "
                        "of its own, which every call of it reads; write the redirection on the "
                        "commands in it."
                    )
                child_ctx = _Ctx(_CONTEXTS[kind], ctx.pipeline, ctx.stage, True)
            elif kind == "negated_command":
                # `! cd nope && x`: x runs although the cd failed (attacker round 82): like a
                # command after `||`, whether it did what it says is not known.
                child_ctx = _Ctx(ctx.context, ctx.pipeline, ctx.stage, ctx.nested, False, True)
            elif kind == "list":
                operators = [node_text(c, line.data) for c in node.children if not c.is_named]
                left = _Ctx(
                    "list",
                    ctx.pipeline,
                    ctx.stage,
                    ctx.nested,
                    operators == ["&&"],
                    ctx.after_or,
                )
                # The right side ends the list: whatever follows the list follows it. After
                # `||` it runs only when the left side failed (`a || cd d && b`: b may run
                # where the line started, attacker round 81).
                right = _Ctx(
                    "list",
                    ctx.pipeline,
                    ctx.stage,
                    ctx.nested,
                    ctx.then_and,
                    ctx.after_or or operators == ["||"],
                )
                for index, child in reversed(list(enumerate(children))):
                    stack.append((child, left if index == 0 else right, level + 1, kind))
                continue
            elif kind == "compound_statement" and parent == "function_definition":
                child_ctx = _Ctx("function", ctx.pipeline, ctx.stage, True)
            elif kind in _CONTEXTS:
                child_ctx = _Ctx(_CONTEXTS[kind], ctx.pipeline, ctx.stage, True)
            elif kind == "redirected_statement":
                body_ctx = self._prepare_redirected(node, line)
                body = node.child_by_field_name("body")
                for child in reversed(children):
                    use = body_ctx if body_ctx and body and child.id == body.id else ctx
                    stack.append((child, use, level + 1, kind))
                continue
            elif kind == "heredoc_redirect":
                if not grammar.heredoc_trusted(node, line.data):
                    self.error(
                        f"{line.where}At {_where(node)}: a heredoc whose delimiter or end line "
                        "could not be read reliably; use a plain delimiter such as EOF, alone on "
                        "its end line."
                    )
                if grammar.heredoc_is_quoted(node, line.data):
                    line.skipped += [
                        (c.start_byte, c.end_byte) for c in children if c.type == "heredoc_body"
                    ]
                child_ctx = _Ctx("list", ctx.pipeline, ctx.stage, ctx.nested)
            elif kind == "command":
                self._command(node, line, wrappers, depth, ctx)
            elif kind in ("declaration_command", "unset_command"):
                words = [scan_unquoted(node_text(node.children[0], line.data))]
                words += _touching_joined(children, line.data)
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
        body = node.child_by_field_name("body")
        target = grammar.last_command(body)
        body_id = body.id if body is not None else -1
        extras: list[tree_sitter.Node] = []
        scripts: list[Word] = []
        body_ctx: _Ctx | None = None
        for redirect in node.children_by_field_name("redirect"):
            inner = [redirect, *redirect.named_children]
            for sub in inner:
                if sub.type in ("file_redirect", "heredoc_redirect"):
                    extras += grammar.words_after_target(sub)
            if redirect.type == "file_redirect" and inputs.reads_a_stream(redirect, line.data):
                line.streams.add(target.id if target is not None else body_id)
            if redirect.type == "herestring_redirect" and redirect.named_children:
                scripts.append(render_word(redirect.named_children[-1], line.data))
            if redirect.type != "heredoc_redirect":
                continue
            scripts += _heredoc_bodies(redirect, line.data)
            for child in redirect.named_children:
                if child.type == "pipeline" and body_ctx is None:
                    number = self._new_pipeline()
                    line.pipeline_start[child.id] = (number, 1)
                    body_ctx = _Ctx("pipeline", number, 0, True)
        if target is None and scripts and body is not None:
            line.stdin_around.setdefault(body.id, []).extend(scripts)
        if target is not None:
            line.extras.setdefault(target.id, []).extend(extras)
            line.stdin.setdefault(target.id, []).extend(scripts)
        elif extras:
            self.error(
                f"{line.where}At {_where(extras[0])}: words after the redirection of a "
                "compound command, which bash rejects; move them into the command."
            )
            words = [render_word(e, line.data) for e in extras]
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
        word_end = -1
        assignments: list[str] = []
        scripts: list[Word] = []
        if self.words + node.child_count > MAX_WORDS:
            self.words += node.child_count
            self.truncated = True
            self.error(
                f"The command holds more than {MAX_WORDS} words; it is not analysed further. "
                "Split it, or pass long lists through a file."
            )
            return
        for index, child in enumerate(node.children):
            role = node.field_name_for_child(index)
            if role == "name" and grammar.descriptor_as_name(child, data):
                self.error(
                    f"{line.where}At {_where(child)}: a file descriptor written before a "
                    "redirection at the start of a command could not be told from the command; "
                    "put the redirection after the command."
                )
            if role == "name" and node_text(child, data) in grammar.RESERVED:
                self.error(
                    f"{line.where}At {_where(child)}: the reserved word {node_text(child, data)!r} "
                    "where a command should be; the structure could not be parsed reliably. "
                    "Check the braces and keywords, or split the command."
                )
            if role == "argument" and grammar.descriptor_as_name(child, data):
                continue  # `c 0<f x`: the 0 is the redirection's, not an argument
            if role in ("name", "argument"):
                word = render_word(child, data)
                if words and child.start_byte == word_end:
                    # One word to bash: tree-sitter splits `$"777"` into `$` and a string.
                    words[-1] = Word(words[-1].text + word.text, words[-1].dynamic or word.dynamic)
                elif word.text or not child.has_error:  # not a word tree-sitter made up
                    words.append(word)
                word_end = child.end_byte
            elif child.type == "variable_assignment" and not words:
                assignments.append(render_word(child, data).text)
            elif child.type == "file_redirect":
                words += [render_word(d, data) for d in grammar.words_after_target(child)]
            elif child.type == "herestring_redirect" and child.named_children:
                scripts.append(render_word(child.named_children[-1], data))
            elif child.type == "heredoc_redirect":
                words += [render_word(d, data) for d in grammar.words_after_target(child)]
                scripts += _heredoc_bodies(child, data)
        words += [render_word(d, data) for d in line.extras.pop(node.id, [])]
        scripts += line.stdin.pop(node.id, [])
        scripts += inputs.fed_around(node, line.stdin_around)
        if not words:
            return
        if any(c.type == "file_redirect" and inputs.reads_a_stream(c, data) for c in node.children):
            line.streams.add(node.id)  # written before the command (`< <(...) bash`)
        streamed = inputs.streamed(node, line.streams)
        if inputs.exec_alone(words) and (streamed or scripts):
            self.error(
                f"{line.where}At {_where(node)}: `exec` gives the rest of the command a stream "
                "or text for its input, which any program after it may run as its commands; "
                "give it to the one command that reads it."
            )
        outer, self.streamed = self.streamed, self.streamed or streamed
        function = self.function or inputs.enclosing_function(node, data)
        outer_function, self.function = self.function, function
        try:
            self._emit(words, tuple(assignments), ctx, wrappers, depth, scripts)
        finally:
            self.streamed, self.function = outer, outer_function

    def _emit(
        self,
        words: list[Word] | tuple[Word, ...],
        assignments: tuple[str, ...],
        ctx: _Ctx,
        wrappers: tuple[str, ...],
        depth: int,
        scripts: list[Word],
    ) -> None:
        """Unwrap one simple command and record it, or the commands of the string it runs."""
        found = unwrap(words)
        chain = wrappers + found.wrappers
        assignments += found.assignments
        fed = (*scripts, *self.fed)
        nested: list[tuple[str, str]] = []
        if found.script is not None:
            nested = [(found.script.label, found.script.text)]
        elif found.stdin_shell:
            nested = [(f"{basename(found.argv[0].text)} -s", s.text) for s in fed]
        before = len(self.commands)
        self._nested_fed(nested, fed, chain, depth, ctx)
        if len(self.commands) > before or not found.argv:
            return
        self._record(found.argv, chain, assignments, ctx, fed)
        argv0 = found.argv[0]
        if basename(argv0.text) in SHELLS and not argv0.dynamic:
            # A shell given a script is fed its input too; the script may be a link to it
            # (`ln -s /dev/stdin s; bash s <<< ...`: attacker round 88): judged as if it ran.
            label = f"{basename(argv0.text)} -s"
            self._nested_fed([(label, given.text) for given in fed], fed, chain, depth, ctx)
        for script in deferred_scripts(found.argv):
            self._nested(script.label, script.text, chain, depth, ctx)
        if basename(argv0.text) == "find" and not argv0.dynamic:
            for label, action in find_exec_commands(found.argv):
                self._emit(action, (), ctx, (*chain, label), depth, [])

    def _nested_fed(
        self,
        nested: list[tuple[str, str]],
        fed: tuple[Word, ...],
        chain: tuple[str, ...],
        depth: int,
        ctx: _Ctx,
    ) -> None:
        """Parse the strings a command runs, each of whose commands may read what that command
        is fed: a `bash -c` string's or eval's, and a script bash reads from its input, whose
        next lines a program it runs reads as its own (`bash <<E` with `perl` then perl's code)."""
        outer, self.fed = self.fed, fed
        try:
            for label, text in nested:
                self._nested(label, text, chain, depth, ctx)
        finally:
            self.fed = outer

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
        fed: tuple[Word, ...] = (),
    ) -> None:
        if len(self.commands) >= MAX_SIMPLE_COMMANDS:
            self.truncated = True
            self.error(
                f"The command holds more than {MAX_SIMPLE_COMMANDS} simple commands; only "
                "the first are analysed. Split it."
            )
            return
        self.words += len(argv)
        # What it is fed is in the policy's input once per command that reads it.
        self.chars += sum(len(w.text) for w in argv) + sum(len(w.text) for w in fed)
        if self.words > MAX_WORDS or self.chars > MAX_WORD_CHARS:
            self.truncated = True
            self.error(
                f"The command holds more than {MAX_WORDS} words or {MAX_WORD_CHARS} characters of "
                "words; it is not analysed further. Split it, or pass long lists through a file."
            )
            return
        first = argv[0]
        self.inside.append(self.function)
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
                dynamic_words=tuple(w.dynamic for w in argv),
                top_level=not ctx.nested,
                then_and=ctx.then_and,
                after_or=ctx.after_or,
                stdin_texts=tuple(w.text for w in fed),
                stdin_dynamic=any(w.dynamic for w in fed),
                stdin_stream=self.streamed or self.coproc,
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
        if descriptor is not None and not node_text(descriptor, data).isdigit():
            # `-2>&1`: bash gives `-2` to the command; the grammar made it the descriptor.
            self.error(
                f"{where}At {_where(descriptor)}: {node_text(descriptor, data)!r} before a "
                "redirection is not a file descriptor; put a space between the word and the "
                "redirection."
            )
        operator = next((c for c in node.children if not c.is_named), None)
        destinations = node.children_by_field_name("destination")
        if grammar.closes_descriptor(node):
            destinations = []  # `>&-` has no target: the words after it are the command's
        target = render_word(destinations[0], data).text if destinations else ""
        op = node_text(operator, data) if operator is not None else ""
        writes = bool(target) and (
            op in _OUTPUT_OPS or (op == ">&" and not target.isdigit() and target != "-")
        )
        if destinations and destinations[0].type == "process_substitution":
            writes = False
        fd = node_text(descriptor, data) if descriptor is not None else ""
        self.redirects.append(Redirect(fd + op, target, writes))

    def _check_substitutions(self, line: _Line) -> None:
        """Flag `...` or $(...) the tree did not analyse (grammar quirk 7)."""
        pos = grammar.unseen_substitution(line.data, line.skipped)
        if pos is None:
            return
        row = line.data.count(b"\n", 0, pos)
        column = pos - (line.data.rfind(b"\n", 0, pos) + 1)
        self.error(
            f"{line.where}At line {row + 1}, column {column + 1}: a command substitution the "
            "parser could not look into; assign its result to a variable in a separate command "
            "first."
        )
