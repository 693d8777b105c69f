"""The string-based path checks agree with pathlib's definition on every absolute path."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from hypothesis import given
from hypothesis import strategies as st

from daemon.host.confine import is_inside
from daemon.tools.read import LINE_FORMAT, format_line
from daemon.tools.summaries import shown_path

_PART = st.sampled_from(["ws", "w", "ws2", "a", "b", "ws.d", "..", "."])
_ABSOLUTE = st.lists(_PART, max_size=5).map(lambda parts: Path("/", *parts))


@given(_ABSOLUTE, _ABSOLUTE)
def test_is_inside_is_the_parent_relation(workspace: Path, path: Path) -> None:
    assert is_inside(workspace, path) == (path == workspace or workspace in path.parents)


@given(_ABSOLUTE, _ABSOLUTE)
def test_shown_path_is_relative_exactly_inside(workspace: Path, path: Path) -> None:
    shown = shown_path(path, workspace)
    if path == workspace:
        assert shown == "."
    elif workspace in path.parents:
        assert shown == PurePosixPath(path).relative_to(workspace).as_posix()
    else:
        assert shown == str(path)


def test_a_sibling_with_the_same_prefix_is_outside() -> None:
    assert not is_inside(Path("/srv/ws"), Path("/srv/ws2/file"))
    assert shown_path(Path("/srv/ws2/file"), Path("/srv/ws")) == "/srv/ws2/file"
    assert is_inside(Path("/"), Path("/etc/passwd"))
    assert shown_path(Path("/etc/passwd"), Path("/")) == "etc/passwd"


@given(st.integers(min_value=1, max_value=10**9), st.text(max_size=50))
def test_format_line_is_the_documented_format(number: int, text: str) -> None:
    assert format_line(number, text) == LINE_FORMAT.format(number=number, text=text)
