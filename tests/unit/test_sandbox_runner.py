"""The in-container runner, run here on the host as the container would run it (no Docker).

The runner is a standalone script: each test pipes one framed request into `python3 runner.py`
and decodes the framed answer, exactly what the daemon does through the attach socket. Run as
root (as in a container), it runs commands as `--run-as`; the workspace is then given to that
identity, as the daemon's workspaces are.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.protocol import FrameDecoder, encode_frame
from sandbox.runner import RUNNER_SOURCE
from sandbox.runner import runner as runner_module
from tests.runner_imports import HEAVY_MODULES, modules_after_start

#: Who commands run as: as in a container, never root.
IDENTITY = (1000, 1000)
RUN_AS = ["--run-as", f"{IDENTITY[0]}:{IDENTITY[1]}"] if os.geteuid() == 0 else []


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A workspace the command's identity can reach, as a container's is (pytest's own
    temporary folders sit in a root-only directory)."""
    with tempfile.TemporaryDirectory(prefix="tj-runner-") as folder:
        path = Path(folder)
        path.chmod(0o755)
        yield path


@functools.cache
def _mounted_runner() -> Path:
    """The runner's files where the command's identity can read them, as the container's
    read-only mount of them is (a checkout may sit in a folder only root may enter)."""
    folder = Path(tempfile.mkdtemp(prefix="tj-runner-src-"))
    folder.chmod(0o755)
    for source in RUNNER_SOURCE.parent.iterdir():
        if source.is_file():
            shutil.copy(source, folder / source.name)
            (folder / source.name).chmod(0o644)
    atexit.register(shutil.rmtree, folder, True)
    return folder / RUNNER_SOURCE.name


def runner_argv(*args: str) -> list[str]:
    """The runner started as a container starts it."""
    return [sys.executable, "-E", "-s", "-S", str(_mounted_runner()), *RUN_AS, *args]


def owned_by_the_identity(workspace: Path) -> dict[str, Any]:
    """Give the workspace (everything in it) to the command's identity; the request fields that
    name it."""
    if os.geteuid() == 0:
        for path in [workspace, *workspace.rglob("*")]:
            os.lchown(path, *IDENTITY)
    info = workspace.stat()
    return {"workspace": str(workspace), "workspace_id": [info.st_dev, info.st_ino], "pins": []}


