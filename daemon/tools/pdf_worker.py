"""PDF text extraction for Read, run as a child process (`python -I pdf_worker.py FIRST LAST`,
under daemon.host.landlock's wrapper): the PDF arrives on stdin, the pages' text leaves as one
JSON object on stdout. It imports nothing of the daemon's.

A PDF is model-controlled input and parsers have bugs, so the work happens here, not in the
daemon: the kernel lets this process read only the interpreter's own files (no workspace, no
configuration, no socket). Before it reads a byte it takes the lowest CPU priority and limits
its address space and CPU time, and no file may be written. The daemon also kills it at a
deadline.
"""

from __future__ import annotations

import io
import json
import os
import resource
import sys
from typing import Any

MEMORY_BYTES = 1 << 30
CPU_SECONDS = 30
MAX_PAGE_CHARS = 100_000
"""Text kept of one page (Read's budget would not show more anyway)."""


def _limit() -> None:
    # Its CPU after everyone else's (attacker round 136: a small PDF costs 30 s of it).
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def extract(data: bytes, first: int, last: int) -> dict[str, Any]:
    """Pages `first` to `last` (1-based, inclusive; clamped to the document) and the count."""
    from pypdf import PdfReader  # imported under the limits, like everything that parses

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        return {"error": "the PDF is encrypted with a password"}
    total = len(reader.pages)
    pages = []
    for number in range(first, min(last, total) + 1):
        text = reader.pages[number - 1].extract_text() or ""
        cut = len(text) > MAX_PAGE_CHARS
        pages.append({"number": number, "text": text[:MAX_PAGE_CHARS], "cut": cut})
    return {"pages": total, "text": pages}


def main(argv: list[str]) -> int:
    _limit()
    first, last = int(argv[1]), int(argv[2])
    data = sys.stdin.buffer.read()
    try:
        answer = extract(data, first, last)
    except MemoryError:
        answer = {"error": "extracting its text needed more memory than allowed"}
    except Exception as exc:  # noqa: BLE001 - any parser failure is an answer, not a crash
        answer = {"error": f"it could not be parsed ({type(exc).__name__}: {str(exc)[:300]})"}
    sys.stdout.write(json.dumps(answer, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
