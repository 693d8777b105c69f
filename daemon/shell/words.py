"""Words of a Bash command line after quote removal, as bash would see them before it expands
anything: quotes and escapes removed, $'...' decoded, expansions kept as written and marked
dynamic (the real value is only known at run time)."""

from __future__ import annotations

import re

import tree_sitter

from daemon.shell.wrappers import Word

EXPANSIONS = frozenset(
    {"simple_expansion", "expansion", "command_substitution", "process_substitution"}
    | {"arithmetic_expansion", "brace_expression"}
)
"""Node types whose value is only known at run time."""
_BRACE_PATTERN = re.compile(r"\{[^{}\s]*(,|\.\.)[^{}\s]*\}")
_ANSI_C_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


def node_text(node: tree_sitter.Node, data: bytes) -> str:
    return data[node.start_byte : node.end_byte].decode("utf-8", "replace")


def decode_ansi_c(body: str) -> str:
    """The value of $'...' (body without the quotes), as the bytes bash makes of it read as
    UTF-8: `\\xHH`, `\\x{H...}` and octal escapes are bytes (`$'\\xef\\xbd\\x93'` is the
    fullwidth `ｓ`, which Python reads as `s`: attacker round 192), `\\u` and `\\U` characters;
    bash ends the value at its first NUL byte (`rm -rf $'.git\\0x'` removes `.git`)."""
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out += ch.encode("utf-8", "replace")
            i += 1
            continue
        nxt = body[i + 1]
        i += 2
        if nxt in _ANSI_C_SIMPLE:
            out += _ANSI_C_SIMPLE[nxt].encode()
        elif nxt in "01234567":
            digits = re.match(r"[0-7]{0,2}", body[i:])
            code = nxt + (digits.group() if digits else "")
            i += len(code) - 1
            out.append(int(code, 8) & 0xFF)
        elif nxt == "x" and body.startswith("{", i):
            # bash 5.2: any number of digits, the value modulo 256; the brace may stay open.
            digits = re.match(r"[0-9a-fA-F]*", body[i + 1 :])
            hexes = digits.group() if digits else ""
            i += 1 + len(hexes) + (1 if body.startswith("}", i + 1 + len(hexes)) else 0)
            out.append(int(hexes or "0", 16) & 0xFF)
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = re.match(rf"[0-9a-fA-F]{{1,{width}}}", body[i:])
            if digits is None:
                out += ("\\" + nxt).encode()
                continue
            i += len(digits.group())
            value = int(digits.group(), 16)
            if nxt == "x":
                out.append(value)
            else:
                out += chr(min(value, 0x10FFFF)).encode("utf-8", "replace")
        elif nxt == "c" and i < len(body):
            # bash takes `\c\\` as control-backslash, both backslashes (attacker round 193: read
            # as one, the other made `\x00` of what followed, and the value was cut there).
            control = body[i]
            i += 2 if body.startswith("\\\\", i) else 1
            out.append(0x7F if control == "?" else ord(control.upper()) & 0x1F)
        else:
            out += ("\\" + nxt).encode("utf-8", "replace")
    return bytes(out).split(b"\0", 1)[0].decode("utf-8", "replace")


def _dq_unescape(text: str) -> str:
    """Inside double quotes a backslash only escapes $ ` " \\ and newline."""
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def scan_unquoted(text: str) -> Word:
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
            out.append(decode_ansi_c(body) if ch == "$" else body)
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
    raw = node_text(node, data)
    end = node.end_byte - 1 if len(raw) >= 2 and raw.endswith('"') else node.end_byte
    parts: list[str] = []
    dynamic = False
    pos = node.start_byte + 1
    for child in node.named_children:
        if child.type not in EXPANSIONS:
            continue
        parts.append(_dq_unescape(data[pos : child.start_byte].decode("utf-8", "replace")))
        parts.append(node_text(child, data))
        dynamic = True
        pos = child.end_byte
    parts.append(_dq_unescape(data[pos:end].decode("utf-8", "replace")))
    return Word("".join(parts), dynamic)


def render_word(node: tree_sitter.Node, data: bytes, depth: int = 0) -> Word:
    """One word (or word-like node) after quote removal."""
    kind = node.type
    if kind in EXPANSIONS:
        return Word(node_text(node, data), True)
    if kind == "$" and not node.is_named:
        # The `$` of a `$"..."` that tree-sitter did not read as a translated string: bash
        # translates the string through the message catalogues the line may choose
        # (TEXTDOMAINDIR), so its value is only known at run time (attacker round 185).
        return Word(node_text(node, data), True)
    if kind == "string":
        return _render_string(node, data)
    if kind == "translated_string":
        inner = next((c for c in node.named_children if c.type == "string"), None)
        text = _render_string(inner, data) if inner else scan_unquoted(node_text(node, data))
        return Word(text.text, True)
    if kind in ("raw_string", "ansi_c_string") or node.child_count == 0 or depth > 8:
        return scan_unquoted(node_text(node, data))
    parts: list[str] = []
    dynamic = False
    pos = node.start_byte
    for child in node.children:
        gap = data[pos : child.start_byte].decode("utf-8", "replace")
        word = (
            render_word(child, data, depth + 1)
            if child.is_named or child.type == "$"
            else scan_unquoted(node_text(child, data))
        )
        gap_word = scan_unquoted(gap)
        parts += [gap_word.text, word.text]
        dynamic = dynamic or gap_word.dynamic or word.dynamic
        pos = max(pos, child.end_byte)
    tail = scan_unquoted(data[pos : node.end_byte].decode("utf-8", "replace"))
    # A brace pattern split over several nodes (`{a,b}`, `x{1..3}`) is only seen whole; one in
    # quotes counts too, which only errs on the side of "known at run time".
    braces = bool(_BRACE_PATTERN.search(node_text(node, data)))
    return Word("".join([*parts, tail.text]), dynamic or tail.dynamic or braces)
