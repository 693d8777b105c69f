"""What the engine or the runner says about a sandbox that could not be set up never reaches the
caller: one answer for all of it, the detail in the operator's log.

Attacker round 117: a background command swapped the workspace's `.git` for a link to a host
path between the git pins' look and the container's creation. The engine (root) followed it:
"bind source path does not exist" when the path was missing, a started container whose runner
refused ("not the repository's") when it was there. Nine probes of /root and of another tenant's
private folder out of nine were told apart by the text.
"""

from __future__ import annotations

import io
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from sandbox.backend import SET_UP_CHANGED, PathPin, SandboxSpec, SandboxStartError
from sandbox.docker_backend import DockerSandbox
from sandbox.runner import runner as runner_module


def _api_error(status: int, text: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    response.raw = io.BytesIO(b"")
    return docker.errors.APIError(text, response, explanation=text)


@dataclass
class RefusingEngine:
    """An engine that refuses to create, or to start, naming the host path it looked at."""

    refuse_at: str
    removed: list[str] = field(default_factory=list)
    sockets: list[socket.socket] = field(default_factory=list)

    def create_host_config(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs

    def create_container(self, **_: Any) -> dict[str, str]:
        if self.refuse_at == "create":
            raise _api_error(
                400,
                'invalid mount config for type "bind": bind source path does not exist: /root/.ssh',
            )
        return {"Id": "c" * 64}

    def attach_socket(self, *_: Any, **__: Any) -> socket.socket:
        mine, theirs = socket.socketpair()
        self.sockets += [mine, theirs]
        return mine

    def start(self, *_: Any) -> None:
        raise _api_error(500, "error mounting /root/.ssh: no such file or directory")

    def remove_container(self, container_id: str, **_: Any) -> None:
        self.removed.append(container_id)

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


@pytest.mark.parametrize("refuse_at", ["create", "start"])
def test_an_engine_refusal_is_one_answer_without_the_engines_words(
    backend_over: Any, tmp_path: Path, refuse_at: str
) -> None:
    engine = RefusingEngine(refuse_at)
    pins = (PathPin(path=str(tmp_path / ".git"), identity=(1, 2), read_only=True),)
    spec = SandboxSpec(workspace=tmp_path, run_as=(1001, 1001), git_pins=pins)
    with pytest.raises(SandboxStartError) as refused:
        backend_over(engine)._start_sync(spec, "toolu_x")
    assert str(refused.value) == SET_UP_CHANGED
    assert "/root" not in str(refused.value)


def test_a_runner_refusing_its_mounts_is_the_same_answer(backend_over: Any, tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    request = {
        "kind": "bash",
        "command": "true",
        "workspace": str(tmp_path),
        "workspace_id": [tmp_path.stat().st_dev, tmp_path.stat().st_ino],
        "pins": [{"path": str(tmp_path / ".git"), "identity": [0, 0], "read_only": True}],
    }
    message = runner_module.handle(request, None)
    assert message["exit_code"] == -1 and message.get("mounts_changed") is True
    spec = SandboxSpec(workspace=tmp_path, run_as=(1001, 1001))
    sandbox = DockerSandbox(backend_over(RefusingEngine("never")), "c1", None, spec)  # type: ignore[arg-type]
    assert sandbox._parse(message, 0.0).error == SET_UP_CHANGED
