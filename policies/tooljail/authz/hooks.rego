# PreToolUse hook decisions (input.hooks).
#
# The daemon runs the operator's PreToolUse hooks before asking the policy and sends their
# decisions here: a hook's deny refuses the call, its ask needs a person's approval (lifted by an
# approval or a session grant, never by the mode), and its allow adds nothing, so a hook can
# never let through what a policy rule denies or asks about.
package tooljail.authz

hook_decisions := {"allow", "deny", "ask", "none"}

# Ill-shaped entries are kept so that the rule below refuses them instead of skipping them.
default hooks := []

hooks := input.hooks if is_array(input.hooks)

deny contains concat(" ", [
	"The daemon sent PreToolUse hook decisions (input.hooks) that are not a list,",
	"so the call is refused; update the daemon or the policy so that they match.",
]) if {
	object.get(input, "hooks", []) != []
	not is_array(input.hooks)
}

deny contains hook_text(hook) if {
	some hook in hooks
	hook.decision == "deny"
}

deny contains concat(" ", [
	sprintf("%s answered %v, which is not a PreToolUse decision this policy knows (%s),", [
		hook_name(hook),
		hook_decision(hook),
		concat(", ", sort(hook_decisions)),
	]),
	"so the call is refused; fix the hook's output.",
]) if {
	some hook in hooks
	not hook_decision(hook) in hook_decisions
}

hook_needs_approval contains hook_text(hook) if {
	some hook in hooks
	hook.decision == "ask"
}

# The hook's own reason, prefixed by its name (both come from the operator's configuration).
hook_text(hook) := sprintf("%s: %s", [hook_name(hook), hook.reason]) if {
	is_string(hook.reason)
	hook.reason != ""
} else := sprintf("%s: the hook %s this call without giving a reason; ask the operator who configured it.", [
	hook_name(hook),
	hook_verbs[hook.decision],
])

hook_verbs := {"deny": "blocked", "ask": "asked for a person's approval of"}

hook_name(hook) := hook.name if {
	is_string(hook.name)
	hook.name != ""
} else := "A PreToolUse hook"

# An entry that is not an object, or has no decision, answers "nothing" (refused above). Rules
# go through this helper rather than `hook.decision`: a `not` over an undefined reference would
# skip the entry instead of refusing it.
hook_decision(hook) := hook.decision if {
	is_object(hook)
	"decision" in object.keys(hook)
} else := "nothing"
