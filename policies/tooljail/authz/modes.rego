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

# --- Choosing a mode (OpenSession, SetSessionMode) -------------------------------------------

# METADATA
# title: Session mode change
# description: Whether input.caller may put a session in permission mode input.mode.
# entrypoint: true
default session_mode_change := {
	"allow": false,
	"reasons": ["No policy rule allows this permission mode, so the session keeps its mode; ask the operator."],
}

session_mode_change := {"allow": false, "reasons": sort(mode_change_deny)} if count(mode_change_deny) > 0

session_mode_change := {"allow": true, "reasons": sort(mode_change_allow)} if {
	count(mode_change_deny) == 0
	count(mode_change_allow) > 0
}

# Modes that only take powers away: anyone may choose them for a session of theirs.
restricting_modes := {"default", "plan", "dontAsk"}

default requested_mode := "(none)"

requested_mode := input.mode if is_string(input.mode)

mode_change_deny contains sprintf(
	"The permission mode %v is not one this policy knows (%s); choose one of them.",
	[requested_mode, concat(", ", sort(known_modes))],
) if {
	not requested_mode in known_modes
}

mode_change_allow contains sprintf("The permission mode %s only takes powers away.", [requested_mode]) if {
	requested_mode in restricting_modes
}

# acceptEdits lifts the policy's asks for file edits inside the workspace: a person at the
# machine (the Unix socket) may choose it, other principals when data.json says so.
mode_change_allow contains "The caller is on the daemon's Unix socket, where a person chooses the mode." if {
	requested_mode == "acceptEdits"
	input.caller.transport == "unix"
}

mode_change_allow contains sprintf("data.tooljail.principals[\"%s\"].modes lists %s.", [principal_name, requested_mode]) if {
	requested_mode in {"acceptEdits", "bypassPermissions"}
	requested_mode in object.get(principal_config, "modes", [])
}

mode_change_allow contains sprintf("data.tooljail.principals[\"%s\"].bypass_permissions is true.", [principal_name]) if {
	requested_mode == "bypassPermissions"
	bypass_allowed
}

mode_change_deny contains concat(" ", [
	sprintf("Principal %s may not choose permission mode %s, which lifts asks the policy makes;", [principal_name, requested_mode]),
	sprintf("the operator can allow it in data.tooljail.principals[\"%s\"].modes. Open the session in mode default instead.", [principal_name]),
]) if {
	requested_mode in known_modes
	not requested_mode in restricting_modes
	count(mode_change_allow) == 0
}
