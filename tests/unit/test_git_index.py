"""The gitlinks of real indexes git wrote, in every version and form the reader takes, and what
it refuses (the host's git makes the repositories)."""

from __future__ import annotations

import hashlib
import struct
import subprocess
from pathlib import Path

import pytest

from daemon.host.git_index import UnreadableIndex, read_index


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
         "-c", "protocol.file.allow=always", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with two submodules (one deep) among ordinary files."""
    lib = tmp_path / "lib"
    lib.mkdir()
    git(lib, "init", "-q")
    git(lib, "commit", "-q", "--allow-empty", "-m", "lib")
    main = tmp_path / "main"
    (main / "src").mkdir(parents=True)
    git(main, "init", "-q")
    for name in ("a.txt", "src/b.py", "src/very-long-name-" + "x" * 80 + ".txt"):
        (main / name).write_text(name)
    git(main, "add", ".")
    git(main, "submodule", "add", "-q", str(lib), "vendor/lib")
    git(main, "submodule", "add", "-q", str(lib), "z")
    git(main, "commit", "-qm", "main")
    return main


def gitlinks(repo: Path) -> tuple[str, ...]:
    return read_index((repo / ".git" / "index").read_bytes()).gitlinks


def test_version_2_names_the_submodules(repo: Path) -> None:
    assert (repo / ".git" / "index").read_bytes()[4:8] == b"\0\0\0\2"
    assert gitlinks(repo) == ("vendor/lib", "z")


def test_version_3_with_extended_entries(repo: Path) -> None:
    (repo / "new.txt").write_text("new")
    git(repo, "add", "-N", "new.txt")  # intent to add: an extended flag, so version 3
    assert (repo / ".git" / "index").read_bytes()[4:8] == b"\0\0\0\3"
    assert gitlinks(repo) == ("vendor/lib", "z")


def test_version_4_with_compressed_names(repo: Path) -> None:
    git(repo, "update-index", "--index-version", "4")
    assert (repo / ".git" / "index").read_bytes()[4:8] == b"\0\0\0\4"
    assert gitlinks(repo) == ("vendor/lib", "z")


def test_a_split_index_names_its_shared_part(repo: Path) -> None:
    git(repo, "update-index", "--split-index")
    index = read_index((repo / ".git" / "index").read_bytes())
    shared = repo / ".git" / f"sharedindex.{index.shared}"
    assert index.shared and shared.exists()
    both = (*index.gitlinks, *read_index(shared.read_bytes()).gitlinks)
    assert set(both) == {"vendor/lib", "z"}


def test_a_sha256_repository(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "--object-format=sha256", "r")
    (tmp_path / "r" / "a").write_text("a")
    git(tmp_path / "r", "add", "a")
    git(tmp_path / "r", "update-index", "--add", "--cacheinfo", f"160000,{'1' * 64},sub")
    data = (tmp_path / "r" / ".git" / "index").read_bytes()
    assert read_index(data, 32).gitlinks == ("sub",)
    with pytest.raises(UnreadableIndex):
        read_index(data, 20)


@pytest.mark.parametrize(
    "data",
    [b"", b"DIRC", b"XXXX\0\0\0\2\0\0\0\0", b"DIRC\0\0\0\5\0\0\0\0", b"DIRC\0\0\0\2\0\0\0\1"],
)
def test_what_is_not_an_index_is_refused(data: bytes) -> None:
    with pytest.raises(UnreadableIndex):
        read_index(data)


def test_a_cut_index_is_refused_wherever_it_is_cut(repo: Path) -> None:
    data = (repo / ".git" / "index").read_bytes()
    entries_end = 12 + 3 * 70  # somewhere inside the entries
    for cut in range(13, entries_end, 7):
        with pytest.raises(UnreadableIndex):
            read_index(data[:cut])


def entry(
    name: bytes, *, mode: int = 0o100644, strip: int | None = None, full: int | None = None
) -> bytes:
    """One hand-made entry: version 4 (`strip` given, prefix-compressed; `full`, the whole
    name's length, which its flags record) or 2 (padded)."""
    fixed = b"\0" * 24 + struct.pack(">I", mode) + b"\0" * 12 + b"\1" * 20
    flags = struct.pack(">H", min(len(name) if full is None else full, 0xFFF))
    if strip is not None:
        return fixed + flags + bytes([strip]) + name + b"\0"
    body = fixed + flags + name
    return body + b"\0" * (8 - len(body) % 8)


def index(version: int, *entries: bytes) -> bytes:
    return b"DIRC" + struct.pack(">II", version, len(entries)) + b"".join(entries) + b"\0" * 20


def test_hand_made_entries_read_as_git_writes_them() -> None:
    gitlink = 0o160000
    two = index(2, entry(b"a.txt"), entry(b"sub", mode=gitlink))
    assert read_index(two).gitlinks == ("sub",)
    four = index(4, entry(b"lib/one", strip=0), entry(b"two", mode=gitlink, strip=3, full=7))
    assert read_index(four).gitlinks == ("lib/two",)


def test_a_version_4_name_shorter_than_its_recorded_length_is_refused() -> None:
    """Attacker round 133: a name ended by a NUL before the length its flags record; git reads
    the whole length (the NUL included) and so one more entry than this reader did, which
    then took the real last entry, a submodule, for an extension."""
    gitlink = 0o160000
    hidden = entry(b"src/app.py\0hidden", strip=0)[:-1]  # git's length: both parts
    assert struct.unpack_from(">H", hidden, 60)[0] == len(b"src/app.py\0hidden")
    crafted = index(4, hidden + b"\0", entry(b"zz-vendor", mode=gitlink, strip=17, full=9))
    with pytest.raises(UnreadableIndex):
        read_index(crafted)


def test_bytes_after_the_entries_that_are_no_extensions_are_refused() -> None:
    """What does not parse as extensions up to the checksum may be entries git reads."""
    whole = index(2, entry(b"a.txt"))
    read_index(whole)
    with pytest.raises(UnreadableIndex, match="do not end"):
        read_index(whole[:-20] + b"TREE\0\0\0\0xyz" + b"\0" * 20)
    with pytest.raises(UnreadableIndex, match="past the end"):
        read_index(whole[:-20] + b"TREE\0\0\1\0" + b"\0" * 20)


def test_names_longer_than_any_path_are_refused_not_built() -> None:
    """A crafted version 4 index whose every entry grows the name by a little would make
    reading it quadratic; a name past any path's length ends the read at once."""
    growing = index(
        4,
        entry(b"x" * 200, strip=0),
        *(entry(b"y" * 100, strip=0, full=200 + 100 * (n + 1)) for n in range(40)),
    )
    with pytest.raises(UnreadableIndex, match="longer than any path"):
        read_index(growing)
    without_end = b"DIRC" + struct.pack(">II", 2, 1) + entry(b"a")[:62] + b"n" * 10_000
    with pytest.raises(UnreadableIndex, match="longer than any path"):
        read_index(without_end)


def test_an_index_git_wrote_for_threaded_reading_is_read(repo: Path) -> None:
    """index.threads makes git write an entry offset table and an end-of-entries marker."""
    for version in ("2", "4"):
        (repo / f"v{version}.txt").write_text(version)
        git(repo, "-c", "index.threads=3", "add", f"v{version}.txt")
        git(repo, "-c", "index.threads=3", "update-index", "--index-version", version)
        data = (repo / ".git" / "index").read_bytes()
        assert b"IEOT" in data and b"EOIE" in data
        assert read_index(data).gitlinks == ("vendor/lib", "z")


def _with_extensions(
    entries: bytes, count: int, version: int, *extensions: bytes, marked: bytes = b""
) -> bytes:
    """A whole index: an end-of-entries marker pointing where the entries end (or, with
    `marked`, at that extension header inside the first extension's data) with the headers of
    the extensions from there hashed in, and the file's checksum, as git checks both."""
    head = b"DIRC" + struct.pack(">II", version, count) + entries
    chain = [marked] if marked else extensions
    marker_hash = hashlib.sha1(b"".join(e[:8] for e in chain)).digest()
    at = len(head) + (8 if marked else 0)
    body = head + b"".join(extensions) + b"EOIE" + struct.pack(">II", 24, at) + marker_hash
    return body + hashlib.sha1(body).digest()


def _offset_table(*blocks: tuple[int, int]) -> bytes:
    data = struct.pack(">I", 1) + b"".join(struct.pack(">II", *b) for b in blocks)
    return b"IEOT" + struct.pack(">I", len(data)) + data


def test_an_offset_table_naming_a_hidden_submodule_is_refused(tmp_path: Path) -> None:
    """git reading with threads (a repository's own index.threads) reads each block where the
    offset table says: here the second at a submodule entry inside an extension git ignores, so
    git sees a submodule that the entries read in sequence do not hold."""
    first, second = entry(b"a.txt"), entry(b"b.txt")
    hidden = entry(b"sub", mode=0o160000)
    entries = first + second
    ignored_at = 12 + len(entries)
    ignored = b"ZZZZ" + struct.pack(">I", len(hidden)) + hidden
    table = _offset_table((12, 1), (ignored_at + 8, 1))
    data = _with_extensions(entries, 2, 2, ignored, table)
    git(tmp_path, "init", "-q", "r")
    (tmp_path / "r" / ".git" / "index").write_bytes(data)
    seen = git(tmp_path / "r", "-c", "index.threads=3", "ls-files", "-s")
    assert "160000" in seen and "sub" in seen  # what git reads with threads
    assert "sub" not in git(tmp_path / "r", "-c", "index.threads=1", "ls-files", "-s")
    with pytest.raises(UnreadableIndex, match="offset table"):
        read_index(data)
    honest = _with_extensions(entries, 2, 2, ignored, _offset_table((12, 1), (12 + len(first), 1)))
    assert read_index(honest).gitlinks == ()


def test_an_offset_table_that_does_not_cover_the_entries_is_refused() -> None:
    first, second = entry(b"a.txt"), entry(b"b.txt")
    for blocks in (((12, 1),), ((12, 1), (12 + len(first), 2)), ((12, 0), (12, 2))):
        data = _with_extensions(first + second, 2, 2, _offset_table(*blocks))
        with pytest.raises(UnreadableIndex, match="offset table"):
            read_index(data)


def test_a_version_4_block_building_on_the_name_before_it_is_refused() -> None:
    """Read alone, a block's first entry has no name before it: git and a reader in sequence
    would build different names (a plain file for one, a submodule's path for the other)."""
    first = entry(b"lib/one", strip=0)
    keeps_prefix = entry(b"two", mode=0o160000, strip=3, full=7)  # "lib/two" in sequence
    table = _offset_table((12, 1), (12 + len(first), 1))
    with pytest.raises(UnreadableIndex, match="offset table"):
        read_index(_with_extensions(first + keeps_prefix, 2, 4, table))
    starts_anew = entry(b"lib/two", mode=0o160000, strip=7)
    honest = _with_extensions(first + starts_anew, 2, 4, table)
    assert read_index(honest).gitlinks == ("lib/two",)


def test_an_end_marker_pointing_elsewhere_is_refused(tmp_path: Path) -> None:
    """git reading with threads takes the extensions from where the end-of-entries marker says:
    here a split index's `link` that the extensions read in sequence do not hold."""
    entries = entry(b"a.txt")
    link = b"link" + struct.pack(">I", 20 + 8) + b"\x11" * 20 + b"\0" * 8
    ignored = b"ZZZZ" + struct.pack(">I", len(link)) + link
    data = _with_extensions(entries, 1, 2, ignored, marked=link)
    git(tmp_path, "init", "-q", "r")
    (tmp_path / "r" / ".git" / "index").write_bytes(data)
    threaded = subprocess.run(
        ["git", "-C", str(tmp_path / "r"), "-c", "index.threads=3", "ls-files"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "link extension" in threaded.stderr  # git read the `link` the marker leads to
    assert git(tmp_path / "r", "-c", "index.threads=1", "ls-files") == "a.txt\n"
    with pytest.raises(UnreadableIndex, match="end-of-entries"):
        read_index(data)
