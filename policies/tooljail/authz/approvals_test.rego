# Tests of who may answer approvals (approvals.rego) and choose permission modes (modes.rego).
package tooljail.authz_test

import data.tooljail.authz

ask_of(principal) := {"approval_id": "a-1", "principal": principal, "session": "s-1", "tool": "Bash", "reasons": ["rm -rf"]}

answer(action, caller, asker) := {
	"version": 1,
	"action": action,
	"scope": "once",
	"ask": ask_of(asker),
	"caller": caller,
}

alice := {"principal": "alice", "transport": "tcp"}

bot := {"principal": "bot", "transport": "tcp"}

local_user := {"principal": "local", "transport": "unix"}

approvers := {"alice": {"approver": true}}

test_the_unix_socket_caller_approves_even_its_own_asks if {
	d := authz.approve with input as answer("approve", local_user, "local")
	d.allow == true
}

test_a_named_approver_approves_anothers_ask if {
	d := authz.approve with input as answer("approve", alice, "bot") with data.tooljail.principals as approvers
	d.allow == true
	d.reasons == ["alice may answer approvals."]
}

test_a_named_approver_does_not_approve_its_own_ask if {
	d := authz.approve with input as answer("approve", alice, "alice") with data.tooljail.principals as approvers
	d.allow == false
	d.reasons == ["Principal alice asked for this call itself and may not approve its own calls; another approver must answer it."]
}

test_an_approver_may_list_its_own_asks if {
	d := authz.approve with input as answer("list", alice, "alice") with data.tooljail.principals as approvers
	d.allow == true
}

test_a_bot_is_no_approver if {
	d := authz.approve with input as answer("deny", bot, "alice") with data.tooljail.principals as approvers
	d.allow == false
	d.reasons == ["Principal bot is not an approver (data.tooljail.principals[\"bot\"].approver); ask a person who is."]
}

mode_input(mode, caller) := {"version": 1, "mode": mode, "action": "open", "session_owner": caller.principal, "caller": caller}

test_restricting_modes_are_for_everyone if {
	every mode in {"default", "plan", "dontAsk"} {
		d := authz.session_mode_change with input as mode_input(mode, bot)
		d.allow == true
	}
}

test_accept_edits_on_the_unix_socket if {
	d := authz.session_mode_change with input as mode_input("acceptEdits", local_user)
	d.allow == true
}

test_accept_edits_is_refused_to_a_remote_principal if {
	d := authz.session_mode_change with input as mode_input("acceptEdits", bot)
	d.allow == false
	d.reasons == [concat("", [
		"Principal bot may not choose permission mode acceptEdits, which lifts asks the policy makes; ",
		"the operator can allow it in data.tooljail.principals[\"bot\"].modes. Open the session in mode default instead.",
	])]
}

test_data_lists_the_modes_a_principal_may_choose if {
	d := authz.session_mode_change with input as mode_input("acceptEdits", bot)
		with data.tooljail.principals as {"bot": {"modes": ["acceptEdits"]}}
	d.allow == true
}

test_bypass_permissions_needs_the_principals_setting if {
	refused := authz.session_mode_change with input as mode_input("bypassPermissions", local_user)
	refused.allow == false
	allowed := authz.session_mode_change with input as mode_input("bypassPermissions", bot)
		with data.tooljail.principals as {"bot": {"bypass_permissions": true}}
	allowed.allow == true
}

test_an_unknown_mode_is_refused if {
	d := authz.session_mode_change with input as mode_input("yolo", local_user)
	d.allow == false
	d.reasons == ["The permission mode yolo is not one this policy knows (acceptEdits, bypassPermissions, default, dontAsk, plan); choose one of them."]
}
