"""Turns taken by principal for work only a few may do at once: each principal waits first behind
its own, so the shared line holds at most a few calls per principal (one unless told), and
another principal waits for at most those of each of the others (a single line would let one
principal's many calls hold up everyone else's)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class PrincipalTurns:
    """`at_once` turns overall, `per_principal` per principal, first come first served."""

    def __init__(self, at_once: int = 1, *, per_principal: int = 1) -> None:
        self._shared = asyncio.Semaphore(at_once)
        self._per_principal = per_principal
        self._own: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def turn(self, principal: str) -> AsyncIterator[None]:
        """Held for the length of the work."""
        own = self._own.setdefault(principal, asyncio.Semaphore(self._per_principal))
        self._users[principal] = self._users.get(principal, 0) + 1
        try:
            async with own, self._shared:
                yield
        finally:
            self._users[principal] -= 1
            if not self._users[principal]:  # nobody of that principal waits: forget its own
                del self._users[principal]
                del self._own[principal]

    def waiting(self, principal: str) -> int:
        """How many of the principal's calls hold or wait for a turn."""
        return self._users.get(principal, 0)
