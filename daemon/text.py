"""Text that crosses the wire: what the filesystem hands Python is not always valid Unicode."""

from __future__ import annotations


def wire_safe(text: str) -> str:
    """`text` as valid UTF-8 text. File names and link targets are bytes; Python decodes those that
    are not UTF-8 with lone surrogates (surrogateescape), which protobuf, gRPC status messages
    and UTF-8 files refuse. Each such byte is shown as a \\xNN escape instead, as the name
    would be printed by a careful `ls`; any other lone surrogate as \\udNNN."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogateescape" if _only_escaped(text) else "backslashreplace")
        return raw.decode("utf-8", "backslashreplace")
    return text


def _only_escaped(text: str) -> bool:
    """Whether every lone surrogate in `text` stands for a byte (U+DC80..U+DCFF)."""
    return all("\udc80" <= ch <= "\udcff" for ch in text if "\ud800" <= ch <= "\udfff")


# Characters a terminal acts on instead of showing (C0 and C1 controls, DEL) and the ones that
# reorder or hide text (bidirectional controls, zero-width marks, BOM): shown as \uXXXX.
_UNSHOWN = {
    code: f"\\u{code:04x}"
    for code in (
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        0x061C, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F,
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x2028, 0x2029, 0xFEFF,
    )
}  # fmt: skip


def printable(text: str) -> str:
    """`text` as a person's terminal shows it faithfully: valid UTF-8 (wire_safe), with every
    character that would move the cursor, erase, recolour, reorder or hide text escaped, so what
    a person approves is what they read."""
    return wire_safe(text).translate(_UNSHOWN)


_UNSHOWN_BUT_LINES = {code: shown for code, shown in _UNSHOWN.items() if code not in (0x09, 0x0A)}


def printable_lines(text: str) -> str:
    """`text` for a terminal as `printable` shows it, but keeping its lines and tabs (a tool's
    output as it was written; escape sequences in it shown, never acted on)."""
    return wire_safe(text).translate(_UNSHOWN_BUT_LINES)
