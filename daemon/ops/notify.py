"""The systemd notify protocol (sd_notify(3)) without libsystemd: readiness, status, watchdog.

systemd passes a datagram socket in NOTIFY_SOCKET (a path, or "@name" for an abstract socket) and
reads newline-separated assignments from it: READY=1 once the service is up, STATUS=... for
`systemctl status`, WATCHDOG=1 as a keep-alive, RELOADING=1 and STOPPING=1 around reloads and
shutdown. Outside systemd NOTIFY_SOCKET is unset and every call here does nothing.

A failed send is logged and reported as False, never raised: a daemon must not stop serving
because the service manager's socket hiccuped.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping

log = logging.getLogger(__name__)

#: How long one send may block (systemd reads its socket promptly; this only bounds a stuck one).
_SEND_TIMEOUT_S = 2.0

#: The variables systemd sets for the notify protocol; children must not inherit them.
NOTIFY_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

HealthCheck = Callable[[], bool | Awaitable[bool]]
"""Says whether the daemon is healthy enough for a watchdog ping (sync or async)."""


def _socket_address(raw: str) -> str | None:
    """The AF_UNIX address for a NOTIFY_SOCKET value, or None when this module cannot use it."""
    if raw.startswith("@"):
        # Abstract namespace: the leading "@" stands for a NUL byte.
        return "\0" + raw[1:]
    if raw.startswith("/"):
        return raw
    # systemd 254+ may also hand out "vsock:..." addresses (for VMs); tooljail runs on the host.
    return None


def watchdog_interval(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between watchdog pings, or None when no watchdog is armed for this process.

    Half of WATCHDOG_USEC, as sd_watchdog_enabled(3) recommends, so one late ping does not get
    the service killed. When WATCHDOG_PID is set and names another process (a parent that passed
    its environment on), the watchdog is not ours.
    """
    env = os.environ if environ is None else environ
    raw_usec = env.get("WATCHDOG_USEC", "")
    if not raw_usec.isdigit() or int(raw_usec) == 0:
        return None
    raw_pid = env.get("WATCHDOG_PID", "")
    if raw_pid and (not raw_pid.isdigit() or int(raw_pid) != os.getpid()):
        return None
    return int(raw_usec) / 1_000_000 / 2


class Notifier:
    """Sends notify messages to the service manager; a no-op without a socket.

    Args:
        notify_socket: The NOTIFY_SOCKET value ("/path" or "@abstract"); None or "" disables.
        watchdog_s: Seconds between watchdog pings (see `watchdog_interval`); None: no watchdog.
    """

    def __init__(self, notify_socket: str | None, watchdog_s: float | None = None) -> None:
        self._raw = notify_socket or ""
        self._address = _socket_address(self._raw) if self._raw else None
        if self._raw and self._address is None:
            log.warning(
                "NOTIFY_SOCKET=%s is not a path or an abstract socket; systemd notifications "
                "are disabled",
                self._raw,
            )
        self.watchdog_s = watchdog_s if self._address is not None else None

    @classmethod
    def from_environment(
        cls, environ: MutableMapping[str, str] | None = None, *, unset: bool = True
    ) -> Notifier:
        """The notifier systemd set up for this process.

        Args:
            environ: Where to read the variables (default: os.environ).
            unset: Remove NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID afterwards, so child
                processes (OPA, docker) neither inherit nor misuse them.
        """
        env = os.environ if environ is None else environ
        notifier = cls(env.get("NOTIFY_SOCKET"), watchdog_interval(env))
        if unset:
            for name in NOTIFY_VARIABLES:
                env.pop(name, None)
        return notifier

    @property
    def enabled(self) -> bool:
        """True when messages go somewhere."""
        return self._address is not None

    def notify(self, *assignments: str) -> bool:
        """Send one datagram of KEY=VALUE assignments; True when it was sent."""
        if self._address is None or not assignments:
            return False
        payload = "\n".join(assignments).encode("utf-8")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.settimeout(_SEND_TIMEOUT_S)
                sock.connect(self._address)
                sock.send(payload)
        except OSError as exc:
            log.warning("could not notify systemd at %s (%s): %s", self._raw, assignments[0], exc)
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """The service is up: listeners bound, the policy engine answering, the pool started."""
        return self.notify("READY=1", *_status(status))

    def status(self, text: str) -> bool:
        """A one-line status shown by `systemctl status`."""
        return self.notify(*_status(text))

    def watchdog(self) -> bool:
        """Keep-alive: systemd restarts the service when these stop for WatchdogSec."""
        return self.notify("WATCHDOG=1")

    def reloading(self, status: str | None = None) -> bool:
        """A reload started; send `ready()` when it is over, whether it worked or not.

        MONOTONIC_USEC (CLOCK_MONOTONIC) lets systemd 253+ tell this reload from an older one.
        """
        now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1_000
        return self.notify("RELOADING=1", f"MONOTONIC_USEC={now_usec}", *_status(status))

    def stopping(self, status: str | None = None) -> bool:
        """Shutdown started (draining calls, removing containers)."""
        return self.notify("STOPPING=1", *_status(status))

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for more time to start or stop (counted from now), e.g. while the pool warms."""
        return self.notify(f"EXTEND_TIMEOUT_USEC={max(1, int(seconds * 1_000_000))}")


def _status(text: str | None) -> tuple[str, ...]:
    # One assignment per line: a newline inside the text would start a bogus assignment.
    return () if text is None else (f"STATUS={' '.join(text.splitlines())}",)


async def _is_healthy(check: HealthCheck, timeout_s: float) -> bool:
    try:
        verdict = check()
        if inspect.isawaitable(verdict):
            verdict = await asyncio.wait_for(verdict, timeout_s)
    except Exception as exc:  # noqa: BLE001 - any failure of the check means "do not ping"
        log.warning("watchdog health check failed: %s", exc)
        return False
    return bool(verdict)


async def run_watchdog(notifier: Notifier, healthy: HealthCheck, interval_s: float) -> None:
    """Ping WATCHDOG=1 every `interval_s` while `healthy()` says so; runs until cancelled.

    An unhealthy daemon simply stops pinging, and systemd restarts it once WatchdogSec passes.
    The check should therefore mean "this process is wedged", not "a dependency is down" (a
    restart would not bring back an external OPA), and it must stay true while draining on
    SIGTERM, or a slow drain ends in a watchdog kill.
    """
    was_healthy = True
    while True:
        ok = await _is_healthy(healthy, interval_s)
        if ok:
            notifier.watchdog()
        if ok != was_healthy:
            if ok:
                log.info("healthy again; watchdog pings resumed")
            else:
                log.warning("unhealthy; watchdog pings paused (systemd restarts us if it lasts)")
            was_healthy = ok
        await asyncio.sleep(interval_s)


def start_watchdog(notifier: Notifier, healthy: HealthCheck) -> asyncio.Task[None] | None:
    """Start `run_watchdog` at the notifier's interval; None when no watchdog is armed.

    Call it from the event loop once the daemon is ready; cancel the task last on shutdown.
    """
    if not notifier.enabled or notifier.watchdog_s is None:
        return None
    return asyncio.create_task(
        run_watchdog(notifier, healthy, notifier.watchdog_s), name="systemd-watchdog"
    )
