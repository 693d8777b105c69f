package tooljail.authz

# An agent that keeps retrying refused calls is stopped: once the session's calls of a tool were
# denied max_refusals times within the window the daemon counts (input.session.recent_refusals,
# the last 10 minutes), further calls of that tool are denied too, with a reason that tells the
# model to stop and ask the user. A call that carries a person's approval is not held back.
# data.json sets the count: tooljail.max_refusals_per_tool, or a principal's own
# max_refusals_per_tool (at least 1); 5 otherwise. Asks are in the input too (for rules of your
# own), but not counted here: a person may well approve them.

max_refusals := principal_config.max_refusals_per_tool if {
	is_number(principal_config.max_refusals_per_tool)
	principal_config.max_refusals_per_tool >= 1
} else := data.tooljail.max_refusals_per_tool if {
	is_number(data.tooljail.max_refusals_per_tool)
	data.tooljail.max_refusals_per_tool >= 1
} else := 5

default recent_denials := 0

recent_denials := input.session.recent_refusals[tool_name].deny if {
	is_number(input.session.recent_refusals[tool_name].deny)
}

deny contains concat(" ", [
	sprintf("%s was denied %d times in this session in the last 10 minutes, so it is refused", [
		tool_name,
		recent_denials,
	]),
	"until those refusals age out. Stop retrying it: tell the user what you were trying to do and",
	"ask how to go on, or do something else.",
]) if {
	recent_denials >= max_refusals
	not input.approval.granted == true
}
