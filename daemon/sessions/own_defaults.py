"""Default sessions in folders of their own.

A principal's default session (a call with no session id) works in the configured workspace
only when the principal is an operator (the Unix socket's, or an admin) or the operator shares
that folder with every principal (`workspaces.tenant_defaults = "shared"`). A tenant's (any
other principal's) works in a folder of its own, made where fresh workspaces are on its first call,
with their disk budget: no other tenant's sandbox mounts it, the read-only tools are confined
to it, and nobody but the daemon may make anything where it lies, so no tenant can plant an
entry there, read what another keeps private in it, or fill its disk (attacker round 137 did
all three in the one folder every default session shared). It is found again, by a name
derived from the principal, after a restart, and never deleted.
"""

from __future__ import annotations

import asyncio
import functools
import os

from daemon.errors import RequestError
from daemon.host.pinned import PinnedDirectory
from daemon.sessions.disk import FreshWorkspaces
from daemon.sessions.session import pin_off_loop
from daemon.sessions.store import DEFAULT_SESSION_ID, SessionStore
from daemon.text import wire_safe


class OwnDefaults:
    """Opens default sessions that work in folders of their own, on their first use."""

    def __init__(self, store: SessionStore, fresh: FreshWorkspaces) -> None:
        self._store = store
        self._fresh = fresh
        self._making: dict[str, asyncio.Future[None]] = {}
        """The making of a principal's folder under way: one at a time, finished whatever
        happens to the calls waiting for it (attacker round 142: a first call whose deadline
        ran out left its folder half made, never handed over, and refused for good)."""

    async def ready(self, session_id: str, principal: str) -> None:
        """Open `principal`'s default session when `session_id` names it and it works in a
        folder of its own that is not open yet (RequestError when that folder cannot be made
        or is not the principal's); nothing otherwise, at the cost of a lookup."""
        if session_id not in ("", DEFAULT_SESSION_ID):
            return
        if self._store.own_default_name(principal) is None:
            return
        # Several first calls at once (a batch) wait for one making.
        making = self._making.get(principal)
        if making is None:
            making = asyncio.ensure_future(self._open(principal))
            self._making[principal] = making
            making.add_done_callback(functools.partial(self._made, principal))
        await asyncio.shield(making)

    def _made(self, principal: str, making: asyncio.Future[None]) -> None:
        del self._making[principal]
        if not making.cancelled():
            making.exception()  # told to whoever waited; nobody may have

    async def _open(self, principal: str) -> None:
        name = self._store.own_default_name(principal)
        if name is None:
            return
        owner = self._store.fresh_owner(principal)
        folder = await self._fresh.lasting(name, owner, principal)
        try:
            root = await pin_off_loop(lambda: PinnedDirectory.pin(folder), principal)
        except (OSError, TimeoutError) as exc:
            raise RequestError(
                f"the folder of the default session of {principal!r} ({wire_safe(str(folder))}) "
                f"cannot be opened: {exc}; an operator looks at it"
            ) from exc
        expected = os.geteuid() if owner is None or owner[0] == -1 else owner[0]
        if root.uid != expected:
            root.close()
            # Only the daemon makes anything there: refused rather than taken as this
            # principal's.
            raise RequestError(
                f"the folder of the default session of {principal!r} ({root.path}) belongs to "
                f"uid {root.uid}, not {expected} as the daemon made it; an operator removes or "
                "restores it"
            )
        self._store.adopt_default(
            principal,
            root,
            disk_budget_mb=self._fresh.budget_mb,
            disk_share_mb=self._fresh.share_mb,
        )
