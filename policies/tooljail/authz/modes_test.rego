# Tests of the permission modes (modes.rego).
#
# One table runs the same six calls in every mode; the scenarios below it pin the reasons and
# how the modes meet approvals, ask_tools and hooks.
package tooljail.authz_test

import data.tooljail.authz

# --- Example input document (plain JSON) -----------------------------------------------------

# An Edit in acceptEdits mode, with the decisions of two PreToolUse hooks.
hooked_edit_input := {
	"version": 1,
	"tool": {"name": "Edit", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	"input": {"file_path": "/srv/ws/src/app.py", "old_string": "DEBUG = True", "new_string": "DEBUG = False"},
	"paths": [{"path": "/srv/ws/src/app.py", "access": "write", "inside_workspace": true}],
	"session": {"id": "s-9", "workspace": "/srv/ws", "mode": "acceptEdits", "grants": []},
	"caller": {"principal": "local", "transport": "unix"},
	"approval": {"granted": false},
	"hooks": [
		{"name": "audit-log", "decision": "none", "reason": ""},
		{"name": "format-check", "decision": "allow", "reason": "Python files are formatted on save."},
	],
}

# --- Helpers ---------------------------------------------------------------------------------

in_mode(doc, mode) := object.union(doc, {"session": {"mode": mode}})

force_push_input := bash_line("git push --force", [simple(["git", "push", "--force"])])

sudo_ls_input := bash_line("sudo ls", [wrapped(["ls"], ["sudo"])])

read_outside_input := with_paths(read_input, [{"path": "/etc/passwd", "access": "read", "inside_workspace": false}])

# The same Edit without hooks, in default mode.
edit_input := in_mode(json.remove(hooked_edit_input, ["hooks"]), "default")

force_push_reason := concat("", [
	"Bash: `git push --force` rewrites the remote's history (a force push; push without forcing, ",
	"or pull and merge first); a person must approve it before it runs.",
])

# A principal that data.json allows to use bypassPermissions.
bypass_principals := {"trusted-bot": {"bypass_permissions": true}, "careful": {"ask_tools": ["Edit", "Write", "Read"]}}

# Decide with the test principals above.
decided_as(doc) := d if {
	d := authz.decision with input as doc with data.tooljail.principals as bypass_principals
}

# --- Every mode against the same calls (a table) -------------------------------------------

mode_calls := {
	"Read inside": read_input,
	"Write inside": write_input,
	"Bash ls": bash_input,
	"Bash git push --force": force_push_input,
	"Bash sudo ls": sudo_ls_input,
	"Read outside": read_outside_input,
}

# A column is a mode, and the principal that uses it.
mode_columns := {
	"default": {"mode": "default", "principal": "local"},
	"acceptEdits": {"mode": "acceptEdits", "principal": "local"},
	"plan": {"mode": "plan", "principal": "local"},
	"dontAsk": {"mode": "dontAsk", "principal": "local"},
	"bypassPermissions, allowed": {"mode": "bypassPermissions", "principal": "trusted-bot"},
	"bypassPermissions, not allowed": {"mode": "bypassPermissions", "principal": "local"},
	"an unknown mode": {"mode": "yolo", "principal": "local"},
}

mode_expected := {
	"default": {
		"Read inside": "allow", "Write inside": "allow", "Bash ls": "allow",
		"Bash git push --force": "ask", "Bash sudo ls": "deny", "Read outside": "deny",
	},
	"acceptEdits": {
		"Read inside": "allow", "Write inside": "allow", "Bash ls": "allow",
		"Bash git push --force": "ask", "Bash sudo ls": "deny", "Read outside": "deny",
	},
	"plan": {
		"Read inside": "allow", "Write inside": "deny", "Bash ls": "deny",
		"Bash git push --force": "deny", "Bash sudo ls": "deny", "Read outside": "deny",
	},
	"dontAsk": {
		"Read inside": "allow", "Write inside": "allow", "Bash ls": "allow",
		"Bash git push --force": "deny", "Bash sudo ls": "deny", "Read outside": "deny",
	},
	"bypassPermissions, allowed": {
		"Read inside": "allow", "Write inside": "allow", "Bash ls": "allow",
		"Bash git push --force": "allow", "Bash sudo ls": "deny", "Read outside": "deny",
	},
	"bypassPermissions, not allowed": {
		"Read inside": "deny", "Write inside": "deny", "Bash ls": "deny",
		"Bash git push --force": "deny", "Bash sudo ls": "deny", "Read outside": "deny",
	},
	"an unknown mode": {
		"Read inside": "deny", "Write inside": "deny", "Bash ls": "deny",
		"Bash git push --force": "deny", "Bash sudo ls": "deny", "Read outside": "deny",
	},
}

mode_outcome(column, call) := decided_as(doc).outcome if {
	setting := mode_columns[column]
	doc := as_principal(in_mode(mode_calls[call], setting.mode), setting.principal)
}

test_each_mode_decides_the_calls_as_the_table_says if {
	missed := {[column, call, want, got] |
		some column, row in mode_expected
		some call, want in row
		got := mode_outcome(column, call)
		got != want
	}
	missed == set()
}

test_the_mode_table_has_an_outcome_for_every_call_in_every_mode if {
	object.keys(mode_expected) == object.keys(mode_columns)
	every row in mode_expected {
		object.keys(row) == object.keys(mode_calls)
	}
	decided := {[column, call] |
		some column, row in mode_expected
		some call, _ in row
		mode_outcome(column, call)
	}
	count(decided) == count(mode_columns) * count(mode_calls)
}

# --- default ---------------------------------------------------------------------------------

test_default_mode_keeps_the_reasons_of_the_rules if {
	d := decided_as(in_mode(force_push_input, "default"))
	d.outcome == "ask"
	d.reasons == [force_push_reason]
}

# --- Unknown and missing modes ---------------------------------------------------------------

unknown_mode_reason(shown) := concat("", [
	sprintf("Read: the session's permission mode %s is not one this policy knows ", [shown]),
	"(acceptEdits, bypassPermissions, default, dontAsk, plan), ",
	"so the call is refused; set the session's mode to one of them.",
])

test_unknown_mode_is_denied_naming_the_modes if {
	d := decided_as(in_mode(read_input, "auto"))
	d.outcome == "deny"
	d.reasons == [unknown_mode_reason("auto")]
}

test_mode_names_are_case_sensitive if {
	d := decided_as(in_mode(read_input, "Plan"))
	d.reasons == [unknown_mode_reason("Plan")]
}

test_missing_mode_is_denied_not_taken_as_default if {
	d := decided_as(json.remove(read_input, ["session/mode"]))
	d.outcome == "deny"
	d.reasons == [unknown_mode_reason("(none)")]
}

test_mode_that_is_not_a_string_is_denied if {
	d := decided_as(in_mode(read_input, ["plan"]))
	d.reasons == [unknown_mode_reason("[\"plan\"]")]
}

test_unknown_mode_is_denied_even_with_an_approval if {
	d := decided_as(approved(in_mode(force_push_input, "auto")))
	d.outcome == "deny"
}

# --- plan ------------------------------------------------------------------------------------

plan_reason(tool) := concat("", [
	sprintf("%s: the session is in plan mode, where only read-only tools run, ", [tool]),
	"and this call could change files or run commands, so it is refused for now. ",
	"It can run once the session's mode changes; until then use Read, Glob, Grep or LS ",
	"and describe the change in the plan.",
])

test_plan_mode_refuses_a_write_until_the_mode_changes if {
	d := decided_as(in_mode(write_input, "plan"))
	d.outcome == "deny"
	d.reasons == [plan_reason("Write")]
}

test_plan_mode_refuses_even_a_harmless_command if {
	d := decided_as(in_mode(bash_input, "plan"))
	d.reasons == [plan_reason("Bash")]
}

test_plan_mode_reports_the_deny_rules_too if {
	d := decided_as(in_mode(sudo_ls_input, "plan"))
	d.reasons == [privilege_reason("sudo"), plan_reason("Bash")]
}

test_plan_mode_is_not_lifted_by_an_approval if {
	d := decided_as(approved(in_mode(force_push_input, "plan")))
	d.outcome == "deny"
	d.reasons == [plan_reason("Bash")]
}

test_plan_mode_allows_read_only_tools if {
	d := decided_as(in_mode(read_input, "plan"))
	d.reasons == ["Read only reads, and every path it touches is inside the workspace /srv/ws."]
}

test_plan_mode_keeps_the_asks_of_read_only_tools if {
	d := decided_as(as_principal(in_mode(read_input, "plan"), "careful"))
	d.outcome == "ask"
}

# --- acceptEdits -----------------------------------------------------------------------------

test_accept_edits_lifts_the_ask_tools_ask_of_an_edit if {
	doc := as_principal(in_mode(edit_input, "acceptEdits"), "careful")
	d := decided_as(doc)
	d.outcome == "allow"
	d.reasons == [
		"Edit runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		concat("", [
			"Edit: the session is in acceptEdits mode, so this call runs without the approval it would otherwise need: ",
			"Edit needs a person's approval for principal careful; the call waits until someone approves it.",
		]),
	]
}

