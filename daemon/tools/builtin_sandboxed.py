"""The built-in tools that change things, and so run in the sandbox."""

from __future__ import annotations

from daemon.tools.bash import BashTool
from daemon.tools.edit import EditTool
from daemon.tools.multiedit import MultiEditTool
from daemon.tools.write import WriteTool

SANDBOXED_TOOLS: tuple[type, ...] = (WriteTool, EditTool, MultiEditTool, BashTool)
"""Write, Edit, MultiEdit and Bash, in the order they are advertised."""
