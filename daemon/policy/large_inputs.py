"""Whose turn it is to have a large input's policy document encoded and sent to OPA.

A large input's JSON body can be six times its size (a control character is six bytes as JSON),
so one exists at a time (attacker round 106), taken in turns by principal
(daemon.host.turns).
"""

from __future__ import annotations

from daemon.host.turns import PrincipalTurns


class LargeInputTurns(PrincipalTurns):
    """One large input at a time overall, taken in turns by principal."""

    def __init__(self) -> None:
        super().__init__(1)
