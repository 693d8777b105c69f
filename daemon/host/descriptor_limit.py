"""The process's descriptor limit, checked against what its TCP listeners may hold."""

from __future__ import annotations

import resource

from daemon.errors import TooljailError


def reserve_descriptors(connections: int) -> int:
    """Make sure the TCP listeners' connections (`connections` in all) can take at most half
    of the descriptor limit, raising the soft limit toward the hard one when needed; the limit
    in force is returned. TooljailError when even the hard limit is too small: a flood of
    connections would otherwise leave the daemon no descriptor for its own work (attacker round
    163: 19,990 idle connections reached a 20,000 limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * connections
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise TooljailError(
            f"tcp.max_connections allows {connections} connections in all, more than half of "
            f"the descriptor limit ({hard}): lower tcp.max_connections, or raise the limit "
            "(LimitNOFILE= in the service's unit, ulimit -n)"
        )
    raised = needed if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    return raised
