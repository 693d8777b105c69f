package tooljail.authz

# Background commands: Bash with run_in_background, read with BashOutput, stopped with KillShell.
# The decision's `background` says how many a session may have running at once (0: none), how
# long each may run, and whether a foreground command still running at its timeout moves to the
# background instead of being killed. The daemon enforces the count, and its own caps over all
# sessions (sandbox.background_max, background_per_principal, background_max_s).
#
# data.json sets them per principal: background_shells (default 2), background_timeout_ms
# (default 30 minutes), background_on_timeout (default false).

background := {
	"shells": background_shells_of(principal_config),
	"timeout_ms": background_timeout_ms,
	"on_timeout": background_on_timeout,
}

background_shells_of(config) := config.background_shells if {
	is_number(config.background_shells)
	config.background_shells >= 0
	config.background_shells == floor(config.background_shells)
} else := 2

default background_timeout_ms := 1800000

background_timeout_ms := principal_config.background_timeout_ms if {
	is_number(principal_config.background_timeout_ms)
	principal_config.background_timeout_ms >= 1000
	principal_config.background_timeout_ms == floor(principal_config.background_timeout_ms)
}

default background_on_timeout := false

background_on_timeout if principal_config.background_on_timeout == true

deny contains concat(" ", [
	sprintf("Bash: principal %s may not run commands in the background;", [principal_name]),
	"run the command in the foreground (without run_in_background), with a command that finishes",
	"within its timeout.",
]) if {
	builtin_tool("Bash")
	input.input.run_in_background == true
	background_shells_of(principal_config) == 0
}

# Without background commands there is nothing to read or stop: the tools are not offered.
tool_hidden(config, tool) if {
	tool.name in {"BashOutput", "KillShell"}
	tool.origin.kind == "builtin"
	background_shells_of(config) == 0
}

builtin_tool(name) if {
	input.tool.name == name
	input.tool.origin.kind == "builtin"
}
