"""The garbage collector's view of a long-running server.

Once the daemon is serving, what it built to start (modules, the registry, the policy client,
pydantic's validators: most of its heap, about 130,000 objects) lives as long as the process.
Left in the collected generations, every full collection walks all of it again, holding the
event loop (and so every caller) for over 100 ms on this kind of machine; frozen (gc.freeze),
collections walk only what was made since.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what starting left behind, then keep the rest out of later collections."""
    gc.collect()
    gc.freeze()