test_the_same_edit_asks_in_default_mode if {
	d := decided_as(as_principal(in_mode(edit_input, "default"), "careful"))
	d.outcome == "ask"
}

test_accept_edits_lifts_asks_for_every_file_editing_tool if {
	docs := [
		object.union(edit_input, {"tool": {"name": "Write"}}),
		object.union(edit_input, {"tool": {"name": "MultiEdit"}}),
		edit_input,
	]
	principals := {"careful": {"ask_tools": ["Write", "Edit", "MultiEdit"]}}
	outcomes := {d.outcome |
		some doc in docs
		d := authz.decision with input as as_principal(in_mode(doc, "acceptEdits"), "careful")
			with data.tooljail.principals as principals
	}
	outcomes == {"allow"}
}

test_accept_edits_keeps_the_asks_of_bash if {
	principals := {"careful": {"ask_tools": ["Bash"]}}
	d := authz.decision with input as as_principal(in_mode(bash_input, "acceptEdits"), "careful")
		with data.tooljail.principals as principals
	d.outcome == "ask"
}

test_accept_edits_keeps_the_asks_of_other_tools if {
	d := decided_as(as_principal(in_mode(read_input, "acceptEdits"), "careful"))
	d.outcome == "ask"
}

test_accept_edits_does_not_let_an_edit_leave_the_workspace if {
	outside := [{"path": "/etc/hosts", "access": "write", "inside_workspace": false}]
	d := decided_as(as_principal(in_mode(with_paths(edit_input, outside), "acceptEdits"), "careful"))
	d.outcome == "deny"
	d.reasons == [outside_reason("Edit", "/etc/hosts", "write")]
}

