"""Result budgets: a tool_result never exceeds its budget in characters, whatever the tool produced.

Over budget, the text keeps its head and tail (or only its head, for listings where the first
entries matter most), cut on line boundaries where a line ends close enough to the cut, with a
marker saying how much was cut. The marker counts inside the budget. Python strings are sequences
of code points, so a cut can never split a UTF-8 sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from daemon.images import MAX_RESULT_IMAGE_BYTES, MAX_RESULT_IMAGES, sniff_image
from daemon.models import ContentBlock, ImageContent, TextContent

#: How far (as a fraction of the kept part) a cut may move back to land on a line boundary.
LINE_SNAP_FRACTION = 0.1
#: Smallest budget we honour; below it even the marker would not fit.
MIN_BUDGET = 200
#: Hook notes may take at most this share of a result's budget; the tool's output gets the rest.
NOTES_SHARE = 0.25
_NOTES_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class BudgetedText:
    """The outcome of fitting text into a budget."""

    text: str
    truncated: bool
    original_chars: int


def _marker(cut_chars: int, cut_lines: int, budget: int) -> str:
    lines = f" ({cut_lines:,} lines)" if cut_lines else ""
    return (
        f"\n\n[... {cut_chars:,} characters{lines} cut here to fit the {budget:,}-character "
        "result budget; narrow the request (offset/limit, a more specific pattern, head_limit, "
        "or less output) to see them ...]\n\n"
    )


def _snap_head(text: str, end: int) -> int:
    """Move a head cut back to just after a newline, if one is near."""
    newline = text.rfind("\n", max(0, end - int(end * LINE_SNAP_FRACTION) - 1), end)
    return newline + 1 if newline >= 0 else end


def _snap_tail(text: str, start: int) -> int:
    """Move a tail cut forward to just after a newline, if one is near."""
    window = int((len(text) - start) * LINE_SNAP_FRACTION) + 1
    newline = text.find("\n", start, min(len(text), start + window))
    return newline + 1 if newline >= 0 else start


def fit_text(
    text: str, budget: int, keep: Literal["head_tail", "head"] = "head_tail"
) -> BudgetedText:
    """Cut `text` so that the result, marker included, has at most `budget` characters (never
    less than MIN_BUDGET)."""
    return _fit(text, max(budget, MIN_BUDGET), keep)


def _fit(text: str, budget: int, keep: Literal["head_tail", "head"]) -> BudgetedText:
    """Cut `text` to exactly at most `budget` characters: with a marker where one fits, else
    (a room smaller than the marker) to its head alone."""
    original = len(text)
    if original <= budget:
        return BudgetedText(text=text, truncated=False, original_chars=original)

    # The marker's own length depends on the numbers in it; size it for the worst case first.
    reserve = len(_marker(original, text.count("\n"), budget))
    if reserve > budget:
        return BudgetedText(text=text[: max(budget, 0)], truncated=True, original_chars=original)
    room = budget - reserve
    if keep == "head":
        head_end = _snap_head(text, room)
        tail_start = original
    else:
        head_end = _snap_head(text, room - room // 2)
        tail_start = _snap_tail(text, original - room // 2)
    cut = text[head_end:tail_start]
    result = text[:head_end] + _marker(len(cut), cut.count("\n"), budget) + text[tail_start:]
    return BudgetedText(text=result, truncated=True, original_chars=original)


def fit_content(
    blocks: list[ContentBlock], budget: int, keep: Literal["head_tail", "head"] = "head_tail"
) -> tuple[tuple[ContentBlock, ...], BudgetedText]:
    """Fit the text of `blocks` into the budget; images are kept when they are what they claim
    and within the result's image limits (daemon.images), else named in a note.

    All text blocks are joined into one, so the budget holds for the result as a whole.
    """
    return _fit_content(blocks, max(budget, MIN_BUDGET), keep)


def _fit_content(
    blocks: list[ContentBlock], budget: int, keep: Literal["head_tail", "head"]
) -> tuple[tuple[ContentBlock, ...], BudgetedText]:
    text = "".join(b.text for b in blocks if isinstance(b, TextContent))
    images, refused = _admitted_images([b for b in blocks if isinstance(b, ImageContent)])
    if refused:
        text = text + ("\n" if text else "") + refused
    fitted = _fit(text, budget, keep)
    out: list[ContentBlock] = [TextContent(text=fitted.text)] if text or not images else []
    out.extend(images)
    return tuple(out), fitted


def _admitted_images(images: list[ImageContent]) -> tuple[list[ImageContent], str]:
    """The images a result may carry (their bytes are what they claim, within the count and
    size limits), and a note on the others ("" when none was left out)."""
    kept: list[ImageContent] = []
    total = 0
    mislabelled = over = 0
    for image in images:
        size = len(image.data)
        if sniff_image(image.data[:16]) != image.media_type:
            mislabelled += 1
        elif len(kept) >= MAX_RESULT_IMAGES or total + size > MAX_RESULT_IMAGE_BYTES:
            over += 1
        else:
            kept.append(image)
            total += size
    notes = []
    if mislabelled:
        notes.append(f"{mislabelled} image block(s) whose bytes are not the image type claimed")
    if over:
        notes.append(
            f"{over} image block(s) past the limit of {MAX_RESULT_IMAGES} images or "
            f"{MAX_RESULT_IMAGE_BYTES} bytes per result"
        )
    return kept, f"[Left out: {'; '.join(notes)}.]" if notes else ""


def fit_with_notes(
    blocks: list[ContentBlock],
    notes: Sequence[str],
    budget: int,
    keep: Literal["head_tail", "head"] = "head_tail",
) -> tuple[tuple[ContentBlock, ...], BudgetedText]:
    """Like `fit_content`, with notes (from hooks) after the output: the notes are cut to their
    share of the budget first and the output fits in what is left, so a long output cut to its
    head never loses them. The BudgetedText describes the output alone."""
    if not notes:
        return fit_content(blocks, budget, keep)
    budget = max(budget, MIN_BUDGET)
    shown = _fit(_NOTES_SEPARATOR.join(notes), int(budget * NOTES_SHARE), "head").text
    room = budget - len(shown) - len(_NOTES_SEPARATOR)
    content, fitted = _fit_content(blocks, room, keep)
    first = content[0] if content else None
    if isinstance(first, TextContent):
        if not first.text:
            return (TextContent(text=shown), *content[1:]), fitted
        joined = TextContent(text=first.text + _NOTES_SEPARATOR + shown)
        return (joined, *content[1:]), fitted
    return (*content, TextContent(text=shown)), fitted
