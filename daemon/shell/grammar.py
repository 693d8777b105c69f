"""Where tree-sitter-bash (0.25) reads a line differently from bash, and how the parser makes up
for it. Each quirk is pinned by a test on the bare grammar (tests/unit/test_shell_grammar.py): when
a grammar upgrade fixes one, its test fails and names the workaround that can go.

1. Non-ASCII bytes can crash the grammar (`{` then U+E0001): the parser gets ASCII only.
2. A backslash-newline inside a word splits it (`r\\<newline>m` is two words; bash reads `rm`).
3. `time`, `coproc` and `!` before a compound command make that command's words arguments.
4. Inside `...` bash removes the backslashes before $ ` \\ first and parses the rest again.
5. Words after a redirection target (`echo > f x`) or a heredoc's delimiter (`rm <<E -rf x`) hang
   on the redirection; bash gives them to the command.
6. A trailing redirection of a pipeline or list is attached to the whole statement; bash binds it
   to the last simple command.
7. Some command substitutions are not made nodes (inside `${x/pat/rep}`): found by scanning.
8. A reserved word where a command should be means the structure was misread.
9. A newline can be read as a space between two words of one command (`a | b | c<newline>rm x
   && y` is the command `c rm x`, with no error): a `;` is put before it and the line parsed again.
10. A pipeline of three stages or more before `&&` or `||` is read as `a | (b | c && d)`: the
   walk continues the pipeline in the list's leftmost operand and puts the list after it.
11. A word can start with the newline before it (`echo hi<newline>\\rm x` is one command): a `;`
   is put before it, as in quirk 9.
12. A heredoc's delimiter is taken as written (`<<E"x"` is `Ex` to bash, `<<S|` is `S` and a
   pipe), and a body without its end line swallows what follows: a heredoc whose delimiter is not
   a plain or wholly quoted word, or whose end line is not that delimiter, is not trusted.
13. A descriptor before a redirection at the start of a command (`0<f rm x`, `{fd}>f rm x`) is
   read as the command's name (not trusted), and `>&-` takes the next words as its target (they
   are the command's).
14. Some words are dropped from the tree altogether (the `-` of `python3 - <<PY`, which is
   quoted and the line parsed again): a line with other text no node covers is not trusted.
"""

from __future__ import annotations

import bisect
import re

import tree_sitter

from daemon.shell.words import node_text

MAX_DEPTH = 256
"""Nodes nested deeper than this are not followed."""

# Quirk 1: bash's syntax is ASCII and every other byte is a word character to it, so the parser
# gets 'x' for each non-ASCII byte: same byte offsets, same structure, no crash. Texts are still
# cut from the real bytes.
_ASCII_ONLY = bytes(range(128)) + b"x" * 128

#: Node types whose text is literal: nothing inside runs.
LITERAL_NODES = frozenset({"comment", "raw_string", "ansi_c_string"})

COMPOUND_STARTS = frozenset({"{", "(", "((", "[[", "!", "if", "while", "until", "for", "case"})
COMPOUND_STARTS |= {"select", "function"}
#: Reserved words bash never runs as a command (quirk 8).
RESERVED = frozenset({"{", "}", "if", "then", "elif", "else", "fi", "do", "done", "while"})
RESERVED |= {"until", "for", "case", "esac", "select", "function", "[[", "]]"}

_UNESCAPED_SUBSTITUTION = re.compile(rb"`|\$\((?!\()")


def ascii_only(data: bytes) -> bytes:
    """What the grammar may be given of `data` (quirk 1)."""
    return data.translate(_ASCII_ONLY)


def heredoc_is_quoted(heredoc: tree_sitter.Node, data: bytes) -> bool:
    """`<<'EOF'`, `<<"EOF"`, `<<\\EOF`: the body is literal."""
    start = next((c for c in heredoc.children if c.type == "heredoc_start"), None)
    return start is not None and any(q in node_text(start, data) for q in "'\"\\")


def literal_spans(root: tree_sitter.Node, data: bytes) -> list[tuple[int, int]]:
    """Spans where bash takes text literally: comments, '...', $'...', quoted heredoc bodies."""
    spans: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type in LITERAL_NODES:
            spans.append((node.start_byte, node.end_byte))
            continue
        if node.type == "heredoc_redirect" and heredoc_is_quoted(node, data):
            spans += [(c.start_byte, c.end_byte) for c in node.children if c.type == "heredoc_body"]
        stack.extend(node.children)
    return merge(spans)


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint spans covering the same bytes as the given (possibly nested) ones."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def inside(merged: list[tuple[int, int]], pos: int) -> bool:
    """Whether pos lies in one of the spans returned by `merge`."""
    i = bisect.bisect_right(merged, pos, key=lambda span: span[0]) - 1
    return i >= 0 and merged[i][0] <= pos < merged[i][1]


