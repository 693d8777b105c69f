"""Background commands and turn budgets under pressure (real Docker, real OPA): sessions closed
while their background commands flood output leave no container behind, every BashOutput answer
stays within its budget, and a turn of flooding calls stays within the turn's budget."""

from __future__ import annotations

import functools
import re
import time
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest

from daemon._generated.tooljail.v1 import executor_pb2 as pb
from sandbox.backend import LABEL_INSTANCE, LABEL_SESSION
from tests.integration.harness import RunningDaemon
from tests.reliability.conftest import Figure, Record
from tests.reliability.support import execute, open_session, scaled, text_of, tool_use, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]

FLOOD = "yes 'background flood 0123456789' | head -c 300000000; sleep 600"
BASH_OUTPUT_BUDGET = 30_000
TURN_BUDGET = 200_000


def _session_containers(daemon: RunningDaemon, session_id: str) -> int:
    labels = [f"{LABEL_INSTANCE}={daemon.daemon.instance_id}", f"{LABEL_SESSION}={session_id}"]
    client = docker.from_env()
    try:
        return len(client.api.containers(all=True, filters={"label": labels}))
    finally:
        client.close()


def _all_have(daemon: RunningDaemon, sessions: list[str], count: int) -> bool:
    return all(_session_containers(daemon, s) == count for s in sessions)


def _start(daemon: RunningDaemon, session_id: str, command: str) -> str:
    response = execute(
        daemon.stub,
        "Bash",
        {"command": command, "run_in_background": True},
        session_id=session_id,
    )
    found = re.search(r"with ID: (bash_[0-9a-f]{8})", text_of(response))
    assert found, text_of(response)
    return found.group(1)


def test_closed_sessions_take_their_flooding_background_commands_along(
    rel_sandbox: RunningDaemon, record: Record, figure: Figure
) -> None:
    rounds = scaled(3, 12)
    held = 0
    largest = 0
    for _ in range(rounds):
        sessions = [open_session(rel_sandbox).id for _ in range(2)]
        shells = {
            s: [_start(rel_sandbox, s, FLOOD), _start(rel_sandbox, s, "sleep 600")]
            for s in sessions
        }
        wait_for(functools.partial(_all_have, rel_sandbox, sessions, 2), 60)
        flooded = 0
        for session_id, ids in shells.items():
            for _ in range(40):  # read as the flood goes on, until it showed up
                answer = execute(
                    rel_sandbox.stub, "BashOutput", {"bash_id": ids[0]}, session_id=session_id
                )
                largest = max(largest, len(text_of(answer)))
                if "background flood" in text_of(answer):
                    flooded += 1
                    break
                time.sleep(0.25)
        with ThreadPoolExecutor(len(sessions)) as pool:
            list(
                pool.map(
                    lambda s: rel_sandbox.stub.CloseSession(
                        pb.CloseSessionRequest(session_id=s), timeout=60
                    ),
                    sessions,
                )
            )
        gone = wait_for(functools.partial(_all_have, rel_sandbox, sessions, 0), 60)
        held += gone and flooded == len(sessions) and largest <= BASH_OUTPUT_BUDGET
    figure("largest BashOutput answer under a flood", f"{largest} characters")
    record("background commands go with their closed session", rounds, held)
    assert held == rounds
    assert largest <= BASH_OUTPUT_BUDGET


def test_a_turn_of_flooding_calls_stays_within_the_turn_budget(
    rel_sandbox: RunningDaemon, record: Record, figure: Figure
) -> None:
    rounds = scaled(2, 6)
    held = 0
    biggest = 0
    for _ in range(rounds):
        uses = [
            tool_use("Bash", {"command": f"head -c 25000 /dev/zero | tr '\\0' {chr(97 + i)}"})
            for i in range(10)
        ]
        answers = list(
            rel_sandbox.stub.ExecuteBatch(pb.ExecuteBatchRequest(tool_uses=uses), timeout=300)
        )
        total = sum(len(text_of(a)) for a in answers)
        biggest = max(biggest, total)
        in_order = [a.result.tool_use_id for a in answers] == [u.id for u in uses]
        held += in_order and total <= TURN_BUDGET and not any(a.result.is_error for a in answers)
    figure("largest flooding turn answered", f"{biggest} characters for 10 calls")
    record("a flooding turn stays within its budget", rounds, held)
    assert held == rounds
