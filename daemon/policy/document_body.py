"""A policy document as the bytes OPA reads: encoded once (in a worker thread when it is large),
then both sent and, when small, hashed as the decision cache's key."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from daemon.json_values import json_pieces


class LargeDocument(dict[str, Any]):
    """A policy document holding a large tool input (daemon.json_values.is_large): encoding it
    takes the event loop tens of milliseconds, so it is encoded in a worker thread."""


@dataclass(frozen=True)
class EncodedDocument:
    """A policy document as the JSON body OPA is sent, `{"input": document}`, UTF-8 encoded."""

    body: bytes | bytearray


def encode_document(document: dict[str, Any]) -> EncodedDocument:
    """`document` as OPA's request body. UTF-8 rather than \\u escapes: an escaped non-ASCII
    character is six bytes for OPA to read instead of two or three. A lone surrogate (a file name
    that is not UTF-8) has no UTF-8 form, so such a document is sent escaped instead. Built a
    piece at a time into one buffer: a large input's JSON text is never held twice (control
    characters are six bytes each however it is encoded: attacker round 106). Only a
    LargeDocument is looked over for its large parts: any other holds a small tool input."""
    body = bytearray(b'{"input":')
    large = None if isinstance(document, LargeDocument) else False
    try:
        for piece in json_pieces(document, large=large):
            body += piece.encode("utf-8")
    except UnicodeEncodeError:
        body = bytearray(b'{"input":')
        body += json.dumps(document, separators=(",", ":")).encode("ascii")
    body += b"}"
    # A bytearray is not copied again into bytes: for a large input that copy is the whole body.
    return EncodedDocument(body)


async def encoded(document: dict[str, Any]) -> EncodedDocument:
    """`encode_document`, off the event loop for a LargeDocument."""
    if isinstance(document, LargeDocument):
        return await asyncio.to_thread(encode_document, document)
    return encode_document(document)