def escaped(data: bytes, pos: int) -> bool:
    """Whether the byte at pos is escaped by an odd run of backslashes."""
    run = 0
    while pos - run - 1 >= 0 and data[pos - run - 1] == 0x5C:
        run += 1
    return run % 2 == 1


def join_continuations(data: bytes, root: tree_sitter.Node) -> bytes:
    """Remove backslash-newline outside literal text, as bash does before splitting words
    (quirk 2)."""
    literal = literal_spans(root, data)
    out = bytearray()
    pos = 0
    found = data.find(b"\\\n")
    while found >= 0:
        if not escaped(data, found) and not inside(literal, found):
            out += data[pos:found]
            pos = found + 2
        found = data.find(b"\\\n", found + 2)
    return bytes(out + data[pos:])


def blank_keyword_prefixes(root: tree_sitter.Node, data: bytes) -> bytes:
    """Blank out `time`, `coproc`, `!` before a compound command (quirk 3): without the keyword
    the structure is the one bash runs; only the timing is lost. (`time { rm x; }` is otherwise
    a command `time` with arguments `{ rm x` and a command `}`.)"""
    spans: list[tuple[int, int]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type == "negated_command" and node.named_children:
            # `! { rm x; }` is misread the same way; the negation does not matter here.
            first = node.named_children[0]
            head = first.child_by_field_name("name") if first.type == "command" else None
            if head is not None and node_text(head, data) in COMPOUND_STARTS:
                spans.append((node.start_byte, first.start_byte))
            continue
        name = node.child_by_field_name("name") if node.type == "command" else None
        if name is None or node_text(name, data) not in ("time", "coproc"):
            continue
        args = node.children_by_field_name("argument")
        k = 0
        while k < len(args) and node_text(args[k], data) in ("-p", "--"):
            k += 1
        if k < len(args) and node_text(args[k], data) in COMPOUND_STARTS:
            spans.append((name.start_byte, args[k].start_byte))
    out = bytearray(data)
    for start, end in spans:
        out[start:end] = bytes(b if b == 0x0A else 0x20 for b in data[start:end])
    return bytes(out)


#: Nodes whose children are the words (and redirections) of one command.
_WORD_LISTS = frozenset({"command", "declaration_command", "unset_command", "file_redirect"})
_WORD_LISTS |= {"redirected_statement"}


def newlines_between_words(root: tree_sitter.Node, data: bytes) -> list[int] | None:
    """Offsets of the newlines the grammar read as a space between two words of one command
    (quirk 9), in order; None when such a gap holds anything but blanks, which is not guessed."""
    found: list[int] = []
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type not in _WORD_LISTS:
            continue
        for before, after in zip(node.children, node.children[1:], strict=False):
            if data[after.start_byte : after.start_byte + 1] == b"\n":  # quirk 11
                found.append(after.start_byte)
                continue
            gap = data[before.end_byte : after.start_byte]
            if b"\n" not in gap:
                continue
            if gap.strip(b" \t\n"):
                return None
            if before.type == "comment":  # a `;` after its `#` would be part of the comment
                found.append(before.start_byte)
            else:
                found.append(before.end_byte + gap.index(b"\n"))
    return sorted(found)


def leftmost_operand(node: tree_sitter.Node) -> tree_sitter.Node:
    """The first operand of a (nested) `&&`/`||` list (quirk 10)."""
    for _ in range(MAX_DEPTH):
        if node.type != "list" or not node.named_children:
            return node
        node = node.named_children[0]
    return node


def uncovered(root: tree_sitter.Node, data: bytes) -> int | None:
    """The offset of the first text (not a blank) that no token of the tree holds, where the
    grammar dropped a word (quirk 14); None when all of it is held."""
    held = bytearray(len(data))
    stack = [root]
    while stack:
        node = stack.pop()
        if node.child_count == 0 or node.type == "heredoc_body":  # a body's text is its own
            held[node.start_byte : node.end_byte] = b"\x01" * (node.end_byte - node.start_byte)
        else:
            stack.extend(node.children)
    for pos, byte in enumerate(data):
        if not held[pos] and byte not in b" \t\n\r":
            return pos
    return None


_DASH_BEFORE_HEREDOC = re.compile(rb"-[ \t]+<<")


def quote_dropped_dash(root: tree_sitter.Node, data: bytes) -> bytes | None:
    """The line with the `-` the grammar dropped before a heredoc (`python3 - <<PY`) quoted,
    which bash reads the same (quirk 14); None when nothing or something else was dropped."""
    pos = None if root.has_error else uncovered(root, data)
    if pos is None or _DASH_BEFORE_HEREDOC.match(data, pos) is None:
        return None
    return data[:pos] + b"'-'" + data[pos + 1 :]


def end_run_together_commands(root: tree_sitter.Node, data: bytes) -> bytes | None:
    """The line with `;` put before each newline the grammar read as a space between two words
    (quirks 9 and 11), which bash reads the same way; None when that cannot be told."""
    newlines = newlines_between_words(root, data)
    if not newlines:
        return None
    out = bytearray()
    pos = 0
    for at in newlines:
        out += data[pos:at] + b";"
        pos = at
    return bytes(out + data[pos:])


def backquoted_body(text: str) -> str | None:
    """The command bash parses inside a backquoted substitution whose text has backslashes
    (quirk 4); None when the grammar's own reading is right."""
    if not text.startswith("`") or "\\" not in text:
        return None
    inner = text[1:-1] if len(text) > 1 and text.endswith("`") else text[1:]
    return re.sub(r"\\([$`\\])", r"\1", inner)


def words_after_target(redirect: tree_sitter.Node) -> list[tree_sitter.Node]:
    """Words the grammar hangs on a file redirection after its target, or on a heredoc after its
    delimiter (quirk 5); after `>&-`, which has no target, every one (quirk 13)."""
    if redirect.type == "heredoc_redirect":
        return list(redirect.children_by_field_name("argument"))
    destinations = redirect.children_by_field_name("destination")
    return list(destinations if closes_descriptor(redirect) else destinations[1:])


def closes_descriptor(redirect: tree_sitter.Node) -> bool:
    """`>&-` or `<&-`: a redirection without a target (quirk 13)."""
    return any(not c.is_named and c.type.endswith("&-") for c in redirect.children)


#: A heredoc delimiter read the same by bash and the grammar: a plain word, or one wholly quoted.
_PLAIN_DELIMITER = re.compile(
    rb"""([\w.,:@%+/=-]+)|'([\w.,:@%+/= -]*)'|"([\w.,:@%+/= -]*)"|\\([\w.,:@%+/=-]+)"""
)


def ansi_c_ends_as_bash(node: tree_sitter.Node, data: bytes) -> bool:
    """Whether a $'...' string ends where bash ends it: the grammar takes `\\'` for an escaped
    quote even after an escaped backslash (`$'a\\\\'` runs on to the next quote; attacker round
    193 hid `; id; rm -rf ...` in what it read as one word)."""
    text = data[node.start_byte : node.end_byte]
    index = 2
    while index < len(text):
        if text[index : index + 1] == b"\\":
            index += 2
        elif text[index : index + 1] == b"'":
            return index == len(text) - 1
        else:
            index += 1
    return False


def heredoc_trusted(heredoc: tree_sitter.Node, data: bytes) -> bool:
    """Whether the grammar read the heredoc as bash does (quirk 12): a plain delimiter, and an
    end line that is exactly it."""
    start = next((c for c in heredoc.children if c.type == "heredoc_start"), None)
    end = next((c for c in heredoc.children if c.type == "heredoc_end"), None)
    if start is None or end is None:
        return False
    plain = _PLAIN_DELIMITER.fullmatch(node_text(start, data).encode())
    if plain is None:
        return False
    delimiter = next(group for group in plain.groups() if group is not None)
    # The whole line the grammar ended it on: bash ends a heredoc only on a line that is the
    # delimiter, after leading tabs for `<<-` (attacker round 192: the grammar also ended
    # `<<EOF` on `\tEOF` and `EOF\t`, and the rest of the body went unread).
    line_start = data.rfind(b"\n", 0, end.start_byte) + 1
    line_end = data.find(b"\n", end.end_byte)
    end_line = data[line_start : len(data) if line_end == -1 else line_end]
    if any(c.type == "<<-" for c in heredoc.children):
        end_line = end_line.lstrip(b"\t")
    return end_line == delimiter


#: A command name that is a file descriptor of a redirection written against it (quirk 13).
_DESCRIPTOR_NAME = re.compile(r"[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\}")


def descriptor_as_name(name: tree_sitter.Node, data: bytes) -> bool:
    """`0` in `0<f rm x`, `{fd}` in `{fd}>f rm x`: the grammar's command name is a descriptor."""
    return data[name.end_byte : name.end_byte + 1] in (b"<", b">") and bool(
        _DESCRIPTOR_NAME.fullmatch(node_text(name, data))
    )


def last_command(node: tree_sitter.Node | None) -> tree_sitter.Node | None:
    """The simple command a trailing redirection belongs to (quirk 6)."""
    for _ in range(MAX_DEPTH):
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


def unseen_substitution(data: bytes, seen: list[tuple[int, int]]) -> int | None:
    """The offset of the first `...` or $(...) outside the spans already analysed or literal
    (quirk 7); None when there is none."""
    spans = merge(seen)
    for match in _UNESCAPED_SUBSTITUTION.finditer(data):
        pos = match.start()
        if not inside(spans, pos) and not escaped(data, pos):
            return pos
    return None