def runner_messages(
    request: dict[str, Any], *args: str, cwd: Path | None = None, timeout: float = 60
) -> list[dict[str, Any]]:
    """Send one request to a fresh runner process (started in `cwd`, the workspace, as in a
    container) and return every message it answered with: progress first, the result last."""
    workspace = cwd or Path(tempfile.gettempdir())
    request = {**owned_by_the_identity(workspace), **request} if cwd else request
    done = subprocess.run(
        runner_argv(*args),
        cwd=workspace,
        input=encode_frame(request),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    assert done.stderr == b""
    messages = FrameDecoder(64 << 20).feed(done.stdout)
    assert messages, done.stdout[:200]
    assert [m["type"] for m in messages] == ["progress"] * (len(messages) - 1) + ["result"]
    return messages


def call_runner(
    request: dict[str, Any], *args: str, cwd: Path | None = None, timeout: float = 60
) -> dict[str, Any]:
    """The result message of one request (progress messages before it are checked, then left)."""
    return runner_messages(request, *args, cwd=cwd, timeout=timeout)[-1]


def bash_request(
    command: str, cwd: Path, *, timeout_ms: int = 10_000, limit: int = 1 << 20
) -> dict[str, Any]:
    return {
        "kind": "bash",
        "command": command,
        "cwd": str(cwd),
        "timeout_ms": timeout_ms,
        "output_limit_bytes": limit,
    }


def bash(
    command: str, cwd: Path, *, timeout_ms: int = 10_000, limit: int = 1 << 20
) -> dict[str, Any]:
    workspace = cwd if cwd.exists() else cwd.parent
    request = bash_request(command, cwd, timeout_ms=timeout_ms, limit=limit)
    return call_runner(request, cwd=workspace)


def write(
    path: Path, content: str, expected: str | None = None, *, workspace: Path | None = None
) -> dict[str, Any]:
    request = {
        "kind": "write_file",
        "path": str(path),
        "content": content,
        "expected_sha256": expected,
    }
    return call_runner(request, cwd=workspace or path.parent)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- bash -------------------------------------------------------------------------------------


def test_stdout_and_stderr_are_merged_in_order_with_the_exit_code(tmp_path: Path) -> None:
    result = bash("echo out; echo err >&2; echo out2; exit 3", tmp_path)
    assert result["output"] == "out\nerr\nout2\n"
    assert result["exit_code"] == 3
    assert result["output_bytes"] == len("out\nerr\nout2\n")
    assert result["output_truncated"] is False
    assert result["timed_out"] is False


def test_the_result_carries_the_runner_marks_in_order_on_the_host_clock(tmp_path: Path) -> None:
    before = time.monotonic()
    result = bash("sleep 0.2", tmp_path)
    after = time.monotonic()
    names = [name for name, _ in result["timeline"]]
    times = [at for _, at in result["timeline"]]
    assert names == ["received", "spawned", "exited", "answered"]
    assert before <= times[0] <= times[1] <= times[2] <= times[3] <= after
    assert times[2] - times[1] >= 0.2  # the command's own time lies between spawn and exit


def test_no_output_is_an_empty_string(tmp_path: Path) -> None:
    result = bash("true", tmp_path)
    assert (result["output"], result["output_bytes"], result["exit_code"]) == ("", 0, 0)


def test_runs_in_the_requested_directory_and_reports_where_it_ended(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    result = bash("pwd; cd sub; exit 4", tmp_path)
    assert result["output"] == f"{tmp_path}\n"
    assert result["final_cwd"] == str((tmp_path / "sub").resolve())
    assert result["exit_code"] == 4


def test_a_directory_it_cannot_enter_runs_nothing_and_says_why(tmp_path: Path) -> None:
    """Attacker round 110: another principal sharing the workspace swapped a session's cwd for
    a folder of its own that the session's uid may not enter. Round 111: running the command
    at the root instead ran it where the policy had not judged it (`rm -rf ../<workspace>`
    judged from a subfolder emptied the workspace): nothing runs."""
    result = bash("touch ran-here", tmp_path / "missing")
    assert result["exit_code"] == -1 and "nothing ran" in result["error"]
    assert result["cwd_reset"] == f"{tmp_path / 'missing'}: No such file or directory"
    assert not (tmp_path / "ran-here").exists()
    assert "cwd_reset" not in bash("pwd", tmp_path)


def test_a_missing_workspace_is_an_error_not_a_crash(tmp_path: Path) -> None:
    request = {**bash_request("echo never", tmp_path / "gone"), "workspace": str(tmp_path / "gone")}
    result = call_runner(request, cwd=tmp_path)
    assert "is not mounted here" in result["error"]
    assert result["exit_code"] == -1


def test_syntax_errors_read_exactly_as_bash_reports_them(tmp_path: Path) -> None:
    result = bash("if then", tmp_path)
    assert result["exit_code"] == 2
    assert result["output"].startswith("bash: -c: line 1: syntax error near unexpected token")


def test_the_wrapper_leaves_no_trace_in_the_command_environment(tmp_path: Path) -> None:
    result = bash(
        'echo "[$BASH_ENV]"; ls /proc/$$/fd | sort -n | tr "\\n" " "; echo; bash -c "echo nested"',
        tmp_path,
    )
    lines = result["output"].splitlines()
    assert lines[0] == "[]"
    # Nothing of the runner's beyond the final-directory pipe (bash itself may hold 255, and 3-4
    # for the pipeline it is running).
    assert {int(fd) for fd in lines[1].split()} - {3, 4, 255} <= {0, 1, 2, runner_module.CWD_FD}
    assert lines[2] == "nested"


def test_killed_by_a_signal_reports_128_plus_the_signal(tmp_path: Path) -> None:
    assert bash("kill -TERM $$", tmp_path)["exit_code"] == 143


def test_timeout_kills_the_command_and_says_so(tmp_path: Path) -> None:
    started = time.monotonic()
    result = bash("echo before; sleep 30", tmp_path, timeout_ms=500)
    assert time.monotonic() - started < 5
    assert result["timed_out"] is True
    assert result["exit_code"] == 137
    assert result["output"] == "before\n"
    assert result["final_cwd"] == ""


def test_background_processes_neither_hang_the_call_nor_survive_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    result = bash(f"sleep 30 & echo $! > {pid_file}; echo done", tmp_path)
    assert time.monotonic() - started < 5
    assert result["output"] == "done\n"
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # killed with its process group; its parent may still need a moment
    status = Path(f"/proc/{pid}/stat")
    assert not status.exists() or status.read_text().split()[2] == "Z"


def test_a_flood_keeps_head_and_tail_and_counts_the_rest(tmp_path: Path) -> None:
    total = 50_000_000
    result = bash(
        f"echo START; head -c {total} /dev/zero | tr '\\0' y; echo; echo END", tmp_path, limit=4096
    )
    assert result["output_bytes"] == total + len("START\n") + len("\nEND\n")
    assert result["output_truncated"] is True
    text = result["output"]
    assert text.startswith("START\nyyy")
    assert text.endswith("yyy\nEND\n")
    assert "bytes of output omitted" in text
    assert len(text.encode()) <= 4096 + 100


def test_cutting_the_output_never_splits_a_character(tmp_path: Path) -> None:
    result = bash("for i in $(seq 2000); do printf 'é€😀'; done", tmp_path, limit=1001)
    assert result["output_truncated"] is True
    assert "\ufffd" not in result["output"]


def test_the_sink_memory_stays_bounded_whatever_the_stream() -> None:
    sink = runner_module.OutputSink(1000)
    for _ in range(10_000):
        sink.add(b"x" * 777)
        assert len(sink.head) + len(sink.tail) <= 1500
    text, truncated = sink.render()
    assert truncated is True
    assert sink.total == 7_770_000
    assert f"{7_770_000 - 1000} bytes of output omitted" in text


# --- progress ---------------------------------------------------------------------------------

_SKIP_NOTE = re.compile(r"\[\.\.\. (\d+) bytes not shown live \.\.\.\]\n")


def test_a_quick_command_sends_no_progress_only_its_result(tmp_path: Path) -> None:
    messages = runner_messages(bash_request("echo hi", tmp_path), cwd=tmp_path)
    assert len(messages) == 1 and messages[0]["output"] == "hi\n"


def test_output_arrives_as_progress_while_the_command_still_runs(tmp_path: Path) -> None:
    command = "for i in 1 2 3 4 5; do echo line$i; sleep 0.25; done"
    request = {**owned_by_the_identity(tmp_path), **bash_request(command, tmp_path)}
    with subprocess.Popen(
        runner_argv(), cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        started = time.monotonic()
        proc.stdin.write(encode_frame(request))
        proc.stdin.close()
        decoder = FrameDecoder(1 << 20)
        arrivals: list[tuple[float, dict[str, Any]]] = []
        while not arrivals or arrivals[-1][1]["type"] != "result":
            data = os.read(proc.stdout.fileno(), 1 << 16)
            assert data, "the runner ended without a result"
            arrivals += [(time.monotonic() - started, m) for m in decoder.feed(data)]
        assert proc.wait(10) == 0
    progress = [(at, m["output"]) for at, m in arrivals if m["type"] == "progress"]
    result_at, result = arrivals[-1]
    assert len(progress) >= 4
    assert progress[0][0] < 0.6 < result_at, "the first line came only with the result"
    assert progress[0][1].startswith("line1\n")
    assert "".join(chunk for _, chunk in progress) == result["output"]
    assert result["output"] == "".join(f"line{i}\n" for i in range(1, 6))


def test_a_flood_is_sent_live_in_few_small_chunks_with_exact_accounting(tmp_path: Path) -> None:
    command = "for i in $(seq 12); do head -c 400000 /dev/zero | tr '\\0' y; sleep 0.1; done"
    started = time.monotonic()
    messages = runner_messages(bash_request(command, tmp_path, limit=4096), cwd=tmp_path)
    elapsed = time.monotonic() - started
    result = messages[-1]
    assert result["output_bytes"] == 12 * 400_000 and result["output_truncated"] is True
    chunks = [m["output"] for m in messages[:-1]]
    assert 2 <= len(chunks) <= elapsed / 0.1 + 2
    assert all(len(chunk.encode()) <= runner_module.MAX_PROGRESS_BYTES for chunk in chunks)
    skipped = sum(int(n) for chunk in chunks for n in _SKIP_NOTE.findall(chunk))
    shown = sum(len(_SKIP_NOTE.sub("", chunk)) for chunk in chunks)
    assert skipped > 0
    assert shown + skipped == result["output_bytes"]


def test_progress_never_splits_a_character_and_keeps_its_pending_bytes_bounded() -> None:
    sent: list[dict[str, Any]] = []
    stream = runner_module.ProgressStream(sent.append, started=0.0, interval=0.1, max_bytes=128)
    euro = "€".encode()
    stream.add(b"ab" + euro[:1])
    stream.flush(0.05)
    assert sent == [], "sent before the interval passed"
    stream.flush(0.1)
    assert [m["output"] for m in sent] == ["ab"], "the incomplete character must wait"
    stream.add(euro[1:] + b"cd")
    stream.flush(0.15)
    assert len(sent) == 1, "at most one message per interval"
    stream.flush(0.2)
    assert sent[-1]["output"] == "€cd"
    for _ in range(100):
        stream.add("é".encode() * 50)
        assert stream.pending_bytes <= 2 * 128
    assert stream.wait_s(0.35) == 0.0
    stream.flush(0.35)
    note, kept = sent[-1]["output"].split("\n", 1)
    assert len(sent[-1]["output"].encode()) <= 128
    assert "\ufffd" not in kept and set(kept) == {"é"}
    assert int(_SKIP_NOTE.match(note + "\n").group(1)) + len(kept.encode()) == 100 * 100
    stream.add(b"tail")
    stream.flush(0.36, final=True)
    assert sent[-1]["output"] == "tail", "the end is sent once progress was being sent"
    quiet: list[dict[str, Any]] = []
    unsent = runner_module.ProgressStream(quiet.append, started=0.0)
    unsent.add(b"fast")
    unsent.flush(0.01, final=True)
    assert quiet == [], "a command that ends within the first interval sends no progress"


# --- write_file -------------------------------------------------------------------------------


def test_write_creates_the_file_and_missing_parents(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "new.txt"
    result = write(target, "hello\n", workspace=tmp_path)
    assert [name for name, _ in result.pop("timeline")] == ["received", "answered"]
    assert result == {"type": "result", "v": runner_module.PROTOCOL_VERSION, "exit_code": 0}
    assert target.read_text() == "hello\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["new.txt"]  # no temp file left


def test_write_replaces_a_file_that_still_has_the_expected_hash(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"old")
    target.chmod(0o640)
    result = write(target, "new", sha(b"old"))
    assert result["exit_code"] == 0 and "error" not in result
    assert target.read_text() == "new"
    assert target.stat().st_mode & 0o777 == 0o640


def test_write_refuses_a_file_that_changed_and_keeps_it(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"changed by someone")
    result = write(target, "new", sha(b"what was read"))
    assert "changed since it was read" in result["error"]
    assert target.read_bytes() == b"changed by someone"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_write_refuses_to_create_a_file_that_appeared(tmp_path: Path) -> None:
    target = tmp_path / "f.txt"
    target.write_bytes(b"appeared")
    result = write(target, "new", None)
    assert "changed since it was read (it exists now)" in result["error"]
    assert target.read_bytes() == b"appeared"


def test_write_refuses_a_file_deleted_since_it_was_read(tmp_path: Path) -> None:
    result = write(tmp_path / "gone.txt", "new", sha(b"old"))
    assert "changed since it was read (it was deleted)" in result["error"]
    assert not (tmp_path / "gone.txt").exists()


def test_write_never_follows_a_link_made_since_the_path_was_judged(tmp_path: Path) -> None:
    """The daemon sends the path its links resolved to when the policy judged it. Attacker round
    113 made `x` a link to `.gitattributes` between that judgement and the write, and the
    runner, resolving it again, wrote a file the policy asks a person about."""
    (tmp_path / "real.txt").write_bytes(b"old")
    (tmp_path / "link.txt").symlink_to("real.txt")
    result = write(tmp_path / "link.txt", "new", sha(b"old"))
    assert "it is a link now" in result["error"]
    (tmp_path / "folder").mkdir()
    (tmp_path / "through").symlink_to("folder")
    result = write(tmp_path / "through" / "new.txt", "new", workspace=tmp_path)
    assert "through is a link now" in result["error"]
    assert (tmp_path / "real.txt").read_bytes() == b"old"
    assert list((tmp_path / "folder").iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "folder",
        "link.txt",
        "real.txt",
        "through",
    ]


def test_write_refuses_a_path_outside_the_workspace(tmp_path: Path) -> None:
    workspace, outside = tmp_path / "ws", tmp_path / "outside.txt"
    workspace.mkdir()
    (workspace / "escape").symlink_to(outside)
    assert "link now" in write(workspace / "escape", "x", workspace=workspace)["error"]
    result = write(workspace / ".." / "outside.txt", "x", workspace=workspace)
    assert "outside the workspace" in result["error"]
    assert not outside.exists()


def test_write_to_a_directory_or_a_relative_path_is_a_clear_error(tmp_path: Path) -> None:
    assert write(tmp_path, "x", workspace=tmp_path)["error"] == "it is a directory, not a file"
    (tmp_path / "sub").mkdir()
    for expected in (None, sha(b"x")):
        result = write(tmp_path / "sub", "x", expected, workspace=tmp_path)
        assert result["error"] == "it is a directory, not a file"
    assert "not absolute" in write(Path("relative.txt"), "x", workspace=tmp_path)["error"]


def test_write_under_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    result = write(tmp_path / "plain" / "child.txt", "x", workspace=tmp_path)
    assert result["error"] in {"a parent of it is not a directory", "File exists"}
    assert (tmp_path / "plain").read_text() == "x"


# --- protocol edges ---------------------------------------------------------------------------


def test_no_request_means_a_quiet_exit() -> None:
    done = subprocess.run(
        runner_argv(),
        input=b"",
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_idle_runner_exits_on_its_own() -> None:
    read_end, write_end = os.pipe()  # stdin stays open and silent
    try:
        started = time.monotonic()
        done = subprocess.run(
            runner_argv("--idle-exit-s", "0.3"),
            stdin=read_end,
            capture_output=True,
            timeout=30,
            check=False,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    assert done.returncode == 0 and done.stdout == b""
    assert time.monotonic() - started < 10


def test_malformed_and_unknown_requests_are_answered_not_crashed_on(tmp_path: Path) -> None:
    assert "unknown request kind" in call_runner({"kind": "format_disk"}, cwd=tmp_path)["error"]
    assert "malformed bash request" in call_runner({"kind": "bash"}, cwd=tmp_path)["error"]


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]"])
def test_a_request_that_is_not_a_json_object_gets_an_error_result(body: bytes) -> None:
    done = subprocess.run(
        runner_argv(),
        input=len(body).to_bytes(4, "big") + body,
        capture_output=True,
        timeout=30,
        check=False,
    )
    (message,) = FrameDecoder(1 << 20).feed(done.stdout)
    assert message["type"] == "result"
    assert message["error"].startswith("bad request")


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root runner switches identity")
def test_the_command_holds_its_identity_only_no_root_id_group_or_capability(
    tmp_path: Path,
) -> None:
    status = bash("grep -E '^(Uid|Gid|Groups|CapPrm|CapEff|CapAmb):' /proc/self/status", tmp_path)
    fields = dict(line.split(":", 1) for line in status["output"].splitlines())
    uid, gid = (str(n) for n in IDENTITY)
    assert fields["Uid"].split() == [uid] * 4 and fields["Gid"].split() == [gid] * 4
    assert fields["Groups"].split() == []
    assert {int(fields[k], 16) for k in ("CapPrm", "CapEff", "CapAmb")} == {0}


def test_signals_python_ignores_are_back_to_their_defaults_in_the_command(tmp_path: Path) -> None:
    # SIGPIPE: `yes | head` ends quietly, as in any shell.
    result = bash("yes | head -c 4; echo; grep SigIgn /proc/self/status", tmp_path)
    assert result["output"].startswith("y\ny\n\n") and "Broken pipe" not in result["output"]
    assert int(result["output"].split()[-1], 16) & (1 << (13 - 1)) == 0  # SIGPIPE not ignored


@pytest.mark.skipif(os.geteuid() != 0, reason="the runner switches ids only as root")
def test_the_command_cannot_run_while_the_runner_wears_its_ids(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen in a CI run: `kill -9 $PPID` killed the runner, because the command ran before the
    runner, which wears the command's ids to spawn it, had taken its own back. Here the window
    is widened to half a second: the command still finds its parent out of its reach."""
    from sandbox.runner import spawn

    real_spawn = os.posix_spawn

    def slow_to_restore(*args: Any, **kwargs: Any) -> int:
        pid = real_spawn(*args, **kwargs)
        time.sleep(0.5)  # still wearing the command's ids
        return pid

    monkeypatch.setattr(spawn.os, "posix_spawn", slow_to_restore)
    # In-process, as the container's runner: its files and working directory readable by the
    # command's identity (a checkout may sit in a folder only root may enter).
    monkeypatch.setattr(runner_module, "BASH_ENV_FILE", _mounted_runner().with_name("bash_env.sh"))
    monkeypatch.chdir(tmp_path)
    request = {
        "command": "kill -0 $PPID 2>/dev/null && echo reached-the-runner || echo refused",
        "cwd": str(tmp_path),
        "timeout_ms": 20_000,
        **owned_by_the_identity(tmp_path),
    }
    result = runner_module.run_bash(request, IDENTITY)
    assert result["output"].strip() == "refused", result


def test_a_background_command_stops_when_its_host_goes(tmp_path: Path) -> None:
    """Attack: a background command ran on for its whole lifetime after its daemon died."""
    marker = tmp_path / "survived"
    request = {
        **owned_by_the_identity(tmp_path),
        **bash_request(f"sleep 3; touch {marker}", tmp_path, timeout_ms=60_000),
        "stop_without_host": True,
    }
    with subprocess.Popen(
        runner_argv(), cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    ) as runner:
        assert runner.stdin is not None
        runner.stdin.write(encode_frame(request))
        runner.stdin.flush()
        time.sleep(0.5)
        runner.stdin.close()  # the daemon's attach stream ends with the daemon
        runner.wait(timeout=10)
    time.sleep(3.5)
    assert not marker.exists()


# --- warm-up ----------------------------------------------------------------------------------


def _warm_up_runs(monkeypatch: pytest.MonkeyPatch, stdin: int) -> list[dict[str, Any]]:
    ran: list[dict[str, Any]] = []
    monkeypatch.setattr(runner_module, "run_bash", lambda request, identity: ran.append(request))
    saved = os.dup(0)
    try:
        os.dup2(stdin, 0)
        runner_module.warm_up(IDENTITY)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    return ran


def test_a_pooled_runner_warms_up_with_a_command_that_does_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    read_end, write_end = os.pipe()
    try:
        ran = _warm_up_runs(monkeypatch, read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert [r["command"] for r in ran] == [":"]
    assert ran[0]["cwd"] == str(tmp_path)


def test_a_runner_whose_request_is_waiting_does_not_warm_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"\0")  # a cold start: the request is already there
        assert _warm_up_runs(monkeypatch, read_end) == []
    finally:
        os.close(read_end)
        os.close(write_end)


def test_the_warm_up_leaves_the_request_to_the_runner(tmp_path: Path) -> None:
    """A runner that warmed up (no request for a while) still answers its one request, and
    the warm-up's own run is in no result."""
    request = {**owned_by_the_identity(tmp_path), **bash_request("echo real", tmp_path)}
    with subprocess.Popen(
        runner_argv(), cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as proc:
        time.sleep(0.5)  # past its start-up: the warm-up ran meanwhile
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(encode_frame(request))
        proc.stdin.close()
        messages = list(FrameDecoder(1 << 20).feed(proc.stdout.read()))
    assert [m["type"] for m in messages] == ["result"]
    assert messages[0]["output"] == "real\n"


def test_the_runner_answers_then_stays_until_the_host_hangs_up(tmp_path: Path) -> None:
    """Exiting as soon as the answer is written tore the container down while the answer was on
    its way through the engine, which delayed it by 1-7 ms on a 2-core machine."""
    request = {**owned_by_the_identity(tmp_path), **bash_request("echo hi", tmp_path)}
    with subprocess.Popen(
        runner_argv("--hang-up-wait-s", "600"),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(encode_frame(request))
        proc.stdin.flush()
        decoder = FrameDecoder(1 << 20)
        messages: list[dict[str, Any]] = []
        while not messages:
            data = os.read(proc.stdout.fileno(), 1 << 16)
            assert data, "the runner ended without a result"
            messages += decoder.feed(data)
        assert messages[-1]["type"] == "result" and messages[-1]["output"] == "hi\n"
        assert proc.poll() is None, "the runner exited before the host hung up"
        proc.stdin.close()
        assert proc.wait(30) == 0  # hung up: it goes (not after its 600 s)


def test_a_host_that_never_hangs_up_is_waited_for_a_bounded_time() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"bytes after the answer are ignored")
        runner_module.wait_for_hang_up(read_end, 0.05)  # returns although the pipe stays open
    finally:
        os.close(read_end)
        os.close(write_end)
    runner_module.wait_for_hang_up(read_end, 5)  # closed: returns at once, raises nothing


def test_starting_the_runner_imports_nothing_a_request_may_not_need() -> None:
    loaded = modules_after_start([sys.executable], str(_mounted_runner().parent))
    assert "runner" in loaded and "confine" in loaded  # it did import the runner
    assert not loaded & HEAVY_MODULES


def test_options_are_read_as_the_sandbox_recipe_writes_them() -> None:
    options = runner_module.parse_options(
        [
            "--idle-exit-s",
            "42",
            "--end-leftovers",
            "--run-as=1000:1000",
            "--egress-socket",
            "/s",
            "--umask",
            "0002",
        ]
    )
    assert options.umask == 0o002
    assert options.idle_exit_s == 42.0
    assert options.end_leftovers
    assert options.run_as == "1000:1000"
    assert options.egress_socket == "/s"
    assert options.hang_up_wait_s == runner_module.HANG_UP_WAIT_S
    defaults = runner_module.parse_options([])
    assert defaults.idle_exit_s is None and defaults.run_as is None and not defaults.end_leftovers
    assert defaults.umask is None


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--idle-exit-s"], "--idle-exit-s needs a value"),
        (["--idle-exit-s", "soon"], "could not convert"),
        (["--end-leftovers=yes"], "unknown option '--end-leftovers'"),
        (["--run_as", "1:1"], "unknown option '--run_as'"),
        (["stray"], "unknown option 'stray'"),
        (["--umask", "8"], "invalid literal"),
        (["--umask", "1777"], "not a umask: '1777'"),
    ],
)
def test_a_bad_command_line_is_refused_with_what_is_wrong(
    argv: list[str], complaint: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        runner_module.parse_options(argv)
    done = subprocess.run(
        runner_argv(*argv), cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert complaint in done.stderr


def test_without_its_bash_env_file_no_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 79: a container whose runner folder was removed under it ran the command
    without bash_env.sh, so without waiting for the runner's go. The runner refuses instead."""
    monkeypatch.setattr(runner_module, "BASH_ENV_FILE", str(tmp_path / "gone" / "bash_env.sh"))
    result = runner_module.run_bash(bash_request("touch ran", tmp_path), None)
    assert result["exit_code"] == -1 and "bash_env.sh is gone" in result["error"]
    assert not (tmp_path / "ran").exists()


def test_leftovers_are_killed_until_none_is_listed_and_the_runner_waits_for_that(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attacker round 94: killed is not gone (a process stuck in the kernel finishes its system
    call first). The runner sends SIGKILL again and waits until /proc lists nothing else."""
    listed = iter([2, 1, 0])
    kills: list[tuple[int, int]] = []
    monkeypatch.setattr(runner_module, "_other_processes", lambda: next(listed))
    monkeypatch.setattr(runner_module, "_reap_own_children", lambda: None)
    monkeypatch.setattr(runner_module.os, "kill", lambda pid, sig: kills.append((pid, sig)))
    monkeypatch.setattr(runner_module.time, "sleep", lambda seconds: None)
    assert runner_module.end_leftovers(60.0) == 0
    assert kills == [(-1, runner_module.spawn.SIGKILL)] * 3


def test_leftovers_still_listed_when_the_wait_ends_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner_module, "_other_processes", lambda: 3)
    monkeypatch.setattr(runner_module, "_reap_own_children", lambda: None)
    monkeypatch.setattr(runner_module.os, "kill", lambda pid, sig: None)
    assert runner_module.end_leftovers(0.0) == 3


@pytest.mark.parametrize("size", [0, 5, 65536, 65537, 1 << 20])
def test_an_exec_requests_input_reaches_the_program_whole(tmp_path: Path, size: int) -> None:
    """Past what a pipe holds at its default size it goes in a memory file: pipes may not be
    enlarged in the sandbox (attacker round 110)."""
    data = "x" * size
    request = {
        "kind": "exec",
        "argv": ["sh", "-c", "wc -c; cat > /dev/null"],
        "cwd": str(tmp_path),
        "stdin": data,
        "timeout_ms": 10_000,
    }
    result = call_runner(request, cwd=tmp_path)
    assert result["exit_code"] == 0, result
    assert result["output"].strip() == str(size)


def test_a_writes_check_reads_only_a_regular_file_it_could_match(tmp_path: Path) -> None:
    """Attacker round 112: another tenant sharing the workspace swapped the file for a link to
    /dev/zero after the Write resolved its path; the check followed it and read until the
    call's timeout. Neither a link, nor a FIFO, nor a file past what the daemon reads is read."""
    check = runner_module._hashed
    (tmp_path / "plain").write_bytes(b"old")
    found = check(str(tmp_path / "plain"), hashlib.sha256)
    assert found is not None and found[0] == sha(b"old")
    assert found[1].st_ino == (tmp_path / "plain").stat().st_ino
    assert check(str(tmp_path / "missing"), hashlib.sha256) is None
    (tmp_path / "zero").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo")  # nobody writes it: an open that waited would never return
    with open(tmp_path / "huge", "wb") as huge:
        huge.truncate(runner_module._MAX_HASHED_BYTES + 1)  # sparse
    for name, why in (("zero", "a link now"), ("fifo", "no longer a regular file")):
        with pytest.raises(runner_module._Stale, match=why):
            check(str(tmp_path / name), hashlib.sha256)
    with pytest.raises(runner_module._Stale, match="no longer a regular file"):
        check(str(tmp_path / "huge"), hashlib.sha256)
    # More to read than its size said (a file growing meanwhile; /proc's say 0): not read on.
    with pytest.raises(runner_module._Stale, match="growing"):
        check("/proc/self/status", hashlib.sha256)


@pytest.fixture(params=["exchange", "plain"])
def renames(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways the runner renames: renameat2's exchange and no-replace, and plain renames
    with a second hard link where a filesystem has no renameat2."""
    if request.param == "plain":
        monkeypatch.setattr(runner_module, "_renameat2", lambda *_: False)
    return str(request.param)


def replace_racing(
    folder: Path, existing: bytes | None, race: Callable[[Path], object], data: bytes = b"new"
) -> None:
    """`_replace_checked` of `folder/f`, with `race` run on that path right after the content
    check and before the rename (from the first folder check, which sits between them)."""
    parent, name = runner_module._parent_beneath(str(folder), str(folder / "f"))
    raced: list[bool] = []

    def in_place() -> bool:
        if not raced:
            raced.append(True)
            race(folder / "f")
        return True

    expected = None if existing is None else sha(existing)
    try:
        runner_module._replace_checked(parent, name, data, expected, hashlib.sha256, in_place)
    finally:
        os.close(parent)


def put_at(path: Path, content: bytes, mode: int = 0o644) -> None:
    """Another file at `path`, swapped in by a rename as a racing tenant would."""
    other = path.with_name("other")
    other.write_bytes(content)
    other.chmod(mode)
    other.rename(path)


@pytest.mark.usefixtures("renames")
def test_a_write_replaces_only_the_very_file_whose_content_it_checked(tmp_path: Path) -> None:
    """Attacker round 114 (lead): the check compared content, not identity, so a file another
    tenant swapped in after the check was replaced unread (its content lost), and one swapped in
    with the same content and mode 0777 lent its mode."""
    for theirs, mode in ((b"theirs", 0o644), (b"old", 0o777)):
        (tmp_path / "f").write_bytes(b"old")
        with pytest.raises(runner_module._Stale, match="another file was put at its name"):
            replace_racing(tmp_path, b"old", lambda path: put_at(path, theirs, mode))  # noqa: B023
        assert (tmp_path / "f").read_bytes() == theirs
        assert (tmp_path / "f").stat().st_mode & 0o777 == mode
        assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary name left


@pytest.mark.usefixtures("renames")
def test_a_write_creating_a_file_never_replaces_one_made_meanwhile(tmp_path: Path) -> None:
    with pytest.raises(runner_module._Stale, match="it exists now"):
        replace_racing(tmp_path, None, lambda path: path.write_bytes(b"theirs"))
    assert (tmp_path / "f").read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.usefixtures("renames")
def test_a_write_with_nothing_racing_it_replaces_the_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"old")
    replace_racing(tmp_path, b"old", lambda _: None)
    assert (tmp_path / "f").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.usefixtures("renames")
def test_a_write_never_replaces_content_written_into_the_file_after_its_check(
    tmp_path: Path,
) -> None:
    """Attacker round 115: bob appended to the file alice was writing (the same file, so the
    same inode) right after the runner hashed it; the Write succeeded and bob's lines were
    gone. What was replaced is hashed again once it is out of the way."""
    (tmp_path / "f").write_bytes(b"old")

    def append(path: Path) -> None:
        with path.open("ab") as file:
            file.write(b" and bob's line")

    with pytest.raises(runner_module._Stale, match="changed since it was read"):
        replace_racing(tmp_path, b"old", append)
    assert (tmp_path / "f").read_bytes() == b"old and bob's line"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_write_that_cannot_put_back_what_it_replaced_says_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attacker round 115: a file swapped in at the name was removed from the temporary name
    the exchange gave it, so the exchange back failed; the Write said only "No such file or
    directory" while the file held its new content."""
    exchange = runner_module._renameat2
    calls: list[int] = []

    def removing_before_the_second(parent: int, old: str, new: str, flags: int) -> bool:
        calls.append(flags)
        if len(calls) == 2:
            os.unlink(old, dir_fd=parent)  # the swapped-in file, gone from where it was put
        return exchange(parent, old, new, flags)

    monkeypatch.setattr(runner_module, "_renameat2", removing_before_the_second)
    (tmp_path / "f").write_bytes(b"old")
    with pytest.raises(runner_module._Stale, match="may hold the content this Write sent"):
        replace_racing(tmp_path, b"old", lambda path: put_at(path, b"decoy"))
    assert (tmp_path / "f").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


@pytest.mark.usefixtures("renames")
@pytest.mark.parametrize("existing", [b"old", None])
def test_a_write_whose_new_content_was_swapped_out_says_it_failed(
    tmp_path: Path, existing: bytes | None
) -> None:
    """Attacker round 116: bob renamed a file of his onto alice's temporary file before it was
    put in place; her Write reported success, and the file held his bytes (his inode, his
    owner)."""

    def onto_the_temporary(path: Path) -> None:
        (temporary,) = path.parent.glob(".tooljail-*.tmp")
        put_at(temporary, b"bob's bytes")

    if existing is not None:
        (tmp_path / "f").write_bytes(existing)
    with pytest.raises(runner_module._Stale, match="its new content was replaced"):
        replace_racing(tmp_path, existing, onto_the_temporary)
    if existing is not None:
        assert (tmp_path / "f").read_bytes() == existing


def test_a_file_open_to_others_lends_no_more_than_the_umask_allows(tmp_path: Path) -> None:
    """Attacker round 115: bob swapped his 0777 copy (same content) in before alice's Write
    looked, and her new file took 0777."""
    umask = os.umask(0o022)
    try:
        (tmp_path / "f").write_bytes(b"old")
        (tmp_path / "f").chmod(0o777)
        replace_racing(tmp_path, b"old", lambda _: None)
    finally:
        os.umask(umask)
    assert (tmp_path / "f").stat().st_mode & 0o7777 == 0o775


@pytest.mark.usefixtures("renames")
def test_a_file_with_the_longest_name_the_filesystem_allows_is_written(tmp_path: Path) -> None:
    """Attacker round 115: the temporary name was the file's own plus 27 bytes, past 255."""
    name = "n" * 255
    (tmp_path / name).write_bytes(b"old")
    parent, _ = runner_module._parent_beneath(str(tmp_path), str(tmp_path / name))
    try:
        runner_module._replace_checked(parent, name, b"new", sha(b"old"), hashlib.sha256)
    finally:
        os.close(parent)
    assert (tmp_path / name).read_bytes() == b"new"
    created = write(tmp_path / ("m" * 255), "made", workspace=tmp_path)
    assert created["exit_code"] == 0, created


def test_a_replaced_file_keeps_its_permissions_but_never_setuid_or_setgid(tmp_path: Path) -> None:
    """The kernel drops setuid and setgid when a file is written to; a Write does too, so no
    file (one swapped in at the name included) lends them to the content a model wrote."""
    target = tmp_path / "f"
    target.write_bytes(b"old")
    target.chmod(0o6755)
    replace_racing(tmp_path, b"old", lambda _: None)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o7777 == 0o755


@pytest.mark.usefixtures("renames")
@pytest.mark.parametrize("existing", [b"old", None])
def test_a_write_into_a_folder_moved_meanwhile_is_undone(
    tmp_path: Path, existing: bytes | None
) -> None:
    """Attacker round 114: the folder the runner had opened was renamed (to `.git`) while it
    wrote, and the file landed there, a place the policy never judged. Checked before and
    after the rename; after it, what the folder held is put back."""
    folder = tmp_path / "d"
    folder.mkdir()
    if existing is not None:
        (folder / "config").write_bytes(existing)
    target = str(folder / "config")
    parent, name = runner_module._parent_beneath(str(tmp_path), target)
    checks = []

    def in_place() -> bool:
        here = runner_module._in_place(str(tmp_path), target, parent)
        checks.append(here)
        if len(checks) == 1:
            folder.rename(tmp_path / ".git")  # right after the last check before the rename
        return here

    expected = None if existing is None else sha(existing)
    try:
        with pytest.raises(runner_module._Stale, match="moved or replaced"):
            runner_module._replace_checked(
                parent, name, b"[core] fsmonitor = x", expected, hashlib.sha256, in_place
            )
    finally:
        os.close(parent)
    assert checks == [True, False]
    moved = tmp_path / ".git"
    assert sorted(p.name for p in moved.iterdir()) == ([] if existing is None else ["config"])
    if existing is not None:
        assert (moved / "config").read_bytes() == existing
