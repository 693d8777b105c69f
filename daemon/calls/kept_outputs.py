"""Results too large for their budget are kept whole for the session, not cut for good.

The model gets a preview (head and tail) with the path and the full size, in the shape of the
reference runtime (`<persisted-output>`), and reads the rest with Read at that path (offset and
limit to page through it). The files live in a directory of the daemon's own state, one folder per
session, written by the daemon alone (0700/0600, created exclusively, never following a link);
Read opens them there (never in the workspace, which sandboxed commands can change). Each session
keeps at most `per_session_bytes`: past that a result is cut as before, saying why. A session's
folder goes with the session, and the whole directory is emptied when the daemon starts (sessions
do not outlive it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import logging
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from daemon.calls.budget import NOTES_SHARE
from daemon.models import ContentBlock, TextContent
from daemon.sessions.session import Session

log = logging.getLogger(__name__)

PREVIEW_HEAD_CHARS = 2_000
PREVIEW_TAIL_CHARS = 1_000
_SAFE_ID = re.compile(r"[^A-Za-z0-9_-]")
_FRAME_CHARS = 420
"""Room the preview's own wording takes (path included, within reason)."""


@dataclass(frozen=True)
class KeptOutput:
    """A result kept whole."""

    path: Path
    chars: int
    size_bytes: int


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1 << 20:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1 << 20):.1f} MB"


def _line_ended(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def preview(kept: KeptOutput, text: str, room: int) -> str:
    """What the model gets instead of `text`: at most `room` characters (never less than the
    frame itself needs)."""
    share = max(0, room - _FRAME_CHARS - len(str(kept.path)))
    head_chars = min(PREVIEW_HEAD_CHARS, share * 2 // 3)
    tail_chars = min(PREVIEW_TAIL_CHARS, share - head_chars)
    head = text[:head_chars]
    tail = text[len(text) - tail_chars :] if tail_chars else ""
    return (
        "<persisted-output>\n"
        f"Output too large ({kept.chars:,} characters, {_size(kept.size_bytes)}). Full output "
        f"saved to: {kept.path}\n"
        "Read that file with the Read tool (offset and limit page through it) instead of running "
        "the command again.\n\n"
        f"Preview (first {len(head):,} characters):\n{_line_ended(head)}"
        + (f"...\n\nLast {len(tail):,} characters:\n{_line_ended(tail)}" if tail else "")
        + "</persisted-output>"
    )


def text_of(blocks: Sequence[ContentBlock]) -> str:
    """A result's text, as the budget counts it (its text blocks joined)."""
    return "".join(block.text for block in blocks if isinstance(block, TextContent))


def with_preview(
    blocks: Sequence[ContentBlock], kept: KeptOutput, text: str, budget: int, notes: Sequence[str]
) -> list[ContentBlock]:
    """The result's blocks with its text replaced by the preview of the kept copy, sized to
    leave the notes their room within `budget`."""
    room = budget
    if notes:
        room -= min(sum(len(note) + 2 for note in notes), int(budget * NOTES_SHARE)) + 2
    shown: list[ContentBlock] = [TextContent(text=preview(kept, text, room))]
    return shown + [block for block in blocks if not isinstance(block, TextContent)]


class KeptOutputs:
    """The kept results of every session, under `root`: at most `per_session_bytes` for one
    session, `principal_share` of `total_bytes` for one principal's sessions together (attacker
    rounds 141 and 142: one tenant's filled it all, and the others' results were cut), and
    `total_bytes` for all of them."""

    def __init__(
        self,
        root: Path,
        per_session_bytes: int,
        total_bytes: int = 1 << 30,
        principal_share: float = 0.5,
    ) -> None:
        self.root = root
        self._per_session = per_session_bytes
        self._total = total_bytes
        self._per_principal = int(total_bytes * principal_share)
        self._used: dict[str, int] = {}
        self._owners: dict[str, str] = {}
        """Whose each session with kept outputs is."""
        self._by_principal: dict[str, int] = {}

    def prepare(self) -> None:
        """Make the directory (only the daemon may enter it), emptied of an earlier run's."""
        if self.root.is_symlink():
            raise OSError(errno.ELOOP, "the kept outputs' directory is a symbolic link", self.root)
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(mode=0o700, parents=True)

    def folder(self, session_id: str) -> Path:
        """Where a session's results are kept: its id made safe, and a digest of it (two ids
        made safe alike never share a folder)."""
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        return self.root / f"{_SAFE_ID.sub('_', session_id)[:48]}-{digest}"

    async def keep(self, session: Session, tool_use_id: str, text: str) -> KeptOutput | None:
        """Save `text` for the session; None when the session is closed, a share is used up or
        the disk refused (logged), so the caller cuts the result as usual."""
        data = text.encode("utf-8", "surrogateescape")
        used = self._used.get(session.id, 0)
        over = used + len(data) > self._per_session
        over = over or self._by_principal.get(session.owner, 0) + len(data) > self._per_principal
        if session.closed or over or sum(self._used.values()) + len(data) > self._total:
            return None
        self._count(session, len(data))  # reserved now: concurrent calls count too
        # Random, not a counter: a name says nothing about other sessions' outputs.
        name = f"{secrets.token_hex(4)}-{_SAFE_ID.sub('_', tool_use_id)[:64]}.txt"
        path = self.folder(session.id) / name
        try:
            await asyncio.to_thread(_write_new, path, data)
        except OSError as exc:
            if session.id in self._used:
                self._count(session, -len(data))
            log.warning("could not keep an output of %d bytes: %s", len(data), exc)
            return None
        if session.closed:  # closed while it was written: its folder went, or goes now
            self.remove_session(session.id)
            return None
        return KeptOutput(path=path, chars=len(text), size_bytes=len(data))

    def _count(self, session: Session, size: int) -> None:
        self._used[session.id] = self._used.get(session.id, 0) + size
        self._owners[session.id] = session.owner
        self._by_principal[session.owner] = self._by_principal.get(session.owner, 0) + size

    def remove_session(self, session_id: str) -> None:
        """Delete a closed session's results (a session never reopens: its share goes too)."""
        used = self._used.pop(session_id, 0)
        owner = self._owners.pop(session_id, None)
        if owner is not None:
            self._by_principal[owner] -= used
            if not self._by_principal[owner]:
                del self._by_principal[owner]
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.folder(session_id))


def _write_new(path: Path, data: bytes) -> None:
    """Write a new file (never an existing one, never through a link) in a folder made here."""
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(mode=0o700)  # the root is the daemon's alone: nobody races this
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
