"""Fresh workspaces kept after their sessions closed (CloseSession without delete_workspace), and
their end.

Nobody can open a session over a kept workspace (it is the daemon's, attacker round 78), so its
owner cannot delete it either: each is deleted `keep_s` after its session closed (attacker round
98: kept workspaces filled the filesystem all principals share; they now count against their
principal's share until they go). Which are kept, whose, and since when is written to a file of
the state directory that only the daemon's user may read or write, so a restarted daemon still
ends them. A file that is not what the daemon wrote is never acted on: nothing is deleted on a
guess.

A fresh workspace is in the registry from before it is made, as open: one whose session was still
open when the daemon stopped (a restart, a crash) is kept from the next start on, and deleted in
its turn (attacker round 170: they were in no registry, never deleted, and counted against
nobody). A principal keeps at most `max_per_principal` of them, counted with its open sessions
(attacker round 169: a loop of OpenSession and CloseSession kept one each, 57 a second, and every
close rewrote the growing registry on the event loop). The registry is written in a worker
thread; changes made at once share a write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.errors import Overloaded, TooljailError
from daemon.host.private_file import replace_json
from daemon.sessions.disk import FreshWorkspaces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Kept:
    owner: str
    closed_at: float
    """When its session closed; while `open`, when it was registered."""
    open: bool = False
    """Its session is open (or opening): not kept yet, never deleted here."""
    filesystem: str = ""
    """The name of where it was made (`FreshWorkspaces.ready`): only there is it looked for,
    and deleted; "" for one an older daemon recorded (it takes the name of where it is seen,
    `_unnamed`)."""


class KeptWorkspaces:
    """The kept fresh workspaces, each deleted `keep_s` after its session closed (0: never)."""

    def __init__(
        self,
        registry: Path,
        fresh: FreshWorkspaces,
        keep_s: float,
        clock: Callable[[], float] = time.time,
        *,
        max_per_principal: int = 1024,
    ) -> None:
        self._registry = registry
        self._fresh = fresh
        self._keep_s = keep_s
        self._clock = clock
        self._max_per_principal = max_per_principal
        self._kept = _load(registry)
        left_open = [folder for folder, kept in self._kept.items() if kept.open]
        for folder in left_open:  # no session outlives the daemon: closed as it starts
            self._kept[folder] = dataclasses.replace(
                self._kept[folder], closed_at=clock(), open=False
            )
        if left_open:
            log.info(
                "%d workspaces of sessions open when the daemon stopped are kept", len(left_open)
            )
        self._owners = Counter(kept.owner for kept in self._kept.values())
        self._changes = 0
        """Changes made to `_kept` so far; `_on_disk`: how many of them the file holds."""
        self._on_disk = 0
        self._writing = asyncio.Lock()
        self._file = threading.Lock()

    def kept(self) -> dict[Path, str]:
        """Kept workspaces and their owners."""
        return {folder: kept.owner for folder, kept in self._kept.items() if not kept.open}

    def count(self, owner: str) -> int:
        """How many workspaces of `owner`'s are kept."""
        return self._owners[owner]

    def refuse_past_room(self, principal: str, sessions: int) -> None:
        """Overloaded unless `principal`'s kept workspaces and its `sessions` (open or opening,
        a new fresh one among them) are within its limit: then each of those sessions can keep
        its workspace when it closes, the idle sweeper's closes too."""
        kept = self._owners[principal]
        if kept + sessions <= self._max_per_principal:
            return
        raise Overloaded(
            f"principal {principal!r} has {kept} workspaces kept after their sessions closed and "
            f"{sessions - 1} open or opening besides this one; together they may be at most "
            f"{self._max_per_principal} (workspaces.max_kept_per_principal), so no session over a "
            "fresh workspace opens now. Close sessions with delete_workspace=true, open one over "
            "an existing directory, or wait until kept workspaces are deleted "
            f"({_kept_for(self._keep_s)} after their sessions closed)"
        )

    async def opening(self, folder: Path, owner: str) -> None:
        """`folder` is about to be made for a session of `owner`'s (before it is)."""
        filesystem = await self._fresh.ready()
        self._forget(folder)
        self._kept[folder] = _Kept(owner, self._clock(), open=True, filesystem=filesystem)
        await self._save()

    async def closed(self, folder: Path, owner: str, *, deleted: bool) -> None:
        """The session `folder` was made for closed (or never opened): it is forgotten when it
        was `deleted`, kept from now on otherwise (also when deleting it failed: it goes in its
        turn)."""
        registered = self._kept.get(folder)
        filesystem = registered.filesystem if registered is not None else ""
        if not deleted and not filesystem:  # opened before they were named
            filesystem = await self._seen_on(folder)
        self._forget(folder)
        if not deleted:
            self._kept[folder] = _Kept(owner, self._clock(), filesystem=filesystem)
            self._owners[owner] += 1
        await self._save()

    async def _seen_on(self, folder: Path) -> str:
        """The name of the place in view when `folder` is there; "" when it is not, or the
        place cannot be in view."""
        try:
            in_view = await self._fresh.ready()
        except (OSError, TooljailError):
            return ""
        return in_view if os.path.lexists(folder) else ""

    async def sweep(self) -> int:
        """Delete the workspaces kept longer than `keep_s` (with 0, none: only those an operator
        removed are forgotten); how many went."""
        if not self._owners:  # nothing kept (open ones are their sessions')
            return 0
        try:
            # Before a missing folder is taken for gone: the empty mount point of a filesystem
            # not mounted yet (after a reboot) shows none of them (attacker round 171).
            in_view = await self._fresh.ready()
        except (OSError, TooljailError) as exc:  # nothing is forgotten, nor deleted, on a guess
            log.warning("the kept workspaces are not in view (%s): none is deleted yet", exc)
            return 0
        due = self._clock() - self._keep_s
        gone = changed = elsewhere = unplaced = 0
        in_view_now = True
        for recorded, kept in list(self._kept.items()):
            if kept.open:  # its session's (being made, maybe)
                continue
            if not in_view_now and not await self._still_in_view(in_view):
                break  # nothing more is taken for gone on a guess: the next sweep goes on
            in_view_now = True
            # Where its filesystem is now: the sessions root may have moved (its setting
            # changed, or a link to it re-pointed) with the filesystem the same (attacker round
            # 177: every workspace kept before was taken for gone).
            folder = self._fresh.folder_for(recorded.name)
            if _unnamed(kept.filesystem):
                # Recorded before they were named: it is where it is seen, and left alone while
                # it is not (attacker round 173: taken for the first place in view, those of a
                # filesystem unmounted then were forgotten on the bare folder).
                if not os.path.lexists(folder):
                    unplaced += 1
                    continue
                kept = self._kept[recorded] = dataclasses.replace(kept, filesystem=in_view)
                changed += 1
            if kept.filesystem != in_view:
                # Made on another filesystem than the one in view (the workspaces' settings
                # changed, or it was unmounted meanwhile): left as it is (attacker round 172).
                elsewhere += 1
                continue
            if folder != recorded:
                if folder in self._kept:  # another entry is that folder's: this one is stale
                    unplaced += 1
                    continue
                self._kept[folder] = self._kept.pop(recorded)
                changed += 1
            if not os.path.lexists(folder):  # gone already (an operator removed it)
                self._forget(folder)
                gone += 1
                continue
            if not self._keep_s or kept.closed_at > due:
                continue
            # Unmounted meanwhile, the folders after this one would all be missing (attacker
            # round 179: a lazy unmount during a deletion; every later entry was forgotten).
            in_view_now = False
            try:
                deleted = await self._fresh.delete(folder, kept.owner)
            except Exception:  # a failed deletion is tried again at the next sweep
                log.exception("deleting the kept workspace %s failed", folder)
                continue
            if deleted:
                log.info("deleted the workspace %s, kept since its session closed", folder)
                self._forget(folder)
                gone += 1
        if elsewhere or unplaced:
            log.warning(
                "%d kept workspaces were made on another filesystem than the one now at %s "
                "(workspaces settings changed?), and %d registered before filesystems were named "
                "are not there: none of them is deleted, and they count against their "
                "principals, until they are in view again (docs/operations.md)",
                elsewhere,
                self._fresh.folder_for(""),
                unplaced,
            )
        if gone or changed:
            await self._save()
        return gone

    async def _still_in_view(self, in_view: str) -> bool:
        """Whether the place `in_view` is still the one in view (mounted again if it was
        unmounted), so that a folder missing there is gone."""
        try:
            return await self._fresh.ready() == in_view
        except (OSError, TooljailError) as exc:
            log.warning("the kept workspaces went out of view (%s): the sweep stops", exc)
            return False

    def _forget(self, folder: Path) -> None:
        kept = self._kept.pop(folder, None)
        if kept is not None and not kept.open:
            self._owners[kept.owner] -= 1
            if not self._owners[kept.owner]:
                del self._owners[kept.owner]

    async def _save(self) -> None:
        """Write the registry as it is now, in a worker thread. A change made while another
        write runs waits for it, then one write takes every change made meanwhile."""
        self._changes += 1
        mine = self._changes
        async with self._writing:
            if self._on_disk >= mine:
                return
            upto, kept = self._changes, dict(self._kept)
            await asyncio.to_thread(self._write, upto, kept)

    def _write(self, upto: int, kept: dict[Path, _Kept]) -> None:
        # Under its own lock, and never older over newer: a write whose waiter was cancelled
        # still runs in its thread beside the next one.
        with self._file:
            if self._on_disk >= upto:
                return
            document = {
                str(folder): {
                    "owner": entry.owner,
                    "closed_at": entry.closed_at,
                    **({"open": True} if entry.open else {}),
                    **({"filesystem": entry.filesystem} if entry.filesystem else {}),
                }
                for folder, entry in kept.items()
            }
            self._registry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            replace_json(self._registry, document)
            self._on_disk = upto


