"""A policy document as the bytes OPA reads: encoded once (in a worker thread when it is large),
then both sent and, when small, hashed as the decision cache's key."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any


class LargeDocument(dict[str, Any]):
    """A policy document holding a large tool input (daemon.json_values.is_large): encoding it
    takes the event loop tens of milliseconds, so it is encoded in a worker thread."""


@dataclass(frozen=True)
class EncodedDocument:
    """A policy document as the JSON body OPA is sent, `{"input": document}`, UTF-8 encoded."""

    body: bytes


def encode_document(document: dict[str, Any]) -> EncodedDocument:
    """`document` as OPA's request body. UTF-8 rather than \\u escapes: an escaped non-ASCII
    character is six bytes for OPA to read instead of two or three. A lone surrogate (a file name
    that is not UTF-8) has no UTF-8 form, so such a document is sent escaped instead."""
    try:
        encoded = json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        encoded = json.dumps(document, separators=(",", ":")).encode("ascii")
    return EncodedDocument(b'{"input":' + encoded + b"}")


async def encoded(document: dict[str, Any]) -> EncodedDocument:
    """`encode_document`, off the event loop for a LargeDocument."""
    if isinstance(document, LargeDocument):
        return await asyncio.to_thread(encode_document, document)
    return encode_document(document)
