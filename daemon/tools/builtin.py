"""The built-in tool set, in the order ListTools shows it."""

from __future__ import annotations

from collections.abc import Iterable

from daemon.tools.bash import BashTool
from daemon.tools.contract import AnyTool
from daemon.tools.files.edit import EditTool
from daemon.tools.files.multiedit import MultiEditTool
from daemon.tools.files.notebook_edit import NotebookEditTool
from daemon.tools.files.write import WriteTool
from daemon.tools.glob.tool import GlobTool
from daemon.tools.grep.tool import GrepTool
from daemon.tools.ls import LsTool
from daemon.tools.read import ReadTool
from daemon.tools.registry import ToolRegistry
from daemon.tools.shells import BashOutputTool, KillShellTool
from daemon.tools.tool_search import ToolSearchTool


def builtin_tools() -> list[AnyTool]:
    """Read, Glob, Grep and LS (host-side, confined to the workspace, concurrency-safe); Write,
    Edit, MultiEdit, NotebookEdit and Bash (in the sandbox); BashOutput and KillShell (Bash's
    background commands); ToolSearch."""
    return [
        ReadTool(),
        GlobTool(),
        GrepTool(),
        LsTool(),
        WriteTool(),
        EditTool(),
        MultiEditTool(),
        NotebookEditTool(),
        BashTool(),
        BashOutputTool(),
        KillShellTool(),
        ToolSearchTool(),
    ]


def builtin_registry(deferred: Iterable[str] = ()) -> ToolRegistry:
    """A registry of every built-in tool; `deferred` ones are found through ToolSearch."""
    return ToolRegistry(builtin_tools(), deferred)
