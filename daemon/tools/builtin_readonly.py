"""The read-only built-in tools, for the registry to register in one go."""

from __future__ import annotations

from daemon.tools.glob import GlobTool
from daemon.tools.grep import GrepTool
from daemon.tools.ls import LsTool
from daemon.tools.read import ReadTool

READ_ONLY_TOOLS: tuple[type, ...] = (ReadTool, GlobTool, GrepTool, LsTool)
"""Read, Glob, Grep and LS: host-side, confined to the workspace, concurrency-safe."""
