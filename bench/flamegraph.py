"""A flame graph (SVG) of collapsed stacks, as py-spy's raw format writes them: one box per frame,
as wide as its samples, callers below their callees; hovering a box names it with its share.

The SVG is self-contained (no script), so it renders on a repository page as an image.
"""

from __future__ import annotations

import html
import zlib
from dataclasses import dataclass, field

from bench.profile import stack_frames

WIDTH = 1200
ROW = 16
#: Boxes narrower than this many pixels are left out (a few samples each; they only add noise).
MIN_WIDTH_PX = 0.5
FONT_PX = 11
#: About how wide one character of the label font is, to cut labels to their box.
CHAR_PX = 6.5


@dataclass
class _Node:
    samples: int = 0
    children: dict[str, _Node] = field(default_factory=dict)


def _tree(collapsed: str) -> _Node:
    root = _Node()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        node, n = root, int(count)
        node.samples += n
        for frame in stack_frames(stack):
            node = node.children.setdefault(frame, _Node())
            node.samples += n
    return root


def _depth(node: _Node) -> int:
    return 1 + max((_depth(child) for child in node.children.values()), default=0)


def _color(frame: str) -> str:
    """Warm colours, stable per function name (the same function has the same colour in every
    graph), and bluish for native frames."""
    seed = zlib.crc32(frame.encode())
    if ".so" in frame or "(<" in frame:
        return f"rgb({80 + seed % 60},{140 + seed % 70},{200 + seed % 50})"
    return f"rgb({220 + seed % 35},{90 + (seed >> 8) % 120},{40 + (seed >> 16) % 50})"


def render_svg(collapsed: str, title: str) -> str:
    """The flame graph of `collapsed` as an SVG document."""
    root = _tree(collapsed)
    rows = _depth(root) - 1
    height = (rows + 3) * ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="{FONT_PX}">',
        f'<rect width="{WIDTH}" height="{height}" fill="#fdfdf8"/>',
        f'<text x="{WIDTH / 2}" y="{ROW}" text-anchor="middle" font-size="{FONT_PX + 2}">'
        f"{html.escape(title)} ({root.samples} samples)</text>",
    ]
    if root.samples:
        scale = WIDTH / root.samples
        _boxes(root, 0.0, height - 2 * ROW, scale, root.samples, parts)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _boxes(node: _Node, x: float, y: float, scale: float, total: int, out: list[str]) -> None:
    for frame, child in sorted(node.children.items()):
        width = child.samples * scale
        if width >= MIN_WIDTH_PX:
            share = child.samples / total
            label = frame if len(frame) * CHAR_PX < width - 4 else frame[: int(width / CHAR_PX)]
            tip = html.escape(f"{frame}: {child.samples} samples, {share:.1%}")
            out.append(
                f'<g><title>{tip}</title><rect x="{x:.2f}" y="{y}" width="{width:.2f}" '
                f'height="{ROW - 1}" fill="{_color(frame)}" rx="2"/>'
                + (
                    f'<text x="{x + 2:.2f}" y="{y + ROW - 4}">{html.escape(label)}</text>'
                    if len(label) > 2
                    else ""
                )
                + "</g>"
            )
            _boxes(child, x, y - ROW, scale, total, out)
        x += width
