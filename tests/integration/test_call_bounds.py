"""One call cannot starve the others: per-call bounds, checked before the work, with a real daemon
(the real OPA; the real Docker sandbox for Edit). The daemon runs in this process, so the memory a
call makes it hold is measured with tracemalloc across every thread."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from daemon.config import OpaSettings
from daemon.tools.glob.braces import MAX_PATTERNS
from daemon.tools.read import MAX_FILE_BYTES, MAX_LINE_CHARS
from tests.integration.harness import RunningDaemon, running_daemon, text_of

pytestmark = [pytest.mark.integration]


def tool_use(tool_id: str, name: str, **tool_input: object) -> pb.ToolUse:
    use = pb.ToolUse(id=tool_id, name=name)
    use.input.update(tool_input)
    return use


@contextmanager
def peak_bytes() -> Iterator[Callable[[], int]]:
    """The most memory held at once (beyond what was held before) inside the block."""
    tracemalloc.start()
    peak = 0
    try:
        yield lambda: peak
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_nested_braces_in_a_batch_are_an_audited_error_and_the_others_answer(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    (workdir / "a.txt").write_text("alpha\n")
    nested = "{" * 1_365 + ",}" * 1_365  # nested empty alternatives, as deep as a pattern allows
    uses = [
        tool_use("toolu_bounds_r1", "Read", file_path=str(workdir / "a.txt")),
        tool_use("toolu_bounds_g1", "Glob", pattern=nested, path=str(workdir)),
        tool_use("toolu_bounds_g2", "Glob", pattern="*.{txt,md}", path=str(workdir)),
        tool_use("toolu_bounds_l1", "LS", path=str(workdir)),
    ]
    answers = list(host_daemon.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses)))
    assert [a.result.tool_use_id for a in answers] == [u.id for u in uses]
    assert [a.result.is_error for a in answers] == [False, True, False, False]
    assert f"more than {MAX_PATTERNS} alternatives" in text_of(answers[1])
    assert text_of(answers[2]) == str(workdir / "a.txt")
    [record] = [r for r in host_daemon.audit_lines() if r["tool_use_id"] == "toolu_bounds_g1"]
    assert (record["tool"], record["is_error"]) == ("Glob", True)


def test_a_huge_line_is_read_cut_without_decoding_it(
    host_daemon: RunningDaemon, workdir: Path
) -> None:
    path = workdir / "one-line.txt"
    size = MAX_FILE_BYTES - 1
    path.write_bytes(b"q" * (size - 1) + b"\n")
    with peak_bytes() as peak:
        response = host_daemon.execute("Read", {"file_path": str(path), "offset": 1, "limit": 1})
    assert not response.result.is_error, text_of(response)
    assert text_of(response) == (
        "     1\t" + "q" * MAX_LINE_CHARS + "\n\n(Line 1 is longer than 2000 characters and is "
        "shown cut to its first 2000.)"
    )
    assert peak() < size + (8 << 20), f"the daemon held {peak()} bytes to show 2,000 characters"


@pytest.mark.docker
def test_replace_all_over_the_size_limit_is_refused_before_any_work(
    sandbox_daemon: RunningDaemon, sandbox_dir: Path
) -> None:
    target = sandbox_dir / "many.txt"
    target.write_text("x" * 40_000)
    assert not sandbox_daemon.execute("Read", {"file_path": str(target)}).result.is_error
    with peak_bytes() as peak:
        response = sandbox_daemon.execute(
            "Edit",
            {
                "file_path": str(target),
                "old_string": "x",
                "new_string": "y" * 1_000,
                "replace_all": True,
            },
        )
    assert response.result.is_error
    assert text_of(response).startswith(
        "Replacing all 40000 occurrences would make the file 40000000 bytes, more than the "
        f"{MAX_FILE_BYTES} bytes the file tools handle; nothing was changed."
    )
    assert response.report.sandbox_id == "", "a container was used for a refused edit"
    assert peak() < 8 << 20, f"the daemon held {peak()} bytes for a refused edit"
    assert target.read_text() == "x" * 40_000


@pytest.mark.filterwarnings("ignore:Sending a large body:ResourceWarning")
def test_a_14_megabyte_write_of_accented_text_is_decided_in_the_default_time(
    short_tmp: Path,
) -> None:
    """The policy document of a Write holding 7 million "é" is 14 MB; escaped to ASCII it would
    be 44 MB, and OPA reading that takes longer than the default timeout."""
    workspace = short_tmp / "ws-accents"
    workspace.mkdir()
    default_timeout = OpaSettings().timeout_s
    with running_daemon(
        workspace,
        short_tmp / "accents.sock",
        sandbox={"enabled": False},
        opa={"timeout_s": default_timeout},
    ) as daemon:
        content = ("é" * 99 + "\n") * 70_000
        response = daemon.execute(
            "Write", {"file_path": str(workspace / "é.txt"), "content": content}
        )
    assert response.decision.outcome == pb.ALLOW, text_of(response)