# --- dontAsk ---------------------------------------------------------------------------------

dont_ask_reason(tool, reason) := concat("", [
	sprintf("%s: the session is in dontAsk mode, where nothing waits for a person's approval, ", [tool]),
	"so this call is refused; change the call so that it needs no approval, or change the session's mode. ",
	sprintf("It would have needed approval because: %s", [reason]),
])

test_dont_ask_refuses_what_would_have_asked_and_says_why if {
	d := decided_as(in_mode(force_push_input, "dontAsk"))
	d.outcome == "deny"
	d.reasons == [dont_ask_reason("Bash", force_push_reason)]
}

test_dont_ask_refuses_each_ask_with_its_reason if {
	line := "git push --force && git reset --hard"
	doc := bash_line(line, [
		within(["git", "push", "--force"], "list"),
		within(["git", "reset", "--hard"], "list"),
	])
	d := decided_as(in_mode(doc, "dontAsk"))
	count(d.reasons) == 2
	every reason in d.reasons {
		startswith(reason, "Bash: the session is in dontAsk mode")
	}
}

test_dont_ask_runs_a_call_a_person_already_approved if {
	d := decided_as(approved(in_mode(force_push_input, "dontAsk")))
	d.outcome == "allow"
}

test_dont_ask_does_not_turn_a_deny_into_anything_else if {
	d := decided_as(in_mode(sudo_ls_input, "dontAsk"))
	d.reasons == [privilege_reason("sudo")]
}

# --- bypassPermissions -----------------------------------------------------------------------

bypass_refused_reason(tool, principal) := concat("", [
	sprintf("%s: the session is in bypassPermissions mode, which principal %s is not allowed to use ", [tool, principal]),
	sprintf("(data.tooljail.principals[\"%s\"].bypass_permissions is not true), so every call is refused; ", [principal]),
	"switch the session to another mode, or ask the operator to allow bypassPermissions for this principal.",
])

test_bypass_runs_what_would_have_asked_and_notes_it if {
	d := decided_as(as_principal(in_mode(force_push_input, "bypassPermissions"), "trusted-bot"))
	d.outcome == "allow"
	d.reasons == [
		"Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		concat("", [
			"Bash: the session is in bypassPermissions mode, so this call runs without the approval it would otherwise need: ",
			force_push_reason,
		]),
	]
}

test_bypass_keeps_every_deny_rule if {
	d := decided_as(as_principal(in_mode(read_outside_input, "bypassPermissions"), "trusted-bot"))
	d.reasons == [outside_reason("Read", "/etc/passwd", "read")]
}

test_bypass_refuses_every_call_of_a_principal_not_allowed_to_use_it if {
	d := decided_as(as_principal(in_mode(read_input, "bypassPermissions"), "careful"))
	d.outcome == "deny"
	d.reasons == [bypass_refused_reason("Read", "careful")]
}

test_bypass_is_not_allowed_to_principals_of_the_shipped_data if {
	every principal in ["local", "readonly-bot", "ci-builder"] {
		d := authz.decision with input as as_principal(in_mode(read_input, "bypassPermissions"), principal)
		d.reasons == [bypass_refused_reason("Read", principal)]
	}
}

test_bypass_needs_a_true_boolean if {
	principals := {"sloppy": {"bypass_permissions": "true"}}
	d := authz.decision with input as as_principal(in_mode(bash_input, "bypassPermissions"), "sloppy")
		with data.tooljail.principals as principals
	d.reasons == [bypass_refused_reason("Bash", "sloppy")]
}

test_bypass_allowance_means_nothing_in_other_modes if {
	d := decided_as(as_principal(in_mode(force_push_input, "default"), "trusted-bot"))
	d.outcome == "ask"
}