def _unnamed(filesystem: str) -> bool:
    """Whether an entry's filesystem is not named as this daemon names them: recorded before
    names were, or by a daemon that named a filesystem mounted from a device of an operator's by
    its id (it is in view there under the configured image's name now)."""
    return not filesystem or filesystem.startswith("btrfs-fsid:")


def _kept_for(keep_s: float) -> str:
    return (
        f"{keep_s:g} s (workspaces.keep_closed_s)" if keep_s else "until an operator removes them"
    )


_NOT_OURS = "%s is not what the daemon wrote: no kept workspace will be deleted"


def _load(registry: Path) -> dict[Path, _Kept]:
    """What the file says; nothing (logged) when it is missing or not what the daemon wrote."""
    try:
        with registry.open(encoding="utf-8") as stream:
            found = json.load(stream)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.error("cannot read %s (%s): no kept workspace will be deleted", registry, exc)
        return {}
    if not isinstance(found, dict):
        log.error(_NOT_OURS, registry)
        return {}
    kept = {}
    for folder, entry in found.items():
        if (
            isinstance(entry, dict)
            and Path(folder).is_absolute()
            and Path(folder).name not in ("", ".", "..")  # looked for by it (`sweep`)
            and isinstance(entry.get("owner"), str)
            and type(entry.get("closed_at")) in (int, float)
            and math.isfinite(entry["closed_at"])
            and type(entry.get("open", False)) is bool
            and type(entry.get("filesystem", "")) is str
        ):
            kept[Path(folder)] = _Kept(
                entry["owner"],
                float(entry["closed_at"]),
                entry.get("open", False),
                entry.get("filesystem", ""),
            )
        else:
            log.error(_NOT_OURS, registry)
            return {}
    return kept
