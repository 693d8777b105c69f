"""What tooljail is compared with, measured in the client process beside its calls: `docker run`,
`docker exec` into a running container, llm-sandbox's Docker backend with one open session, and
the bare engine churning containers with tooljail's own hardening (create, start, wait, remove).

Every peer runs the same command on the same image as tooljail's Bash (`bash -c 'echo hi'`), and
each checks its output, so a peer that silently does less is an error, not a fast sample.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.processes import machine_busy_s
from sandbox.backend import SandboxSpec
from sandbox.hardening import container_recipe
from sandbox.reaper import remove_container
from sandbox.runner import RUNNER_DIR

COMMAND = ["bash", "-c", "echo hi"]
EXPECTED = b"hi\n"
#: Labels the peers' containers carry, so the benchmark removes every one it made.
LABEL = "io.tooljail.bench.peer"


def _client() -> Any:
    import docker

    return docker.from_env(version="auto")


def docker_run(client: Any, image: str) -> None:
    """`docker run --rm --network none IMAGE bash -c 'echo hi'` (the SDK waits for the removal,
    as the CLI does)."""
    output = client.containers.run(
        image, COMMAND, remove=True, network_mode="none", labels={LABEL: "run"}
    )
    if output != EXPECTED:
        raise RuntimeError(f"docker run printed {output[:100]!r}")


class ExecTarget:
    """One running container (`sleep infinity`, no network) that `docker exec` goes into."""

    def __init__(self, client: Any, image: str) -> None:
        self._container = client.containers.run(
            image,
            ["sleep", "infinity"],
            detach=True,
            network_mode="none",
            labels={LABEL: "exec"},
        )

    def exec(self) -> None:
        """`docker exec CONTAINER bash -c 'echo hi'`."""
        code, output = self._container.exec_run(COMMAND)
        if code != 0 or output != EXPECTED:
            raise RuntimeError(f"docker exec answered {code}: {output[:100]!r}")

    def close(self) -> None:
        self._container.remove(force=True)


class LlmSandbox:
    """llm-sandbox's Docker backend, one session open for every command (its own way of
    running commands: one container reused, no fresh one per call)."""

    def __init__(self, client: Any, image: str) -> None:
        from llm_sandbox import SandboxSession

        self._session = SandboxSession(
            backend="docker",
            client=client,
            image=image,
            lang="python",
            # The image is local and complete: no pull, no language set-up, no commit.
            skip_environment_setup=True,
            keep_template=True,
            commit_container=False,
            runtime_configs={
                "network_mode": "none",
                # Its PID 1 (the image's bash) ignores SIGTERM: close() would wait 10 s.
                "stop_signal": "SIGKILL",
                "labels": {LABEL: "llm-sandbox"},
            },
            verbose=False,
        )
        self._session.open()

    def exec(self) -> None:
        """`execute_command`; it splits the string into words and runs no shell of its own."""
        answer = self._session.execute_command("bash -c 'echo hi'")
        if answer.exit_code != 0 or answer.stdout != EXPECTED.decode():
            raise RuntimeError(f"llm-sandbox answered {answer.exit_code}: {answer.stdout[:100]!r}")

    def close(self) -> None:
        self._session.close()


@contextlib.contextmanager
def peer_containers(image: str) -> Iterator[tuple[Any, ExecTarget, LlmSandbox | None, str]]:
    """The docker client, the exec target and the llm-sandbox session (None, with why, when the
    package is not installed: `make venv` installs it); every container removed afterwards."""
    client = _client()
    target = ExecTarget(client, image)
    session, missing = None, ""
    try:
        try:
            session = LlmSandbox(client, image)
        except ImportError as exc:
            missing = f"llm-sandbox is not installed ({exc}); `make venv` installs it"
        yield client, target, session, missing
    finally:
        if session is not None:
            session.close()
        target.close()
        remove_peer_containers(client)
        client.close()


def remove_peer_containers(client: Any) -> int:
    """Remove whatever container a peer left behind; how many."""
    left = client.api.containers(all=True, quiet=True, filters={"label": LABEL})
    for container in left:
        with contextlib.suppress(Exception):
            client.api.remove_container(container["Id"], force=True)
    return len(left)


# --- the bare engine's churn ------------------------------------------------------------------


@dataclass
class ChurnTally:
    """Containers the bare engine went through, and what failed."""

    done: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def hardened_kwargs(image: str, workspace: Path, instance_id: str) -> dict[str, Any]:
    """tooljail's container recipe (the same host configuration: limits, capabilities, mounts,
    read-only root, seccomp, no network), running `bash -c 'echo hi'` as the sandbox identity
    instead of the runner: the engine's own floor for one hardened container."""
    info = workspace.stat()
    spec = SandboxSpec(
        workspace=workspace,
        workspace_id=(info.st_dev, info.st_ino),
        run_as=(info.st_uid, info.st_gid),  # what the daemon runs commands as (its owner)
    )
    recipe = container_recipe(spec, image=image, runner_source=RUNNER_DIR, instance_id=instance_id)
    create = {**recipe.create_kwargs, "command": COMMAND, "stdin_open": False}
    create["user"] = f"{info.st_uid}:{info.st_gid}"
    create["labels"] = {**create.get("labels", {}), LABEL: "churn"}
    return {"host_config": recipe.host_config_kwargs, "create": create}


def bare_churn(
    image: str, workspace: Path, instance_id: str, workers: int, seconds: float
) -> dict[str, Any]:
    """`workers` threads doing create -> start -> wait -> remove with tooljail's hardening for
    `seconds`: containers per second, the baseline of tooljail's churn."""
    kwargs = hardened_kwargs(image, workspace, instance_id)
    tally = ChurnTally()
    deadline = time.monotonic() + seconds

    def worker() -> None:
        client = _client()
        api = client.api
        try:
            host_config = api.create_host_config(**kwargs["host_config"])
            while time.monotonic() < deadline:
                try:
                    _one_container(api, host_config, kwargs["create"])
                except Exception as exc:  # noqa: BLE001 - counted, the loop goes on
                    with tally.lock:
                        tally.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                with tally.lock:
                    tally.done += 1
        finally:
            client.close()

    started, busy_before = time.monotonic(), machine_busy_s()
    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    return {
        "workers": workers,
        "duration_s": elapsed,
        "machine_cpu_s": machine_busy_s() - busy_before,
        "containers": tally.done,
        "containers_per_s": tally.done / elapsed if elapsed > 0 else None,
        "errors": len(tally.errors),
        "error_samples": tally.errors[:5],
    }


def _one_container(api: Any, host_config: Any, create: dict[str, Any]) -> None:
    """One container's life as a sandboxed call gives it: created, started, waited for, removed
    as the daemon removes its containers (the recipe's auto-remove may be first: not an error)."""
    container = api.create_container(host_config=host_config, **create)
    try:
        api.start(container)
        status = api.wait(container, timeout=60)
        if status.get("StatusCode") != 0:
            raise RuntimeError(f"exited with {status}")
    finally:
        if not remove_container(api, container["Id"]):
            raise RuntimeError(f"could not remove container {container['Id'][:12]}")
