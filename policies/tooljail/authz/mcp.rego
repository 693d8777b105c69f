package tooljail.authz

# Tools of upstream MCP servers (origin.kind "mcp") run on their server, not in tooljail's
# sandbox, so the sandbox rules say nothing about them: a principal may use the tools of the
# servers data.json lists for it (principals.<name>.mcp_servers), and nothing else. What a
# trusted server's annotations say (read_only...) still counts where other rules look at traits.

mcp_tool if input.tool.origin.kind == "mcp"

default mcp_server := "(unknown server)"

mcp_server := input.tool.origin.server if is_string(input.tool.origin.server)

mcp_server_enabled(config, server) if server in object.get(config, "mcp_servers", [])

allow contains sprintf(
	"%s comes from the MCP server %s, which principal %s may use.",
	[tool_name, mcp_server, principal_name],
) if {
	mcp_tool
	mcp_server_enabled(principal_config, mcp_server)
}

deny contains concat(" ", [
	sprintf("%s comes from the MCP server %s, which principal %s may not use;", [
		tool_name,
		mcp_server,
		principal_name,
	]),
	"use another tool, or ask the operator to list the server for you in data.json",
	"(tooljail.principals.<name>.mcp_servers).",
]) if {
	mcp_tool
	not mcp_server_enabled(principal_config, mcp_server)
}
