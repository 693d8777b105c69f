"""Whether this host shows every process's command line to every local user.

A sandboxed command runs as `bash -c <command>`, so the command, secrets a model put in it
included, is that process's command line. A container's own PID namespace does not hide it from
the host: /proc there shows every process to every user unless it is mounted with `hidepid`
(attacker round 109: another local user read a tenant's `export TOKEN=...` with `ps`). Passing
the command any other way would change what bash says about it (its syntax errors name `-c` and
a line), so the kernel's option is the fix, and it is the operator's to set: the daemon says so
at start when it can see that the host's /proc has none.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

#: The host's mount table as its init sees it (the daemon's own may differ: the shipped unit
#: mounts /proc with hidepid for itself alone, ProtectProc=invisible).
HOST_MOUNTINFO = Path("/proc/1/mountinfo")
#: hidepid values under which another user's /proc/<pid>/cmdline cannot be read.
_HIDING = {"1", "2", "noaccess", "invisible"}


def hides_processes(mountinfo: str) -> bool | None:
    """Whether the /proc of this mount table keeps users from one another's processes; None
    when it has no /proc."""
    found: bool | None = None
    for line in mountinfo.splitlines():
        fields = line.split(" ")
        if len(fields) < 10 or fields[4] != "/proc":
            continue
        try:
            after = fields.index("-")
        except ValueError:
            continue
        if fields[after + 1 : after + 2] != ["proc"]:
            continue
        options = dict(
            option.partition("=")[::2] for option in ",".join(fields[after + 3 :]).split(",")
        )
        # The last /proc mounted is the one that shows.
        found = options.get("hidepid") in _HIDING
    return found


def warn_when_commands_show(mountinfo_path: Path = HOST_MOUNTINFO) -> bool:
    """Log a warning when the host's /proc shows sandboxed commands to every local user;
    whether it did (nothing is said when the host's mount table cannot be read)."""
    try:
        text = mountinfo_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    if hides_processes(text) is not False:
        return False
    log.warning(
        "every local user of this host can read the command lines of sandboxed commands (and "
        "whatever secrets a model put in them) in /proc: mount /proc with hidepid=invisible "
        "(see docs/operations.md, 'Other local users')"
    )
    return True
