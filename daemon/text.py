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
