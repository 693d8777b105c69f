"""A Docker engine of the test's own: a second dockerd with its own socket, data, exec root and
pid file, in a network namespace of its own (`unshare --net`), so that starting, stopping and
killing it changes nothing of the machine's engine or network. (Never `--bridge none` on the
host instead: dockerd then deletes the host's docker0, which the machine's engine needs.)
The sandbox image is copied into it from the machine's engine (`docker save | docker load`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.reliability.support import wait_for


class PrivateEngine:
    """One dockerd that can be stopped and started again on the same folders."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log = root / "dockerd.log"
        self._process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        return [
            # Its own network namespace: whatever it does to bridges and routes stays there; the
            # daemon reaches it through the Unix socket, which lives in the file system.
            "unshare", "--net", "--",
            "dockerd",
            "--host", self.host,
            "--data-root", str(self.root / "data"),
            # Short: containerd's sockets live under it and a Unix socket path has 107 bytes.
            "--exec-root", str(self.root / "x"),
            "--pidfile", str(self.root / "dockerd.pid"),
            "--iptables=false",
            "--ip-masq=false",
        ]  # fmt: skip

    def start(self, timeout_s: float = 90) -> None:
        """Start dockerd and wait until it answers."""
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if not wait_for(self.answers, timeout_s=timeout_s, step_s=0.2):
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the private dockerd did not answer in {timeout_s} s:\n{tail}")

    def answers(self) -> bool:
        """Whether the engine answers a ping (a plain HTTP request: the SDK would leave a socket
        open for every refused connect)."""
        if self._process is None or self._process.poll() is not None:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(5)
                probe.connect(str(self.socket))
                probe.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                status_line = probe.recv(64).split(b"\r\n", 1)[0]
        except OSError:
            return False
        return b" 200 " in status_line + b" "

    def stop(self, timeout_s: float = 60) -> None:
        """SIGTERM dockerd (it stops its containers) and wait until it is gone."""
        if self._process is None or self._process.poll() is not None:
            return
        self._process.send_signal(signal.SIGTERM)
        try:
            self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # Its whole session: the containerd it started goes too.
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait()

    def load_image(self, ref: str) -> None:
        """Copy an image from the machine's engine into this one."""
        with subprocess.Popen(["docker", "save", ref], stdout=subprocess.PIPE) as save:
            loaded = subprocess.run(
                ["docker", "--host", self.host, "load", "--quiet"],
                stdin=save.stdout,
                capture_output=True,
                timeout=600,
                check=False,
            )
        if save.returncode != 0 or loaded.returncode != 0:
            raise RuntimeError(f"could not copy {ref} into the private engine: {loaded.stderr!r}")


@contextlib.contextmanager
def private_engine(image_ref: str) -> Iterator[PrivateEngine]:
    """A started private engine holding `image_ref`; stopped and its folders removed after."""
    root = Path(tempfile.mkdtemp(prefix="tjd-", dir="/tmp"))
    engine = PrivateEngine(root)
    try:
        engine.start()
        engine.load_image(image_ref)
        yield engine
    finally:
        engine.stop()
        # Mounts a killed engine may have left under its folders are undone before removal.
        for mount in reversed(_mounts_under(root)):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = f"{root}{os.sep}"
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts]
    return [p for p in points if p.startswith(prefix)]
