# Tests of open_session (session.rego): which existing directories may become a workspace.
package tooljail.authz_test

import data.tooljail.authz

open_session_input := {
	"version": 1,
	"workspace": "/srv/tooljail/alice/project",
	"overlaps": [],
	"caller": {"principal": "local", "transport": "unix"},
}

open_workspace(path) := object.union(open_session_input, {"workspace": path})

# The reasons open_session gives for one workspace path, with the shipped roots.
session_reasons(path) := reasons if {
	reasons := authz.open_session.reasons with input as open_workspace(path)
}

not_inside_reason(path) := concat("", [
	sprintf("The workspace %s is not inside the allowed workspace roots (/srv/tooljail); ", [path]),
	"open a directory inside one of them, or ask the operator to add a root to data.tooljail.workspace_roots.",
])

test_directory_inside_a_root_is_allowed if {
	authz.open_session == {
		"allow": true,
		"reasons": ["The workspace /srv/tooljail/alice/project is inside the allowed workspace root /srv/tooljail."],
	} with input as open_session_input
}

test_directory_outside_the_roots_is_denied_naming_the_roots if {
	authz.open_session == {"allow": false, "reasons": [not_inside_reason("/home/alice")]} with input as open_workspace("/home/alice")
}

test_sibling_sharing_the_root_prefix_is_outside if {
	session_reasons("/srv/tooljail2/x") == [not_inside_reason("/srv/tooljail2/x")]
}

test_file_system_root_is_denied if {
	d := authz.open_session with input as open_workspace("/")
	d == {
		"allow": false,
		"reasons": ["The workspace / is the root of the file system; open a project directory inside one of /srv/tooljail."],
	}
}

test_file_system_root_is_denied_even_when_it_is_a_root if {
	d := authz.open_session with input as open_workspace("/") with data.tooljail.workspace_roots as ["/"]
	d == {
		"allow": false,
		"reasons": ["The workspace / is the root of the file system; open a project directory inside one of /."],
	}
}

test_root_slash_allows_any_other_directory if {
	d := authz.open_session with input as open_workspace("/home/alice") with data.tooljail.workspace_roots as ["/"]
	d.allow == true
}

test_workspace_root_itself_is_denied if {
	d := authz.open_session with input as open_workspace("/srv/tooljail")
	d.allow == false
	d.reasons == ["The workspace /srv/tooljail is a workspace root itself, which holds other workspaces; open a directory inside it."]
}

test_root_written_with_a_trailing_slash_still_counts if {
	roots := ["/srv/tooljail/"]
	authz.open_session.allow with input as open_session_input with data.tooljail.workspace_roots as roots
	not authz.open_session.allow with input as open_workspace("/srv/tooljail") with data.tooljail.workspace_roots as roots
}

test_any_of_several_roots_allows if {
	roots := ["/srv/tooljail", "/home/ci/work"]
	d := authz.open_session with input as open_workspace("/home/ci/work/repo") with data.tooljail.workspace_roots as roots
	d == {"allow": true, "reasons": ["The workspace /home/ci/work/repo is inside the allowed workspace root /home/ci/work."]}
}

test_unresolved_paths_are_denied if {
	every path in ["srv/tooljail/a", "/srv/tooljail/a/../../../etc", "/srv/tooljail/./a", "/srv/tooljail//a", "/srv/tooljail/a/"] {
		reasons := session_reasons(path)
		reasons == [sprintf(
			"The workspace %s is not a resolved absolute path; send the directory's absolute path without . or .. parts.",
			[path],
		)]
	}
}

test_missing_workspace_is_denied if {
	d := authz.open_session with input as json.remove(open_session_input, ["workspace"])
	d.allow == false
	d.reasons == ["The workspace (no workspace) is not a resolved absolute path; send the directory's absolute path without . or .. parts."]
}

test_missing_roots_deny_every_directory if {
	d := authz.open_session with input as open_session_input with data.tooljail.workspace_roots as []
	d.allow == false
	d.reasons == [concat("", [
		"The policy data lists no workspace roots (data.tooljail.workspace_roots in policies/data.json), ",
		"so no existing directory may be opened; the operator must add the folders that hold workspaces.",
	])]
}

test_relative_roots_are_ignored if {
	d := authz.open_session with input as open_workspace("/srv/tooljail/a") with data.tooljail.workspace_roots as ["srv", 7]
	d.allow == false
	contains(d.reasons[0], "lists no workspace roots")
}

test_unknown_session_input_version_is_denied if {
	d := authz.open_session with input as object.union(open_session_input, {"version": 2})
	d.allow == false
	d.reasons == [concat("", [
		"The daemon sent session input version 2, but this policy understands version 1 only; ",
		"update the daemon or the policy so that they match.",
	])]
}

test_open_session_without_any_rule_denies if {
	# A policy whose deny and allow sets are both empty falls back to the default.
	d := authz.open_session with authz.workspace_deny as set() with authz.workspace_allow as set()
	d == {
		"allow": false,
		"reasons": ["No policy rule allows this workspace, so the session was not opened; ask the operator."],
	}
}

overlapping(relation) := object.union(open_session_input, {"overlaps": [{
	"session": "ses_1",
	"workspace": "/srv/tooljail/alice",
	"relation": relation,
}]})

test_a_workspace_overlapping_an_open_session_is_refused_for_each_relation if {
	every relation in ["same", "inside", "contains"] {
		d := authz.open_session with input as overlapping(relation)
		d.allow == false
		count(d.reasons) == 1
		contains(d.reasons[0], "overlaps the workspace /srv/tooljail/alice of open session ses_1")
	}
}

test_overlap_wording_names_the_relation if {
	d := authz.open_session with input as overlapping("inside")
	contains(d.reasons[0], "it lies inside that workspace")
}

test_a_principal_may_be_allowed_overlapping_workspaces if {
	d := authz.open_session with input as overlapping("same")
		with data.tooljail.principals.local as {"overlapping_workspaces": true}
	d.allow == true
}

test_overlapping_is_allowed_only_by_a_true_setting if {
	d := authz.open_session with input as overlapping("same")
		with data.tooljail.principals.local as {"overlapping_workspaces": "yes"}
	d.allow == false
}
