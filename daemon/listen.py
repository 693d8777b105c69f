"""Listener addresses: unix:///path/to.sock or host:port."""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import TooljailError


@dataclass(frozen=True)
class ListenAddress:
    """A parsed listener address."""

    raw: str
    unix_path: Path | None

    @classmethod
    def parse(cls, raw: str) -> ListenAddress:
        """Parse unix:///abs/path or host:port."""
        if raw.startswith("unix://"):
            return cls(raw=raw, unix_path=Path(raw.removeprefix("unix://")))
        return cls(raw=raw, unix_path=None)

    @property
    def grpc_target(self) -> str:
        """The address as grpc's bind/connect target."""
        return f"unix:{self.unix_path}" if self.unix_path else self.raw

    def prepare(self) -> None:
        """Make the socket's folder; refuse when a live daemon already answers on the socket."""
        if self.unix_path is None:
            return
        self.unix_path.parent.mkdir(parents=True, exist_ok=True)
        if not self.unix_path.exists():
            return
        if not self.unix_path.is_socket():
            raise TooljailError(
                f"{self.unix_path} exists and is not a socket; refusing to replace it"
            )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(str(self.unix_path))
            except OSError:
                # Nobody answers: a stale socket from a daemon that died. Safe to replace.
                with contextlib.suppress(FileNotFoundError):
                    self.unix_path.unlink()
                return
        raise TooljailError(
            f"another process is already listening on {self.unix_path}; stop it or choose "
            "another --listen address"
        )

    def cleanup(self) -> None:
        """Remove our socket file."""
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.unix_path.unlink()
