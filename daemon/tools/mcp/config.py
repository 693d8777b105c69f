"""An upstream MCP server, as the operator configures it (`[[mcp_servers]]`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_SERVER_NAME = re.compile(r"^[a-zA-Z0-9-]+(?:_[a-zA-Z0-9-]+)*$")
MAX_SERVER_NAME = 24


class McpServerSpec(BaseModel):
    """One upstream MCP server whose tools join the registry as mcp__<name>__<tool>."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Short name: letters, digits, '-', single '_' (no '__').")
    url: str = Field(description="Its Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp.")
    trusted: bool = Field(
        default=False,
        description="Believe the server's annotations (readOnlyHint, destructiveHint, "
        "idempotentHint) as traits; otherwise its tools get the conservative defaults.",
    )
    timeout_s: float = Field(
        default=60.0, gt=0, le=3_600, description="Longest one call may take before it fails."
    )
    defer: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="Leave its tools out of ListTools (found through ToolSearch): always, "
        "never, or auto (when it has more than a few).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        if len(name) > MAX_SERVER_NAME or not _SERVER_NAME.fullmatch(name):
            raise ValueError(
                f"1 to {MAX_SERVER_NAME} letters, digits, '-' and single '_' (tool names are "
                "mcp__<server>__<tool>, so '__' would be ambiguous)"
            )
        return name

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
            raise ValueError("an http:// or https:// URL")
        return url
