"""Jupyter notebooks as Read shows them: every cell with its id, type and source, then its outputs
(stream text, results, errors), and the images among them as image blocks, as the reference
runtime reads them. A file that is not a notebook's JSON is read as the text it is."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from daemon.errors import ToolError
from daemon.images import MAX_IMAGE_BYTES, sniff_image
from daemon.models import ImageContent

MAX_OUTPUT_CHARS = 10_000
MAX_NOTEBOOK_BYTES = 8 * 1024 * 1024
"""Larger notebooks are not parsed (their JSON may hold images, so more than a text file)."""
MAX_NOTEBOOK_VALUES = 50_000
"""Objects and arrays a notebook's JSON may open ({ and [ bytes, those in strings included):
parsed, each costs tens of times its bytes, so a small file of empty values takes gigabytes."""
MAX_NOTEBOOK_ELEMENTS = 500_000
"""Values a notebook's JSON may separate (its commas, those in strings included)."""
"""Text of one cell's outputs shown; more is cut with a note (the source is always whole)."""
_ID = re.compile(r"[^A-Za-z0-9_.-]")
_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True)
class NotebookView:
    """What Read shows of a notebook."""

    text: str
    images: tuple[ImageContent, ...]
    cells: int


def _joined(value: Any) -> str:
    """A notebook text field: a string, or a list of lines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(item for item in value if isinstance(item, str))
    return ""


def cell_id(cell: dict[str, Any], index: int) -> str:
    """The id Read shows and NotebookEdit takes: the cell's own, made safe, or cell-N."""
    raw = cell.get("id")
    made = _ID.sub("", raw)[:64] if isinstance(raw, str) else ""
    return made or f"cell-{index}"


def _output(output: Any) -> tuple[str, ImageContent | None]:
    if not isinstance(output, dict):
        return "", None
    kind = output.get("output_type")
    if kind == "stream":
        return _joined(output.get("text")), None
    if kind == "error":
        name, value = output.get("ename", ""), output.get("evalue", "")
        return f"{name}: {value}" if name else _joined(output.get("traceback")), None
    data = output.get("data")
    if not isinstance(data, dict):
        return "", None
    for media_type in _IMAGE_TYPES:
        encoded = data.get(media_type)
        if isinstance(encoded, str | list):
            try:
                raw = base64.b64decode(_joined(encoded), validate=False)
            except (binascii.Error, ValueError):
                continue
            if len(raw) <= MAX_IMAGE_BYTES and sniff_image(raw[:16]) == media_type:
                return _joined(data.get("text/plain")), ImageContent(
                    media_type=media_type, data=raw
                )
    return _joined(data.get("text/plain")), None


def refuse_unbounded(path: object, size: int, data: bytes | None = None) -> None:
    """ToolError when parsing a notebook of `size` bytes (`data`, once loaded) could cost far
    more than its size."""
    if size > MAX_NOTEBOOK_BYTES:
        raise ToolError(
            f"{path} is a notebook of {size} bytes, more than the {MAX_NOTEBOOK_BYTES} bytes "
            "tooljail parses as one. Read its JSON in parts with offset and limit, or use Grep "
            "to find the cells you need; change it with Edit."
        )
    if data is not None and (
        data.count(b"{") + data.count(b"[") > MAX_NOTEBOOK_VALUES
        or data.count(b",") > MAX_NOTEBOOK_ELEMENTS
    ):
        raise ToolError(
            f"{path} holds more than {MAX_NOTEBOOK_VALUES} JSON objects and arrays or "
            f"{MAX_NOTEBOOK_ELEMENTS} values, more than tooljail parses as a notebook. Read its "
            "JSON in parts with offset and limit, or use Grep to find the cells you need; change "
            "it with Edit."
        )


def nesting_depth(document: Any) -> int:
    """How deeply `document`'s objects and arrays nest (without recursion: any depth)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        items = value.values() if isinstance(value, dict) else value
        deepest = max(deepest, depth)
        stack.extend((item, depth + 1) for item in items if isinstance(item, dict | list))
    return deepest if isinstance(document, dict | list) else 0


def view_notebook(data: bytes) -> NotebookView | None:
    """The notebook in `data`, or None when it is not one."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        return None
    parts: list[str] = []
    images: list[ImageContent] = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict):
            continue
        kind = cell.get("cell_type") if cell.get("cell_type") in ("code", "markdown") else "raw"
        parts.append(f'<cell id="{cell_id(cell, index)}" type="{kind}">')
        parts.append(_joined(cell.get("source")))
        texts: list[str] = []
        for output in cell.get("outputs") or []:
            text, image = _output(output)
            if text:
                texts.append(text.rstrip("\n"))
            if image is not None:
                images.append(image)
                texts.append(f"[image {len(images)}: {image.media_type}, shown below]")
        if texts:
            shown = "\n".join(texts)
            if len(shown) > MAX_OUTPUT_CHARS:
                cut = len(shown) - MAX_OUTPUT_CHARS
                shown = shown[:MAX_OUTPUT_CHARS] + f"\n[... {cut} characters of output cut]"
            parts.append(f"<output>\n{shown}\n</output>")
        parts.append("</cell>")
    return NotebookView(text="\n".join(parts), images=tuple(images), cells=len(cells))
