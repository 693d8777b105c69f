# Permission modes (input.session.mode).
#
# The mode changes what happens to the asks that stand after approvals and session grants:
# acceptEdits lets file edits inside the workspace run without asking, bypassPermissions lets
# every policy ask run for a principal that data.json allows to use it, dontAsk refuses what
# would have asked, and plan refuses every tool that is not read-only. Deny rules hold in every
# mode, and a PreToolUse hook's ask is only lifted by an approval or a grant (authz.rego).
package tooljail.authz

known_modes := {"default", "acceptEdits", "plan", "dontAsk", "bypassPermissions"}

# The tools acceptEdits lets run without asking when every path they touch is in the workspace.
file_edit_tools := {"Write", "Edit", "MultiEdit"}

# Only a principal that data.json marks with bypass_permissions: true may use bypassPermissions.
bypass_allowed if principal_config.bypass_permissions == true

# --- Deny rules ------------------------------------------------------------------------------

deny contains concat(" ", [
	sprintf("%s: the session's permission mode %v is not one this policy knows (%s),", [
		tool_name,
		object.get(input, ["session", "mode"], "(none)"),
		concat(", ", sort(known_modes)),
	]),
	"so the call is refused; set the session's mode to one of them.",
]) if {
	not session_mode in known_modes
}

deny contains concat(" ", [
	sprintf("%s: the session is in plan mode, where only read-only tools run,", [tool_name]),
	"and this call could change files or run commands, so it is refused for now.",
	"It can run once the session's mode changes; until then use Read, Glob, Grep or LS",
	"and describe the change in the plan.",
]) if {
	session_mode == "plan"
	not read_only_tool
}

deny contains concat(" ", [
	sprintf("%s: the session is in bypassPermissions mode, which principal %s is not allowed to use", [
		tool_name,
		principal_name,
	]),
	sprintf("(data.tooljail.principals[\"%s\"].bypass_permissions is not true), so every call is refused;", [principal_name]),
	"switch the session to another mode, or ask the operator to allow bypassPermissions for this principal.",
]) if {
	session_mode == "bypassPermissions"
	not bypass_allowed
}

# dontAsk: nobody is asked, so what would have waited for a person is refused, naming why.
deny contains concat(" ", [
	sprintf("%s: the session is in dontAsk mode, where nothing waits for a person's approval,", [tool_name]),
	"so this call is refused; change the call so that it needs no approval, or change the session's mode.",
	sprintf("It would have needed approval because: %s", [reason]),
]) if {
	session_mode == "dontAsk"
	some reason in pending_approval
}

# --- Lifting asks ----------------------------------------------------------------------------

# One sentence per policy ask the mode lets pass (unless an approval or a grant already did), so
# the audit log shows what nobody was asked about.
policy_asks_lifted_by contains concat(" ", [
	sprintf("%s: the session is in %s mode, so this call runs without the approval it would otherwise need:", [
		tool_name,
		session_mode,
	]),
	reason,
]) if {
	mode_lifts_asks
	count(asks_lifted_by) == 0
	some reason in needs_approval
}

mode_lifts_asks if {
	session_mode == "acceptEdits"
	input.tool.name in file_edit_tools
	all_paths_inside
}

mode_lifts_asks if {
	session_mode == "bypassPermissions"
	bypass_allowed
}
