"""The store of results kept whole (daemon/calls/kept_outputs.py): its directory is the daemon's
alone and emptied at start, names cannot leave a session's folder, each session has its share,
and the preview keeps to the room it is given."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from daemon.calls.kept_outputs import KeptOutput, KeptOutputs, preview
from daemon.sessions.session import Session


def session(session_id: str = "ses_1") -> Session:
    return Session(id=session_id, workspace=Path("/w"))


async def test_the_directory_is_private_and_emptied_at_start(tmp_path: Path) -> None:
    root = tmp_path / "outputs"
    kept = KeptOutputs(root, per_session_bytes=1 << 20)
    kept.prepare()
    saved = await kept.keep(session(), "toolu_1", "x" * 100)
    assert saved is not None and saved.path.read_text() == "x" * 100
    assert root.stat().st_mode & 0o777 == 0o700 and saved.path.stat().st_mode & 0o777 == 0o600
    KeptOutputs(root, per_session_bytes=1 << 20).prepare()
    assert list(root.iterdir()) == [], "an earlier run's outputs survived a restart"


def test_a_linked_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "outputs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError, match="symbolic link"):
        KeptOutputs(tmp_path / "outputs", per_session_bytes=1).prepare()


@pytest.mark.parametrize("hostile", ["../../etc/x", "a/b", "..", "x" * 500, "é\x00"])
async def test_names_stay_inside_the_sessions_folder(tmp_path: Path, hostile: str) -> None:
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=1 << 20)
    kept.prepare()
    saved = await kept.keep(session(hostile), hostile, "data")
    assert saved is not None
    assert saved.path.parent.parent == kept.root and saved.path.parent == kept.folder(hostile)
    assert len(saved.path.name) < 100 and len(saved.path.parent.name) < 100
    assert kept.folder("a/b") != kept.folder("a_b"), "two sessions would share a folder"


async def test_each_session_has_its_share_even_under_concurrent_calls(tmp_path: Path) -> None:
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=1000)
    kept.prepare()
    first = session("ses_1")
    saved = await asyncio.gather(*(kept.keep(first, f"t{n}", "y" * 300) for n in range(6)))
    assert sum(s is not None for s in saved) == 3
    assert await kept.keep(session("ses_2"), "t", "y" * 300) is not None, "share shared"


async def test_a_closed_session_keeps_nothing_more(tmp_path: Path) -> None:
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=1000)
    kept.prepare()
    mine = session()
    assert await kept.keep(mine, "t", "y" * 300) is not None
    mine.closed = True
    kept.remove_session(mine.id)
    assert not kept.folder(mine.id).exists()
    assert await kept.keep(mine, "t", "y" * 300) is None, "a closed session kept an output"
    assert not kept.folder(mine.id).exists(), "its folder came back"


async def test_all_sessions_together_stay_under_the_total(tmp_path: Path) -> None:
    kept = KeptOutputs(
        tmp_path / "outputs", per_session_bytes=1000, total_bytes=2500, principal_share=1
    )
    kept.prepare()
    saved = [await kept.keep(session(f"s{n}"), "t", "y" * 900) for n in range(5)]
    assert sum(s is not None for s in saved) == 2


async def test_a_file_already_there_is_never_overwritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=1 << 20)
    kept.prepare()
    mine = session("s")
    first = await kept.keep(mine, "t", "one")
    assert first is not None
    # Names are random: plant a link at every name the next write could take.
    monkeypatch.setattr("daemon.calls.kept_outputs.secrets.token_hex", lambda n: "0" * (2 * n))
    os.symlink("/etc/passwd", kept.folder("s") / "00000000-t.txt")
    assert await kept.keep(mine, "t", "two") is None, "wrote through a planted link"
    assert Path("/etc/passwd").read_text() != "two"


@pytest.mark.parametrize("room", [200, 1_000, 5_000, 30_000])
def test_the_preview_keeps_to_its_room(room: int) -> None:
    text = "".join(f"line {n}\n" for n in range(10_000))
    saved = KeptOutput(
        path=Path("/state/outputs/ses_1/1-toolu.txt"), chars=len(text), size_bytes=len(text)
    )
    shown = preview(saved, text, room)
    assert len(shown) <= max(room, 700)
    assert str(saved.path) in shown and shown.endswith("</persisted-output>")
    if room >= 5_000:
        assert "line 0\n" in shown and "line 9999\n" in shown


async def test_one_principals_sessions_keep_at_most_its_share_of_the_total(tmp_path: Path) -> None:
    """Attacker rounds 141 and 142: one tenant's sessions filled the daemon's whole total, and
    every other tenant's results over their budget were cut instead of kept."""
    kept = KeptOutputs(tmp_path / "outputs", per_session_bytes=1000, total_bytes=2000)
    kept.prepare()
    hers = [Session(id=f"ses_m{n}", workspace=Path("/w"), owner="mallory") for n in range(4)]
    saved = [await kept.keep(s, "t", "y" * 600) for s in hers]
    assert sum(s is not None for s in saved) == 1, "more than half of the total for one principal"
    alice = Session(id="ses_a", workspace=Path("/w"), owner="alice")
    assert await kept.keep(alice, "t", "y" * 600) is not None
    # A closed session's share goes back to its principal.
    kept.remove_session(hers[0].id)
    assert await kept.keep(hers[1], "t", "y" * 600) is not None
