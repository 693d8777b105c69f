"""One ripgrep walk for several Grep calls: each call gets exactly what a search alone lists."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.host.landlock import Confined, find_helper
from daemon.models import TextContent
from daemon.tools.contract import CallContext, ToolOutput
from daemon.tools.grep import shared as grep_shared
from daemon.tools.grep.input import GrepInput, build_argv, scope_flags
from daemon.tools.grep.tool import GrepTool
from daemon.tools.peers import Peers
from tests.unit.fake_sandbox import make_context, run_summarized

pytestmark = pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep (rg) is not installed")


def unconfined(program: str) -> Confined:
    """`program` through the confinement wrapper, allowed to read and run everything: the
    wrapper's other work (entering the search root, --chdir-fd, the identity a search runs as)
    without its rules, the same for both sides."""
    wrapper = (find_helper(), "--keep-cap", "dac_read_search", "--read", "/", "--exec", "/")
    return Confined((*wrapper, "--", program), ())


RG = unconfined(shutil.which("rg") or "rg")
TOOL = GrepTool()
PATTERNS = [
    "alpha",
    "beta",
    "Beta",
    r"^def\s+\w+",
    "alpha|gamma",
    r"\d+$",
    "é",
    "nothing_matches_this",
    "(?i)ALPHA",
    "return beta",
    r"\bx\b",
    "line$",
]


def put(root: Path, rel: str, data: bytes | str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)


@pytest.fixture
def tree(workspace: Path) -> Path:
    """Files that make a line-based shortcut go wrong if it is not exact."""
    put(workspace, "src/a.py", "def alpha():\n    return beta\n")
    put(workspace, "src/b.py", "class Beta:\n    ALPHA = 1\n")
    put(workspace, "src/crlf.txt", b"alpha line\r\nend line\r\n")
    put(workspace, "src/latin1.txt", b"caf\xe9 alpha\nno line feed at the end: beta")
    put(workspace, "src/utf16.txt", "gamma alpha 12\n".encode("utf-16"))
    put(workspace, "src/num.py", "x = 42\ny = 7\n")
    put(workspace, "docs/readme.md", "Alpha Beta gamma, café\n")
    put(workspace, ".hidden/h.py", "alpha hidden\n")
    put(workspace, ".ignore", "ignored/\n")
    put(workspace, "ignored/i.py", "alpha ignored\n")
    put(workspace, "bin/starts_binary.bin", b"\0alpha\n")
    put(workspace, ".git/config", "alpha in git\n")
    return workspace


def alone(root: Path, args: GrepInput, target: str = ".") -> set[str]:
    """What a search of its own lists (the argv Grep runs when it searches alone)."""
    done = subprocess.run(
        build_argv(RG, args, target), cwd=root, capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    return set(done.stdout.splitlines())


async def shared(
    root: Path, args: GrepInput, patterns: list[str], target: str = "."
) -> list[set[str]] | None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = await grep_shared.files_per_pattern(
            RG, fd, target, scope_flags(args), patterns, bool(args.ignore_case)
        )
    finally:
        os.close(fd)
    return None if found is None else [set(files) for files in found]


@pytest.mark.parametrize(
    "scope",
    [{}, {"-i": True}, {"glob": "*.py"}, {"type": "py"}, {"glob": "src/**"}],
    ids=["plain", "ignore-case", "glob", "type", "folder-glob"],
)
async def test_each_pattern_gets_the_files_a_search_alone_lists(
    tree: Path, scope: dict[str, object]
) -> None:
    found = await shared(tree, GrepInput.model_validate({"pattern": "x", **scope}), PATTERNS)
    assert found is not None
    for pattern, files in zip(PATTERNS, found, strict=True):
        expected = alone(tree, GrepInput.model_validate({"pattern": pattern, **scope}))
        assert files == expected, pattern
    assert any(found), "the tree must give the patterns something to find"


async def test_a_single_file_target_is_shared_too(tree: Path) -> None:
    found = await shared(tree / "src", GrepInput(pattern="x"), PATTERNS, "./a.py")
    assert found is not None
    for pattern, files in zip(PATTERNS, found, strict=True):
        assert files == alone(tree / "src", GrepInput(pattern=pattern), "./a.py"), pattern


async def test_a_file_cut_short_as_binary_after_a_match_is_not_shared(tree: Path) -> None:
    put(tree, "late.bin", b"alpha\n" + b"x\n" * 150_000 + b"\0beta\n")
    assert await shared(tree, GrepInput(pattern="x"), ["alpha", "beta"]) is None


async def test_a_bad_pattern_is_not_shared(tree: Path) -> None:
    assert await shared(tree, GrepInput(pattern="x"), ["alpha", "("]) is None
    assert await shared(tree, GrepInput(pattern="x"), ["(", "alpha"]) is None


async def test_a_ripgrep_warning_is_not_shared(tree: Path) -> None:
    put(tree, "src/.ignore", "{broken\n")  # ripgrep warns about the glob and goes on
    assert await shared(tree, GrepInput(pattern="x"), ["alpha", "beta"]) is None


async def test_too_much_output_is_not_shared(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(grep_shared, "MAX_SHARED_OUTPUT_BYTES", 100)
    assert await shared(tree, GrepInput(pattern="x"), ["alpha", "beta"]) is None


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    contents=st.lists(
        st.lists(st.sampled_from(["ab", "ba", "a", "B", "1", " ", "é", "\r", "x_y"]), max_size=6),
        min_size=1,
        max_size=6,
    ),
    patterns=st.lists(
        st.sampled_from(["a", "ab", "^b", "a$", r"\d", "[ab]+ ", "(?i)b", "é", r"\w_\w", "x|1"]),
        min_size=2,
        max_size=5,
    ),
    ignore_case=st.booleans(),
)
def test_random_trees_and_patterns_agree_with_searches_alone(
    workspace: Path, contents: list[list[str]], patterns: list[str], ignore_case: bool
) -> None:
    root = workspace / f"t{abs(hash((tuple(map(tuple, contents)), tuple(patterns))))}"
    for index, pieces in enumerate(contents):
        put(root, f"d{index % 2}/f{index}.txt", "\n".join(pieces).encode())
    scope = GrepInput.model_validate({"pattern": "x", "-i": ignore_case})
    found = asyncio.run(shared(root, scope, patterns))
    assert found is not None
    for pattern, files in zip(patterns, found, strict=True):
        args = GrepInput.model_validate({"pattern": pattern, "-i": ignore_case})
        assert files == alone(root, args), pattern
    shutil.rmtree(root)


def text(output: ToolOutput) -> str:
    return "".join(b.text for b in output.content if isinstance(b, TextContent))


async def test_parallel_grep_calls_share_one_walk_and_answer_as_alone(tree: Path) -> None:
    inputs = [
        {"pattern": "alpha"},
        {"pattern": "beta", "head_limit": 1},
        {"pattern": "gamma", "offset": 1},
        {"pattern": "alpha", "output_mode": "content"},  # not shareable: searches alone
        {"pattern": "beta", "-i": True},  # another case rule: a cohort of its own
    ]
    solo = [await run_summarized(TOOL, raw, make_context(tree)) for raw in inputs]
    peers = Peers(range(len(inputs)), wait_s=60)
    contexts: list[CallContext] = []
    for index in range(len(inputs)):
        ctx = make_context(tree)
        ctx.peers = peers.handle(index)
        contexts.append(ctx)
    together = await asyncio.gather(
        *(run_summarized(TOOL, raw, ctx) for raw, ctx in zip(inputs, contexts, strict=True))
    )
    for (alone_output, _), (shared_output, _) in zip(solo, together, strict=True):
        assert text(shared_output) == text(alone_output)
        assert not shared_output.is_error
    summaries = [summary for _, summary in together]
    assert [("one search shared with 2 other Grep calls" in s) for s in summaries] == [
        True,
        True,
        True,
        False,
        False,
    ], summaries


async def test_output_that_is_not_ripgrep_json_is_not_shared(tree: Path, tmp_path: Path) -> None:
    impostor = tmp_path / "rg"
    impostor.write_text("#!/bin/sh\necho 'not json'\n")
    impostor.chmod(0o755)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = await grep_shared.files_per_pattern(
            unconfined(str(impostor)), fd, ".", ["--glob=!.git"], ["alpha", "beta"], False
        )
    finally:
        os.close(fd)
    assert found is None


async def test_one_walk_runs_one_ripgrep_at_a_time(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 143: a walk took one search turn and then ran a ripgrep per pattern all
    at once, ten per turn, each with an automaton of its own (2.5 GB, and both cores, for four
    batches). The turn stands for one ripgrep: they run one after the other."""
    running = most = 0
    real = grep_shared._run_json

    async def counting(*args: object, **kwargs: object) -> object:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.01)
            return await real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            running -= 1

    monkeypatch.setattr(grep_shared, "_run_json", counting)
    patterns = ["def [a-z]+", "x.*y", "im?port", "class \\w+"]
    found = await shared(tree, GrepInput.model_validate({"pattern": "x"}), patterns)
    assert found is not None
    assert most == 1
