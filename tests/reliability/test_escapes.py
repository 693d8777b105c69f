"""Escapes through the host-side tools (Read, Glob, Grep, LS), each attempted for real: `..`,
absolute paths, symlinks (also swapped in while a call runs), /proc and hard links. Each must fail
and say why; nothing outside the workspace may be read."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from tests.integration.harness import RunningDaemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.support import execute, scaled, text_of
from tests.reliability.swaps import Flipper, symlink

pytestmark = pytest.mark.integration

SECRET = "SECRET-c41d outside the workspace"
ROOT_ENTRY = "root:x:0:0"


@pytest.fixture(scope="module")
def outside(rel_tmp: Path) -> Path:
    """A folder beside the workspaces (same file system), holding a secret."""
    folder = rel_tmp / "outside"
    folder.mkdir(exist_ok=True)
    (folder / "secret.txt").write_text(SECRET + "\n")
    (folder / "only-outside.txt").write_text(SECRET + "\n")
    # The name the symlink races read inside (race/d/f.txt): a swap makes it this file.
    (folder / "f.txt").write_text(SECRET + "\n")
    return folder


# --- host-side tools: Read, Glob, Grep, LS -----------------------------------------------------


def _host_cases(ws: Path, outside: Path) -> list[tuple[str, str, dict[str, Any], str]]:
    """(case, tool, input, a phrase the refusal must contain)."""
    secret = outside / "secret.txt"
    file_link = symlink(ws / "link-file", secret)
    dir_link = symlink(ws / "link-dir", outside)
    proc_link = symlink(ws / "link-proc", "/proc/self/root/etc/passwd")
    up_dir = f"{ws}/{os.path.relpath(outside, ws)}"  # .../ws/../../outside
    symlink(ws / "link-relative", os.path.relpath(secret, ws))
    up = f"{up_dir}/secret.txt"
    out = "outside the workspace"
    return [
        ("Read ..", "Read", {"file_path": up}, out),
        ("Read absolute", "Read", {"file_path": str(secret)}, out),
        ("Read /etc/passwd", "Read", {"file_path": "/etc/passwd"}, out),
        ("Read symlink to a file", "Read", {"file_path": str(file_link)}, out),
        ("Read relative symlink", "Read", {"file_path": f"{ws}/link-relative"}, out),
        ("Read through a dir symlink", "Read", {"file_path": f"{dir_link}/secret.txt"}, out),
        ("Read /proc/self/root", "Read", {"file_path": f"/proc/self/root{secret}"}, out),
        ("Read symlink to /proc", "Read", {"file_path": str(proc_link)}, out),
        ("Read /proc/self/cwd", "Read", {"file_path": "/proc/self/cwd/pyproject.toml"}, out),
        ("Read /proc/self/fd/0", "Read", {"file_path": "/proc/self/fd/0"}, out),
        ("Read /dev/stdin", "Read", {"file_path": "/dev/stdin"}, out),
        (
            "Glob ..",
            "Glob",
            {"pattern": f"{os.path.relpath(outside, ws)}/*", "path": str(ws)},
            "'..'",
        ),
        ("Glob outside path", "Glob", {"pattern": "*", "path": str(outside)}, out),
        ("Glob absolute pattern", "Glob", {"pattern": f"{outside}/*"}, out),
        ("Glob dir symlink", "Glob", {"pattern": "*", "path": str(dir_link)}, out),
        (
            "Glob /proc/self/root",
            "Glob",
            {"pattern": "*", "path": f"/proc/self/root{outside}"},
            out,
        ),
        ("Grep outside path", "Grep", {"pattern": "SECRET", "path": str(outside)}, out),
        ("Grep ..", "Grep", {"pattern": "SECRET", "path": up_dir}, out),
        ("LS ..", "LS", {"path": up_dir}, out),
        ("Grep dir symlink", "Grep", {"pattern": "SECRET", "path": str(dir_link)}, out),
        ("Grep file symlink", "Grep", {"pattern": "SECRET", "path": str(file_link)}, out),
        ("LS outside", "LS", {"path": str(outside)}, out),
        ("LS dir symlink", "LS", {"path": str(dir_link)}, out),
        ("LS /proc/self/root", "LS", {"path": "/proc/self/root/"}, out),
    ]


def test_read_only_tools_cannot_reach_outside(
    rel_host: RunningDaemon, host_dir: Path, outside: Path, record: Record
) -> None:
    cases = _host_cases(host_dir, outside)
    held: list[str] = []
    failures: list[str] = []
    for case, tool, tool_input, phrase in cases:
        answer = execute(rel_host.stub, tool, tool_input)
        text = text_of(answer)
        leaked = SECRET in text or ROOT_ENTRY in text or "only-outside" in text
        if answer.result.is_error and phrase in text and not leaked:
            held.append(case)
        else:
            failures.append(f"{case}: {text[:300]}")
    record("Read/Glob/Grep/LS outside the workspace", len(cases), len(held))
    assert not failures, failures


def test_searching_the_workspace_does_not_follow_symlinks_out(
    rel_host: RunningDaemon, host_dir: Path, outside: Path, record: Record
) -> None:
    symlink(host_dir / "link-file", outside / "secret.txt")
    symlink(host_dir / "link-dir", outside)
    (host_dir / "inside.txt").write_text("inside\n")
    answers = [
        execute(rel_host.stub, "Grep", {"pattern": "SECRET", "path": str(host_dir)}),
        execute(
            rel_host.stub,
            "Grep",
            {"pattern": "SECRET", "path": str(host_dir), "output_mode": "content", "glob": "**"},
        ),
        execute(rel_host.stub, "Glob", {"pattern": "**/*", "path": str(host_dir)}),
        execute(rel_host.stub, "Glob", {"pattern": "**/secret.txt", "path": str(host_dir)}),
        execute(rel_host.stub, "LS", {"path": str(host_dir)}),
    ]
    clean = [a for a in answers if SECRET not in text_of(a) and "only-outside" not in text_of(a)]
    record("searches over symlinks that point out", len(answers), len(clean))
    assert len(clean) == len(answers), [text_of(a) for a in answers]
    assert "No matches found" in text_of(answers[0])
    assert "inside.txt" in text_of(answers[2]) and "secret.txt" not in text_of(answers[3])


def test_a_hard_link_made_on_the_host_reads_like_any_file_inside(
    rel_host: RunningDaemon, host_dir: Path, outside: Path, figure: Figure
) -> None:
    """Documented limitation: confinement is by path. A hard link is the file itself, so one
    that somebody with access to the host made inside the workspace is read like any other file
    there. The sandbox cannot make one (see the Bash test: EXDEV across its mounts)."""
    source = outside / "hard-source.txt"
    source.write_text("content of an inode that also lives outside\n")
    (host_dir / "hard.txt").hardlink_to(source)
    answer = execute(rel_host.stub, "Read", {"file_path": str(host_dir / "hard.txt")})
    assert answer.decision.outcome == pb.ALLOW
    assert "also lives outside" in text_of(answer)
    figure("hard links", "a host-made hard link inside the workspace is read (limitation)")


# --- swapping symlinks while calls run ---------------------------------------------------------


def _race_folder(base: Path, outside: Path) -> Path:
    """base/d is a real directory with f.txt; base/swap links to the outside folder, which has
    f.txt (and only-outside.txt) holding the secret. The flipper swaps d and swap."""
    (base / "d").mkdir(parents=True)
    (base / "d" / "f.txt").write_text("inside content\n")
    (base / "d" / "only-inside.txt").write_text("inside content\n")
    symlink(base / "swap", outside)
    return base / "d"


RACE_CASES: list[Any] = [
    pytest.param("Read", lambda d: {"file_path": f"{d}/f.txt"}, id="Read"),
    pytest.param("Glob", lambda d: {"pattern": "*", "path": str(d)}, id="Glob"),
    pytest.param("LS", lambda d: {"path": str(d)}, id="LS"),
    pytest.param(
        "Grep",
        lambda d: {"pattern": "content|SECRET", "path": str(d), "output_mode": "content"},
        id="Grep directory",
    ),
    pytest.param(
        "Grep",
        lambda d: {"pattern": "content|SECRET", "path": f"{d}/f.txt", "output_mode": "content"},
        id="Grep file",
    ),
]


@pytest.mark.timeout(1800 if scaled(0, 1) else 180)
@pytest.mark.parametrize(("tool", "make_input"), RACE_CASES)
def test_a_symlink_swapped_in_while_reading_never_leads_outside(
    rel_host: RunningDaemon,
    host_dir: Path,
    outside: Path,
    tool: str,
    make_input: Callable[[Path], dict[str, Any]],
    record: Record,
    figure: Figure,
    request: pytest.FixtureRequest,
) -> None:
    target = _race_folder(host_dir / "race", outside)
    tool_input = make_input(target)
    attempts = scaled(300, 5000)
    seen: Counter[str] = Counter()
    with Flipper(target, host_dir / "race" / "swap") as flipper:
        for _ in range(attempts):
            try:
                answer = execute(rel_host.stub, tool, tool_input, timeout=60)
            except grpc.RpcError as exc:
                seen[f"status {exc.code().name}"] += 1
                continue
            text = text_of(answer)
            if SECRET in text or "only-outside" in text:
                seen["LEAKED"] += 1
                break  # one escape is enough to prove it
            if "this is a tooljail bug" in text:
                seen["internal error"] += 1
            elif answer.result.is_error:
                seen["refused"] += 1
            else:
                seen["read inside"] += 1
    tried = sum(seen.values())
    record("symlink swapped during Read/Glob/LS/Grep", tried, tried - seen["LEAKED"])
    figure(
        f"symlink race, {request.node.callspec.id}",
        f"{tried} calls during {flipper.flips} swaps: {dict(seen)}",
    )
    assert seen["LEAKED"] == 0, f"{tool} read outside the workspace: {dict(seen)}"
    assert seen["read inside"] > 0, "the race never let a read through: it proved nothing"
    # A path that changes under a call is an is_error result that says so, never a crash.
    crashes = {k: v for k, v in seen.items() if k.startswith("status") or k == "internal error"}
    assert not crashes, f"imprecise answers while the path changed: {crashes}"
