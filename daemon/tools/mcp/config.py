"""An upstream MCP server, as the operator configures it (`[[mcp_servers]]`)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sandbox.backend import ImageReference

_SERVER_NAME = re.compile(r"^[a-zA-Z0-9-]+(?:_[a-zA-Z0-9-]+)*$")
MAX_SERVER_NAME = 24


class McpServerSpec(BaseModel):
    """One upstream MCP server whose tools join the registry as mcp__<name>__<tool>."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Short name: letters, digits, '-', single '_' (no '__').")
    url: str = Field(
        default="", description="Its Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp."
    )
    command: tuple[str, ...] = Field(
        default=(),
        description="Or: the program (and arguments) of a server speaking MCP on its stdio, "
        "started in the sandbox in the caller's workspace with the policy's limits, and kept "
        "for the caller's session (to list its tools, it is started in the default workspace "
        "mounted read-only).",
    )
    stateless: bool = Field(
        default=False,
        description="command only: the server keeps nothing between calls, so it is started "
        "for each call (nothing of it outlives the call) instead of once per session.",
    )
    image: ImageReference = Field(
        default="", description="command only: a local image to run it in (never pulled)."
    )
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
        if url and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
            raise ValueError("an http:// or https:// URL")
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if bool(self.url) == bool(self.command):
            raise ValueError("give either url (Streamable HTTP) or command (stdio), not both")
        if (self.image or self.stateless) and not self.command:
            raise ValueError("image and stateless are for servers started with command")
        return self
