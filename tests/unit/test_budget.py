"""The result budget is never exceeded and keeps the head and the tail."""

from __future__ import annotations

from typing import Literal

from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.calls.budget import MIN_BUDGET, fit_content, fit_text, fit_with_notes
from daemon.models import ImageContent, TextContent


def test_text_within_budget_is_unchanged() -> None:
    fitted = fit_text("hello\nworld\n", 1000)
    assert fitted.text == "hello\nworld\n"
    assert not fitted.truncated
    assert fitted.original_chars == 12


def test_over_budget_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    lines = [f"line {i:05d}" for i in range(10_000)]
    text = "\n".join(lines) + "\n"
    fitted = fit_text(text, 2_000)
    assert fitted.truncated
    assert fitted.original_chars == len(text)
    assert len(fitted.text) <= 2_000
    assert fitted.text.startswith("line 00000\nline 00001\n")
    assert fitted.text.endswith("line 09999\n")
    assert "characters" in fitted.text and "cut here" in fitted.text
    # Cuts land on line boundaries: every kept line outside the marker is whole.
    head, _, rest = fitted.text.partition("\n\n[...")
    tail = rest.partition("...]\n\n")[2]
    assert all(line.startswith("line ") and len(line) == 10 for line in head.splitlines())
    assert all(line.startswith("line ") and len(line) == 10 for line in tail.splitlines())


def test_marker_counts_the_cut_exactly() -> None:
    text = "a" * 50_000
    fitted = fit_text(text, 1_000)
    head, _, rest = fitted.text.partition("\n\n[... ")
    count = int(rest.split(" characters", 1)[0].replace(",", ""))
    tail = rest.partition("...]\n\n")[2]
    assert len(head) + count + len(tail) == 50_000


def test_head_mode_keeps_only_the_start() -> None:
    text = "\n".join(f"/ws/file{i}" for i in range(5_000))
    fitted = fit_text(text, 1_000, keep="head")
    assert fitted.text.startswith("/ws/file0\n")
    assert "/ws/file4999" not in fitted.text
    assert len(fitted.text) <= 1_000


def test_multibyte_text_is_cut_on_code_points() -> None:
    text = "é€😀" * 10_000
    fitted = fit_text(text, 1_500)
    assert len(fitted.text) <= 1_500
    fitted.text.encode("utf-8")  # never a split surrogate or a half sequence


def test_content_blocks_are_joined_and_images_kept() -> None:
    image = ImageContent(media_type="image/png", data=b"\x89PNG\r\n\x1a\n")
    blocks, fitted = fit_content(
        [TextContent(text="x" * 3_000), image, TextContent(text="y" * 3_000)], 1_000
    )
    assert fitted.truncated
    assert blocks[-1] == image
    text_blocks = [b for b in blocks if isinstance(b, TextContent)]
    assert len(text_blocks) == 1 and len(text_blocks[0].text) <= 1_000


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(st.characters(codec="utf-8"), max_size=5_000),
    budget=st.integers(min_value=MIN_BUDGET, max_value=3_000),
    keep=st.sampled_from(["head_tail", "head"]),
)
def test_budget_is_never_exceeded(text: str, budget: int, keep: str) -> None:
    fitted = fit_text(text, budget, keep)  # type: ignore[arg-type]
    assert len(fitted.text) <= budget
    assert fitted.truncated == (len(text) > budget)
    if not fitted.truncated:
        assert fitted.text == text
    else:
        assert fitted.text[:1] == text[:1] or fitted.text.startswith("\n\n[...")


# --- hook notes after the output -------------------------------------------------------------


@given(
    output=st.text(max_size=5000),
    notes=st.lists(st.text(min_size=1, max_size=3000), min_size=1, max_size=3),
    budget=st.integers(min_value=MIN_BUDGET, max_value=4000),
    keep=st.sampled_from(["head", "head_tail"]),
)
def test_output_and_notes_together_never_exceed_the_budget(
    output: str, notes: list[str], budget: int, keep: Literal["head", "head_tail"]
) -> None:
    content, _ = fit_with_notes([TextContent(text=output)], notes, budget, keep)
    assert sum(len(b.text) for b in content if isinstance(b, TextContent)) <= budget


def test_a_listing_cut_to_its_head_keeps_the_hooks_note() -> None:
    listing = "\n".join(f"/ws/src/file_{n:05}.py" for n in range(20_000))
    note = "[PostToolUse hook 'lint'] 3 files have lint errors; run `make lint` before editing."
    content, fitted = fit_with_notes([TextContent(text=listing)], [note], 10_000, "head")
    (block,) = content
    assert isinstance(block, TextContent)
    assert fitted.truncated and fitted.original_chars == len(listing)
    assert block.text.startswith("/ws/src/file_00000.py") and block.text.endswith(note)
    assert len(block.text) <= 10_000


def test_notes_beside_an_image_get_a_block_of_their_own() -> None:
    image = ImageContent(media_type="image/png", data=b"\x89PNG\r\n\x1a\n")
    content, _ = fit_with_notes([image], ["look closely"], 1000)
    assert content == (image, TextContent(text="look closely"))


def test_images_are_kept_only_when_they_are_what_they_claim_and_within_the_limits() -> None:
    """An operator tool or MCP server choosing its own image blocks: a 3 MB "png" of text, more
    images than the limit, more bytes than the limit (a response past the gRPC size limit would
    fail on every retry)."""
    from daemon.images import MAX_RESULT_IMAGE_BYTES, MAX_RESULT_IMAGES
    from daemon.models import ImageContent

    png = b"\x89PNG\r\n\x1a\n"
    fake = ImageContent(media_type="image/png", data=b"just text" * 300_000)
    small = [ImageContent(media_type="image/png", data=png + b"%d" % i) for i in range(12)]
    big = ImageContent(media_type="image/png", data=png + b"x" * MAX_RESULT_IMAGE_BYTES)
    blocks, _ = fit_content([TextContent(text="see"), fake, *small, big], 1_000)
    images = [b for b in blocks if isinstance(b, ImageContent)]
    assert len(images) == MAX_RESULT_IMAGES and fake not in images and big not in images
    text = blocks[0].text if isinstance(blocks[0], TextContent) else ""
    assert text.startswith("see\n[Left out: 1 image block(s) whose bytes are not the image")
    assert "5 image block(s) past the limit" in text
