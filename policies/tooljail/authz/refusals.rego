package tooljail.authz

# An agent that keeps retrying a refused call is stopped: once this very call (same tool, same
# input) was denied max_refusals times in the session within the window the daemon counts
# (input.refused_before, the last 10 minutes), it is denied with a reason that tells the model to
# stop and ask the user, instead of only being denied again. Other calls of the same tool are not
# held back, nor is a call that carries a person's approval. data.json sets the count:
# tooljail.max_refusals_per_call, or a principal's own max_refusals_per_call (at least 1); 3
# otherwise. The input also carries the session's refusals per tool (session.recent_refusals)
# and this call's asks, for rules of your own.

max_refusals := principal_config.max_refusals_per_call if {
	is_number(principal_config.max_refusals_per_call)
	principal_config.max_refusals_per_call >= 1
} else := data.tooljail.max_refusals_per_call if {
	is_number(data.tooljail.max_refusals_per_call)
	data.tooljail.max_refusals_per_call >= 1
} else := 3

default refused_before := 0

refused_before := input.refused_before.deny if is_number(input.refused_before.deny)

deny contains concat(" ", [
	sprintf("This %s call was already denied %d times in this session in the last 10 minutes.", [
		tool_name,
		refused_before,
	]),
	"Stop retrying it: tell the user what you were trying to do and ask how to go on, or do",
	"something else.",
]) if {
	refused_before >= max_refusals
	not input.approval.granted == true
}
