"""PDFs as Read shows them: the text of each page, for a range of pages (`pages`, e.g. "3" or
"1-5"), at most `MAX_PAGES` at a time, extracted in a limited child process (pdf_worker) that
the kernel confines to reading the interpreter's own files (daemon.host.landlock)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import ToolError, ToolInputError
from daemon.host.child import run_child
from daemon.host.landlock import HELPER_NAME, NOT_CONFINED_EXIT, confined_python
from daemon.host.turns import PrincipalTurns

MAX_PAGES = 20
"""Pages one Read shows at most."""
DEFAULT_PAGES = 10
"""Pages shown without a `pages` range."""
TIMEOUT_S = 40.0
_WORKER = Path(__file__).resolve().with_name("pdf_worker.py")


TURNS = PrincipalTurns(max(2, len(os.sched_getaffinity(0))))
"""Whose PDF is extracted now: one at a time per principal (attacker round 136: a 9 KB PDF
costs its extractor 30 s of CPU, and one tenant's 16 Reads at once took the cores from every
other tenant), as many in all as the daemon has cores, two at least, so that one principal's
slow one never holds another's back (round 137: one slot on two cores did). Each runs at the
lowest priority: what they take is left over by everything else."""
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d*)\s*)?$")


@dataclass(frozen=True)
class PdfPage:
    number: int
    text: str
    cut: bool = False


@dataclass(frozen=True)
class PdfView:
    """What Read shows of a PDF."""

    total_pages: int
    pages: tuple[PdfPage, ...]
    asked: bool
    """A page range was given (else the first pages were shown by default)."""


def page_range(pages: str | None) -> tuple[int, int]:
    """`pages` as (first, last), 1-based and inclusive; ToolInputError when malformed."""
    if pages is None:
        return 1, DEFAULT_PAGES
    found = _RANGE.match(pages)
    if found is None:
        raise ToolInputError(
            f"pages {pages!r} is not a page range: give one page ('3') or a range ('1-5')."
        )
    first = int(found.group(1))
    last = int(found.group(2)) if found.group(2) else (first if "-" not in pages else 0)
    last = last or first + MAX_PAGES - 1
    if first < 1 or last < first:
        raise ToolInputError(f"pages {pages!r} is not a page range: pages are numbered from 1.")
    if last - first + 1 > MAX_PAGES:
        raise ToolInputError(
            f"pages {pages!r} asks for {last - first + 1} pages; Read shows at most {MAX_PAGES} "
            f"at a time (e.g. '{first}-{first + MAX_PAGES - 1}')."
        )
    return first, last


async def read_pdf(data: bytes, pages: str | None, shown_as: str, principal: str) -> PdfView:
    """The text of the asked pages of the PDF in `data`, in `principal`'s turn (`TURNS`)."""
    first, last = page_range(pages)
    # A parser bug must not read the host as the daemon's account (root, often): round 117.
    worker = await confined_python(str(_WORKER))
    async with TURNS.turn(principal):
        run = await run_child(
            [*worker, str(first), str(last)],
            input_data=data,
            timeout_s=TIMEOUT_S,
            output_cap=MAX_PAGES * 500_000,
            cwd="/",
            env={"PATH": os.defpath, "LANG": "C.UTF-8"},
        )
    why = ""
    if run.exit_code == NOT_CONFINED_EXIT and run.stderr.text().startswith(HELPER_NAME):
        raise ToolError(
            f"Cannot read the text of {shown_as} as a PDF: the text extractor could not be "
            f"confined, so it did not run ({run.stderr.text().strip()[:300]}). Inspect it with "
            "Bash (e.g. `pdftotext` if the sandbox has it, or `strings`), and tell the operator."
        )
    if run.timed_out or run.exit_code == -9 or run.exit_code == -24:
        why = "extracting its text took too long"
    elif run.exit_code != 0:
        why = f"the text extractor failed (exit {run.exit_code})"
    answer = {}
    if not why:
        try:
            answer = json.loads(run.stdout.text())
        except ValueError:
            why = "the text extractor gave no usable answer"
    why = why or answer.get("error", "")
    if why:
        raise ToolError(
            f"Cannot read the text of {shown_as} as a PDF: {why}. Inspect it with Bash (e.g. "
            "`pdftotext` if the sandbox has it, or `strings`)."
        )
    total = int(answer["pages"])
    if total and first > total:
        raise ToolInputError(f"pages {pages!r} is past the end: the PDF has {total} pages.")
    shown = tuple(PdfPage(p["number"], p["text"], bool(p["cut"])) for p in answer["text"])
    return PdfView(total_pages=total, pages=shown, asked=pages is not None)


def render_pdf(view: PdfView, shown_as: str) -> str:
    """The pages as the model reads them, with what is left to read."""
    if not view.pages:
        return f"{shown_as} is a PDF with no pages."
    first, last = view.pages[0].number, view.pages[-1].number
    parts = [f"PDF {shown_as}: {view.total_pages} pages; pages {first}-{last} below."]
    for page in view.pages:
        text = page.text.strip() or "(no text on this page: it may be scanned; no OCR here)"
        if page.cut:
            text += "\n[... the rest of this page's text was cut]"
        parts.append(f'<page number="{page.number}">\n{text}\n</page>')
    if last < view.total_pages:
        following = f"{last + 1}-{min(last + MAX_PAGES, view.total_pages)}"
        parts.append(
            f"[{view.total_pages - last} more pages: Read again with pages='{following}'.]"
        )
    return "\n".join(parts)
