"""Whose turn it is to have a large input's policy document encoded and sent to OPA.

A large input's JSON body can be six times its size (a control character is six bytes as JSON),
so one exists at a time (attacker round 106). A single line would let one principal's many large
inputs hold up everyone else's; so each principal waits first behind its own, and the shared
line holds at most one call per principal: another principal's large input waits for at most
one of each of the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class LargeInputTurns:
    """One large input at a time overall, taken in turns by principal."""

    def __init__(self) -> None:
        self._shared = asyncio.Lock()
        self._own: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def turn(self, principal: str) -> AsyncIterator[None]:
        """Held from encoding the document to OPA's answer."""
        own = self._own.setdefault(principal, asyncio.Lock())
        self._users[principal] = self._users.get(principal, 0) + 1
        try:
            async with own, self._shared:
                yield
        finally:
            self._users[principal] -= 1
            if not self._users[principal]:  # nobody of that principal waits: forget its lock
                del self._users[principal]
                del self._own[principal]

    def waiting(self, principal: str) -> int:
        """How many of the principal's calls hold or wait for a turn."""
        return self._users.get(principal, 0)
