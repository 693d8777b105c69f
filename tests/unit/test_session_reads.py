"""A session's read-state (what Read saw, for read-before-write) is bounded: attacker round 141
Read 30,000 distinct 3,800-character paths (hard links, free on disk) and the daemon kept about
5.7 KB for each, for good in the default session."""

from __future__ import annotations

from pathlib import Path

from daemon.sessions.session import MAX_READ_PATH_CHARS, MAX_READS_KEPT, Session


def _session(tmp_path: Path) -> Session:
    return Session(id="ses_reads", workspace=tmp_path)


def test_the_read_state_keeps_the_most_recent_reads_within_its_count(tmp_path: Path) -> None:
    session = _session(tmp_path)
    for n in range(MAX_READS_KEPT + 500):
        session.record_read(tmp_path / f"f{n}", b"x", 1)
    assert len(session.reads) == MAX_READS_KEPT
    assert tmp_path / "f0" not in session.reads
    assert tmp_path / f"f{MAX_READS_KEPT + 499}" in session.reads
    # A file read again is the most recent one, kept past older ones.
    session.record_read(tmp_path / "f500", b"x", 1)
    for n in range(10):
        session.record_read(tmp_path / f"g{n}", b"x", 1)
    assert tmp_path / "f500" in session.reads and tmp_path / "f501" not in session.reads


def test_the_read_state_keeps_long_paths_within_its_size(tmp_path: Path) -> None:
    session = _session(tmp_path)
    deep = tmp_path / ("d" * 250) / ("e" * 250) / ("f" * 250)
    for n in range(MAX_READ_PATH_CHARS // 500):
        session.record_read(deep / f"{'x' * 240}{n}", b"x", 1)
    assert sum(len(str(path)) for path in session.reads) <= MAX_READ_PATH_CHARS
    assert deep / f"{'x' * 240}{MAX_READ_PATH_CHARS // 500 - 1}" in session.reads
    session.forget(deep / f"{'x' * 240}{MAX_READ_PATH_CHARS // 500 - 1}")
    session.record_read(tmp_path / "short", b"x", 1)
    assert tmp_path / "short" in session.reads
