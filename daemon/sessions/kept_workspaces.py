"""Fresh workspaces kept after their sessions closed (CloseSession without delete_workspace), and
their end.

Nobody can open a session over a kept workspace (it is the daemon's, attacker round 78), so its
owner cannot delete it either: each is deleted `keep_s` after its session closed (attacker round
98: kept workspaces filled the filesystem all principals share; they now count against their
principal's share until they go). Which are kept, whose, and since when is written to a file of
the state directory that only the daemon's user may read or write, so a restarted daemon still
ends them. A file that is not what the daemon wrote is never acted on: nothing is deleted on a
guess.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.host.private_file import replace_json
from daemon.sessions.disk import FreshWorkspaces

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Kept:
    owner: str
    closed_at: float


class KeptWorkspaces:
    """The kept fresh workspaces, each deleted `keep_s` after its session closed (0: never)."""

    def __init__(
        self,
        registry: Path,
        fresh: FreshWorkspaces,
        keep_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._registry = registry
        self._fresh = fresh
        self._keep_s = keep_s
        self._clock = clock
        self._kept = _load(registry)

    def kept(self) -> dict[Path, str]:
        """Kept workspaces and their owners."""
        return {folder: kept.owner for folder, kept in self._kept.items()}

    def record(self, folder: Path, owner: str) -> None:
        """`folder`, made for a session of `owner`'s, was kept when the session closed."""
        self._kept[folder] = _Kept(owner, self._clock())
        self._save()

    async def sweep(self) -> int:
        """Delete the workspaces kept longer than `keep_s`; how many went."""
        if not self._keep_s:
            return 0
        due = self._clock() - self._keep_s
        gone = 0
        for folder, kept in list(self._kept.items()):
            if kept.closed_at > due:
                continue
            if not os.path.lexists(folder):  # gone already (an operator removed it)
                del self._kept[folder]
                gone += 1
                continue
            try:
                deleted = await self._fresh.delete(folder, kept.owner)
            except Exception:  # a failed deletion is tried again at the next sweep
                log.exception("deleting the kept workspace %s failed", folder)
                continue
            if deleted:
                log.info("deleted the workspace %s, kept since its session closed", folder)
                del self._kept[folder]
                gone += 1
        if gone:
            self._save()
        return gone

    def _save(self) -> None:
        document = {
            str(folder): {"owner": kept.owner, "closed_at": kept.closed_at}
            for folder, kept in self._kept.items()
        }
        self._registry.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        replace_json(self._registry, document)


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
            and isinstance(entry.get("owner"), str)
            and type(entry.get("closed_at")) in (int, float)
            and math.isfinite(entry["closed_at"])
        ):
            kept[Path(folder)] = _Kept(entry["owner"], float(entry["closed_at"]))
        else:
            log.error(_NOT_OURS, registry)
            return {}
    return kept
