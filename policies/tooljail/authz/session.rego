# Opening a session on an existing directory.
#
# Decides whether a session may use an existing directory as its workspace. Only directories
# below one of data.tooljail.workspace_roots (data.json) qualify, never a root itself.
package tooljail.authz

# METADATA
# title: Open session
# description: Whether the resolved directory input.workspace may become a session's workspace.
# entrypoint: true
default open_session := {
	"allow": false,
	"reasons": ["No policy rule allows this workspace, so the session was not opened; ask the operator."],
}

open_session := {"allow": false, "reasons": sort(workspace_deny)} if count(workspace_deny) > 0

open_session := {"allow": true, "reasons": sort(workspace_allow)} if {
	count(workspace_deny) == 0
	count(workspace_allow) > 0
}

# Absolute roots from data.json, ignoring entries that are not absolute paths.
workspace_roots contains root if {
	some root in data.tooljail.workspace_roots
	absolute(root)
}

default requested_workspace := "(no workspace)"

requested_workspace := input.workspace if is_string(input.workspace)

roots_text := concat(", ", sort(workspace_roots)) if count(workspace_roots) > 0

# --- Deny rules ------------------------------------------------------------------------------

workspace_deny contains concat(" ", [
	sprintf("The daemon sent session input version %v, but this policy understands version %d only;", [
		object.get(input, "version", "(none)"),
		supported_version,
	]),
	"update the daemon or the policy so that they match.",
]) if {
	not input.version == supported_version
}

workspace_deny contains concat(" ", [
	"The policy data lists no workspace roots (data.tooljail.workspace_roots in policies/data.json),",
	"so no existing directory may be opened; the operator must add the folders that hold workspaces.",
]) if {
	count(workspace_roots) == 0
}

workspace_deny contains sprintf(
	"The workspace %v is not a resolved absolute path; send the directory's absolute path without . or .. parts.",
	[requested_workspace],
) if {
	not normalised_absolute(requested_workspace)
}

workspace_deny contains sprintf(
	"The workspace %s is the root of the file system; open a project directory inside one of %s.",
	[requested_workspace, roots_text],
) if {
	requested_workspace == "/"
}

workspace_deny contains sprintf(
	"The workspace %s is a workspace root itself, which holds other workspaces; open a directory inside it.",
	[requested_workspace],
) if {
	is_workspace_root(requested_workspace)
}

workspace_deny contains concat(" ", [
	sprintf("The workspace %s is not inside the allowed workspace roots (%s);", [requested_workspace, roots_text]),
	"open a directory inside one of them, or ask the operator to add a root to data.tooljail.workspace_roots.",
]) if {
	normalised_absolute(requested_workspace)
	requested_workspace != "/"
	not is_workspace_root(requested_workspace)
	not workspace_root_of(requested_workspace)
}

# Two open sessions over the same directory, or one inside the other: a sandbox of one could
# change (or swap for a symlink) what the other works on.
overlap_words := {
	"same": "it is the same directory",
	"inside": "it lies inside that workspace",
	"contains": "that workspace lies inside it",
}

workspace_deny contains concat(" ", [
	sprintf("The workspace %s overlaps the workspace %s of open session %s (%s);", [
		requested_workspace,
		overlap.workspace,
		overlap.session,
		object.get(overlap_words, overlap.relation, "they overlap"),
	]),
	"sessions over overlapping directories are refused: close that session first, or open another directory.",
]) if {
	some overlap in input.overlaps
	not overlapping_allowed
}

overlapping_allowed if data.tooljail.principals[input.caller.principal].overlapping_workspaces == true

# --- Allow rules -----------------------------------------------------------------------------

workspace_allow contains sprintf("The workspace %s is inside the allowed workspace root %s.", [
	requested_workspace,
	root,
]) if {
	some root in workspace_roots
	strictly_below(requested_workspace, root)
}

# --- Helpers ---------------------------------------------------------------------------------

is_workspace_root(path) if {
	some root in workspace_roots
	trim_right(root, "/") == path
}

workspace_root_of(path) if {
	some root in workspace_roots
	strictly_below(path, root)
}

strictly_below(path, root) if {
	normalised_absolute(path)
	path != trim_right(root, "/")
	startswith(path, concat("", [trim_right(root, "/"), "/"]))
}

# Resolved paths have no empty, `.` or `..` segment and no trailing slash (except `/`).
normalised_absolute(path) if path == "/"

normalised_absolute(path) if {
	absolute(path)
	not regex.match(`//|/\.\.?(/|$)|/$`, path)
}
