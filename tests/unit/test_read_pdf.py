"""Read of a PDF: the text of each page, a page range, the default first pages, and hostile or
broken files answered with a clear error by the limited extractor process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from daemon.host.turns import PrincipalTurns
from daemon.tools import pdf as pdf_module
from daemon.tools.read import ReadTool
from tests.unit.fake_sandbox import make_context, run_summarized, run_tool, text_of
from tests.unit.pdf_maker import pdf_with_pages


def write(tmp_path: Path, data: bytes, name: str = "doc.pdf") -> Path:
    path = (tmp_path / name).resolve()
    path.write_bytes(data)
    return path


async def test_every_page_comes_with_its_number(tmp_path: Path) -> None:
    path = write(tmp_path, pdf_with_pages(["Alpha page", "Beta page", "Gamma page"]))
    output, summary = await run_summarized(
        ReadTool(), {"file_path": str(path)}, make_context(tmp_path)
    )
    text = text_of(output)
    assert not output.is_error, text
    assert text.startswith(f"PDF {path}: 3 pages; pages 1-3 below.")
    assert '<page number="1">\nAlpha page\n</page>' in text
    assert '<page number="3">\nGamma page\n</page>' in text
    assert summary == "Read PDF doc.pdf (pages 1-3 of 3)"


async def test_a_page_range_and_what_is_left(tmp_path: Path) -> None:
    path = write(tmp_path, pdf_with_pages([f"Text of page {n}" for n in range(1, 26)]))
    ctx = make_context(tmp_path)
    first = text_of(await run_tool(ReadTool(), {"file_path": str(path)}, ctx))
    assert "pages 1-10 below" in first and "Text of page 10" in first
    assert "Text of page 11" not in first
    assert "[15 more pages: Read again with pages='11-25'.]" in first
    one = text_of(await run_tool(ReadTool(), {"file_path": str(path), "pages": "12"}, ctx))
    assert '<page number="12">\nText of page 12\n</page>' in one and "page 13" not in one
    tail = text_of(await run_tool(ReadTool(), {"file_path": str(path), "pages": "20-"}, ctx))
    assert "pages 20-25 below" in tail and "more pages" not in tail


@pytest.mark.parametrize(
    ("pages", "message"),
    [
        ("abc", "is not a page range"),
        ("0-2", "pages are numbered from 1"),
        ("1-30", "Read shows at most 20 at a time"),
        ("7", "is past the end: the PDF has 2 pages"),
    ],
)
async def test_bad_page_ranges_say_what_to_give(tmp_path: Path, pages: str, message: str) -> None:
    path = write(tmp_path, pdf_with_pages(["a", "b"]))
    output = await run_tool(
        ReadTool(), {"file_path": str(path), "pages": pages}, make_context(tmp_path)
    )
    assert output.is_error and message in text_of(output), text_of(output)


async def test_pages_on_a_text_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, b"plain\n", "notes.txt")
    output = await run_tool(
        ReadTool(), {"file_path": str(path), "pages": "1"}, make_context(tmp_path)
    )
    assert output.is_error and "pages applies to PDF files only" in text_of(output)


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\nthis is not really a pdf at all\n",
        pdf_with_pages(["x"])[:200],
        # A content stream that claims to be enormous.
        b"%PDF-1.4\n1 0 obj\n<< /Length 99999999999 >>\nstream\nabc\nendstream\nendobj\n",
    ],
    ids=["garbage", "truncated", "huge-length"],
)
async def test_broken_pdfs_get_a_clear_error(tmp_path: Path, data: bytes) -> None:
    path = write(tmp_path, data)
    output = await run_tool(ReadTool(), {"file_path": str(path)}, make_context(tmp_path))
    assert output.is_error
    assert text_of(output).startswith(f"Cannot read the text of {path} as a PDF:"), text_of(output)


def _bomb() -> bytes:
    """A first page whose content stream inflates to 1.5 GB of text operators."""
    squeezer = zlib.compressobj(9)
    chunk = b"BT /F1 12 Tf 20 250 Td (bomb) Tj ET\n" * (1 << 19)
    packed = b"".join(squeezer.compress(chunk) for _ in range(80)) + squeezer.flush()
    return pdf_with_pages(["x", "the second page"], deflated=packed)


async def test_a_decompression_bomb_is_stopped_by_the_extractors_limits(tmp_path: Path) -> None:
    path = write(tmp_path, _bomb())
    ctx = make_context(tmp_path)
    output = await run_tool(ReadTool(), {"file_path": str(path)}, ctx)
    text = text_of(output)
    # Refused (the extractor's own limits, or the memory cap), never the daemon's memory.
    assert output.is_error and text.startswith(f"Cannot read the text of {path} as a PDF:"), text[
        :300
    ]
    # A range past the bomb still reads.
    after = await run_tool(ReadTool(), {"file_path": str(path), "pages": "2"}, ctx)
    assert "the second page" in text_of(after), text_of(after)[:300]


async def test_each_principal_extracts_one_pdf_at_a_time_and_all_a_few() -> None:
    """Attacker round 136: a 9 KB PDF costs its extractor 30 s of CPU, and one tenant's 16
    Reads at once took the host's cores from every other tenant. One extraction at a time per
    principal, a few at a time in all, first come first served."""
    turns = PrincipalTurns(2)
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    together = most_together = 0
    order: list[str] = []

    async def one(who: str) -> None:
        nonlocal together, most_together
        async with turns.turn(who):
            order.append(who)
            running[who] = running.get(who, 0) + 1
            together += 1
            most[who] = max(most.get(who, 0), running[who])
            most_together = max(most_together, together)
            await asyncio.sleep(0.02)
            running[who] -= 1
            together -= 1

    await asyncio.gather(*(one(who) for who in ("mallory",) * 6 + ("alice", "bob") * 2))
    assert most == {"mallory": 1, "alice": 1, "bob": 1}
    assert most_together == 2
    assert order.index("alice") < 2 and order.index("bob") < 3  # not behind all of mallory's


async def test_a_pdf_read_takes_its_principals_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken: list[str] = []
    real = pdf_module.TURNS.turn

    def recording(who: str) -> Any:
        taken.append(who)
        return real(who)

    monkeypatch.setattr(pdf_module.TURNS, "turn", recording)
    path = write(tmp_path, pdf_with_pages(["Alpha page"]))
    ctx = make_context(tmp_path)
    assert "Alpha page" in text_of(await run_tool(ReadTool(), {"file_path": str(path)}, ctx))
    assert taken == [ctx.session.owner]


def test_the_extractor_runs_at_the_lowest_priority() -> None:
    """What CPU a hostile PDF takes comes after every other tenant's work (round 136)."""
    worker = Path(pdf_module.__file__).with_name("pdf_worker.py")
    code = (
        f"import os, runpy; ns = runpy.run_path({str(worker)!r}); ns['_limit'](); "
        "print(os.getpriority(os.PRIO_PROCESS, 0))"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "19", done.stderr


async def test_one_tenants_slow_pdf_never_holds_another_tenants_back() -> None:
    """Attacker round 137: on two cores the daemon allowed one extraction at a time in all, so
    each of another tenant's PDF Reads waited for one of the attacker's 30-second ones."""
    both = asyncio.Event()
    inside: set[str] = set()

    async def hold(who: str) -> None:
        async with pdf_module.TURNS.turn(who):
            inside.add(who)
            if len(inside) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), timeout=5)

    await asyncio.gather(hold("mallory"), hold("alice"))


async def test_a_principal_may_hold_several_turns_when_told_and_others_still_get_theirs() -> None:
    """Searches take turns too (attacker round 141), a few per principal: a principal holds at
    most its own number, and another's call is not queued behind all of them."""
    turns = PrincipalTurns(3, per_principal=2)
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    order: list[str] = []

    async def one(who: str) -> None:
        async with turns.turn(who):
            order.append(who)
            running[who] = running.get(who, 0) + 1
            most[who] = max(most.get(who, 0), running[who])
            await asyncio.sleep(0.02)
            running[who] -= 1

    await asyncio.gather(*(one(who) for who in ("mallory",) * 6 + ("alice",)))
    assert most == {"mallory": 2, "alice": 1}
    assert order.index("alice") < 3
