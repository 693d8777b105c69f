"""The unit's hardening directives: which are on, how a drop-in turns each off, and which ones
keep the daemon from serving (found by switching them back on in halves, as a bisection does).

A drop-in can turn a directive off but not remove it, so each has its "off" assignment below:
booleans take `no`; list settings are emptied (for SystemCallFilter=, RestrictAddressFamilies=
and SystemCallArchitectures= an empty assignment resets them to "no restriction"); the capability
bounding set is opened with `~` (all but none), since an empty assignment there means "none".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tests.service.harness import UNIT, Machine

#: Drop-in assignment that turns each hardening directive of the unit off.
OFF: dict[str, str] = {
    "NoNewPrivileges": "no",
    "CapabilityBoundingSet": "~",
    "ProtectSystem": "no",
    "ProtectHome": "no",
    "PrivateTmp": "no",
    "PrivateDevices": "no",
    "ProtectKernelTunables": "no",
    "ProtectKernelModules": "no",
    "ProtectKernelLogs": "no",
    "ProtectControlGroups": "no",
    "ProtectClock": "no",
    "ProtectHostname": "no",
    "ProtectProc": "default",
    "PrivateMounts": "no",
    "RestrictAddressFamilies": "",
    "RestrictNamespaces": "no",
    "RestrictRealtime": "no",
    "RestrictSUIDSGID": "no",
    "LockPersonality": "no",
    "RemoveIPC": "no",
    "MemoryDenyWriteExecute": "no",
    "SystemCallArchitectures": "",
    "SystemCallFilter": "",
}
#: In the hardening section but nothing to turn off: AmbientCapabilities= is empty (the
#: default), SystemCallErrorNumber= only says how SystemCallFilter= refuses.
NOT_SWITCHES = frozenset({"AmbientCapabilities", "SystemCallErrorNumber"})

#: What the unit as shipped needs to serve under systemd 252 (Debian bookworm), each with the
#: reason test_shipped_unit_serves_with_its_hardening found. Every test but that
#: one runs with these, so each can test its own subject; this is empty once the unit is fixed.
UNIT_FIXES: dict[str, tuple[str, str]] = {}


def unit_fixes_drop_in() -> str:
    lines = [
        "# What the shipped unit lacks under systemd 252 (tests/service/hardening.py).",
        "[Service]",
    ]
    lines += [f"{name}={value}" for name, (value, _) in UNIT_FIXES.items()]
    return "\n".join(lines) + "\n"


def hardening_directives(unit_text: str) -> list[str]:
    """The directive names of the unit's hardening section, in order."""
    section = unit_text.split("# --- Hardening", 1)[1].split("[Install]", 1)[0]
    names = []
    for line in section.splitlines():
        line = line.strip()
        name = line.split("=", 1)[0]
        if line and not line.startswith("#") and "=" in line and name not in names:
            names.append(name)
    return names


def off_drop_in(directives: Sequence[str]) -> str:
    lines = ["# Hardening directives turned off to find which one breaks the daemon.", "[Service]"]
    lines += [f"{name}={OFF[name]}" for name in directives]
    return "\n".join(lines) + "\n"


def serving_problems(machine: Machine) -> list[str]:
    """Starts the service and tries what each part of the daemon needs (the service manager's
    READY, OPA, a host-side read, a Landlock-confined search, a sandboxed command); the ones that
    failed, each with what it said. Stops the service again."""
    after = machine.cursor()
    started = machine.start()
    shown = machine.show("ActiveState", "SubState", "Result")
    if started.returncode != 0 or shown["ActiveState"] != "active":
        tail = machine.journal_text(after).splitlines()[-6:]
        machine.systemctl("stop", UNIT, check=False)
        return [f"start: {shown} {' | '.join(tail)}"]
    problems = []
    hello = machine.seed_workspace()
    checks = (
        ("Read", {"file_path": str(hello)}, "hello from the service"),
        ("Grep", {"pattern": "hello", "path": str(machine.workspace)}, "hello.txt"),
        ("Bash", {"command": "echo hi from the sandbox"}, "hi from the sandbox"),
    )
    for tool, tool_input, expected in checks:
        answer = machine.call(tool, tool_input)
        if answer.outcome != "ALLOW" or answer.is_error or expected not in answer.text:
            problems.append(f"{tool}: {answer}")
    machine.systemctl("stop", UNIT, check=False)
    return problems


def fresh_workspace(machine: Machine) -> None:
    """A failed start may leave a half-made workspace the next start refuses (its mode never
    set); each trial starts from none."""
    machine.run("rm", "-rf", str(machine.workspace))
    machine.systemctl("reset-failed", UNIT, check=False)


def culprits(
    directives: Sequence[str], problems_with_off: Callable[[Sequence[str]], list[str]]
) -> list[str]:
    """A smallest set of directives whose being off makes the daemon serve: start with all off,
    then switch them back on in halves, quarters..., keeping each chunk on when it still serves.
    Assumes it serves with all of them off (the caller checks)."""
    off = list(directives)
    chunk = max(1, len(off) // 2)
    while True:
        i = 0
        while i < len(off):
            trial = off[:i] + off[i + chunk :]
            if not problems_with_off(trial):
                off = trial
            else:
                i += chunk
        if chunk == 1:
            return off
        chunk //= 2
