"""Images in tool results: what a tool may hand the model, checked by their bytes.

Read sends image files; operator tools and MCP servers may send image blocks too, whose bytes
come from programs the daemon does not trust. Every result keeps only images whose leading bytes
are the format they claim, at most MAX_RESULT_IMAGES of them and MAX_RESULT_IMAGE_BYTES in all:
more would be unbounded memory, and a response past the gRPC size limit that no retry can get.
"""

from __future__ import annotations

MAX_IMAGE_BYTES = 3_750_000
"""Larger images are refused rather than returned as an image block."""
MAX_RESULT_IMAGES = 8
MAX_RESULT_IMAGE_BYTES = 5_000_000
"""Image bytes one result may carry (they travel twice, and base64 in the JSON block)."""

_IMAGE_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image(head: bytes) -> str | None:
    """The image MIME type from the leading bytes, or None."""
    for magic, media_type in _IMAGE_MAGIC:
        if head.startswith(magic):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None
