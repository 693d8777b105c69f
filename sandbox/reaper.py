"""Finding and removing labelled sandbox containers, whatever state they are in.

Blocking docker SDK calls: the async side runs them in worker threads. Removal treats "already
gone" and "removal already in progress" as success, so it is idempotent and safe to race with
the engine's own auto-removal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import docker
import docker.errors
import requests

from sandbox.backend import LABEL_INSTANCE, LABEL_MANAGED

log = logging.getLogger(__name__)


def instance_filters(instance_id: str) -> dict[str, list[str]]:
    """Docker list filters selecting exactly one daemon instance's containers (labels are ANDed)."""
    return {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_INSTANCE}={instance_id}"]}


def list_instance_containers(api: docker.APIClient, instance_id: str) -> list[tuple[str, float]]:
    """Ids and creation times (unix seconds) of the instance's containers in every state."""
    found = api.containers(all=True, filters=instance_filters(instance_id))
    return [(str(c["Id"]), float(c.get("Created", 0))) for c in found]


def remove_container(
    api: docker.APIClient, container_id: str, *, going_counts: bool = True
) -> bool:
    """Kill and remove one container; True when it is gone (or, with `going_counts`, being
    removed by another request), False on failure."""
    try:
        api.remove_container(container_id, force=True, v=True)
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError as exc:
        # 409: the engine is already removing it (auto-remove or the sweep raced with us): going,
        # which is not gone while a process of it may not die yet (attacker round 97's lead).
        if exc.status_code == 409 and "in progress" in str(exc):
            return going_counts
        log.warning("could not remove sandbox container %s: %s", container_id[:12], exc)
        return False
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        # The engine is unreachable (stopped, restarting): the periodic sweep retries later.
        log.warning("could not remove sandbox container %s: %s", container_id[:12], exc)
        return False
    return True


def still_running(api: docker.APIClient, container_id: str) -> bool:
    """Whether the container exists and runs (a process of it is alive); False when it is gone,
    stopped, or the engine cannot tell (then nothing is waited for: the periodic sweep goes on)."""
    try:
        state = api.inspect_container(container_id).get("State") or {}
    except docker.errors.NotFound:
        return False
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        log.warning("could not look at sandbox container %s: %s", container_id[:12], exc)
        return False
    return bool(state.get("Running") or state.get("Restarting") or state.get("Pid"))


def exists(api: docker.APIClient, container_id: str) -> bool:
    """Whether the container is still there, in any state; True when the engine cannot tell
    (what it holds is not assumed gone)."""
    try:
        api.inspect_container(container_id)
    except docker.errors.NotFound:
        return False
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        log.warning("could not look at sandbox container %s: %s", container_id[:12], exc)
    return True


def remove_all(api: docker.APIClient, container_ids: Iterable[str]) -> int:
    """Remove each container; returns how many are gone. Never raises for one bad container."""
    return sum(1 for cid in container_ids if remove_container(api, cid))


def reap_instance(
    api: docker.APIClient,
    instance_id: str,
    *,
    keep: frozenset[str] = frozenset(),
    min_age_s: float = 0.0,
) -> int:
    """Remove the instance's containers in any state, except those in `keep` or younger than
    `min_age_s` (which may be starting right now); returns how many were removed."""
    now = time.time()
    doomed = [
        cid
        for cid, created in list_instance_containers(api, instance_id)
        if cid not in keep and now - created >= min_age_s
    ]
    removed = remove_all(api, doomed)
    if removed:
        log.info("reaped %d sandbox container(s) of instance %s", removed, instance_id)
    return removed


def wait_until_gone(api: docker.APIClient, instance_id: str, timeout_s: float) -> bool:
    """Poll until no container of the instance is listed (auto-removals finish asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = list_instance_containers(api, instance_id)
        if not left:
            return True
        if time.monotonic() >= deadline:
            log.warning("%d sandbox container(s) of instance %s remain", len(left), instance_id)
            return False
        remove_all(api, (cid for cid, _ in left))
        time.sleep(0.05)
