# Tests of PreToolUse hook decisions (hooks.rego).
package tooljail.authz_test

# --- Helpers ---------------------------------------------------------------------------------

with_hooks(doc, hooks) := object.union(doc, {"hooks": hooks})

hook(name, decision, reason) := {"name": name, "decision": decision, "reason": reason}

block_push := hook("block-push", "deny", "git push is not allowed from agents; open a pull request instead.")

review_secrets := hook("review-secrets", "ask", "The file may hold credentials.")

let_through := hook("approve-all", "allow", "Everything is fine.")

unknown_decision_reason(name, decision) := concat("", [
	sprintf("%s answered %s, which is not a PreToolUse decision this policy knows (allow, ask, deny, none), ", [name, decision]),
	"so the call is refused; fix the hook's output.",
])

# --- deny ------------------------------------------------------------------------------------

test_a_hook_deny_refuses_the_call_with_its_reason if {
	d := decided(with_hooks(bash_line("git push origin main", [simple(["git", "push", "origin", "main"])]), [block_push]))
	d.outcome == "deny"
	d.reasons == ["block-push: git push is not allowed from agents; open a pull request instead."]
}

test_a_hook_deny_is_not_lifted_by_an_approval_or_a_grant if {
	doc := with_hooks(approved(session_grant_bash_input), [block_push])
	d := decided(doc)
	d.outcome == "deny"
	d.reasons == ["block-push: git push is not allowed from agents; open a pull request instead."]
}

test_a_hook_deny_holds_in_bypass_mode if {
	doc := as_principal(in_mode(with_hooks(read_input, [block_push]), "bypassPermissions"), "trusted-bot")
	d := decided_as(doc)
	d.outcome == "deny"
}

test_a_hook_deny_without_a_reason_names_the_hook if {
	d := decided(with_hooks(read_input, [hook("guard", "deny", "")]))
	d.reasons == ["guard: the hook blocked this call without giving a reason; ask the operator who configured it."]
}

test_a_hook_without_a_name_is_still_obeyed if {
	d := decided(with_hooks(read_input, [{"decision": "deny", "reason": "Reads are off today."}]))
	d.reasons == ["A PreToolUse hook: Reads are off today."]
}

test_deny_and_policy_denies_are_reported_together if {
	d := decided(with_hooks(sudo_ls_input, [block_push]))
	d.reasons == [
		privilege_reason("sudo"),
		"block-push: git push is not allowed from agents; open a pull request instead.",
	]
}

test_hook_deny_beats_hook_ask if {
	d := decided(with_hooks(read_input, [review_secrets, block_push]))
	d.outcome == "deny"
	d.reasons == ["block-push: git push is not allowed from agents; open a pull request instead."]
}

# --- ask -------------------------------------------------------------------------------------

test_a_hook_ask_needs_approval if {
	d := decided(with_hooks(edit_input, [review_secrets]))
	d.outcome == "ask"
	d.reasons == ["review-secrets: The file may hold credentials."]
}

test_a_hook_ask_without_a_reason_names_the_hook if {
	d := decided(with_hooks(edit_input, [hook("guard", "ask", "")]))
	d.reasons == [concat("", [
		"guard: the hook asked for a person's approval of this call without giving a reason; ",
		"ask the operator who configured it.",
	])]
}

test_a_hook_ask_is_lifted_by_an_approval if {
	d := decided(approved(with_hooks(edit_input, [review_secrets])))
	d.outcome == "allow"
	d.reasons == [
		"Edit runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		approval_note("Edit"),
	]
}

test_a_hook_ask_is_lifted_by_a_grant if {
	doc := with_grants(with_hooks(edit_input, [review_secrets]), [src_edit_grant])
	d := decided(doc)
	d.outcome == "allow"
	d.reasons == [
		"Edit runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		concat("", [
			"Edit: the session grant for Edit under /srv/ws/src/, which a person approved earlier in this session, ",
			"covers this call, so it runs without asking again.",
		]),
	]
}

test_a_hook_ask_is_not_lifted_by_accept_edits if {
	d := decided(in_mode(with_hooks(edit_input, [review_secrets]), "acceptEdits"))
	d.outcome == "ask"
	d.reasons == ["review-secrets: The file may hold credentials."]
}

test_a_hook_ask_is_not_lifted_by_bypass if {
	doc := as_principal(in_mode(with_hooks(force_push_input, [review_secrets]), "bypassPermissions"), "trusted-bot")
	d := decided_as(doc)
	d.outcome == "ask"
	d.reasons == ["review-secrets: The file may hold credentials."]
}

test_a_hook_ask_becomes_a_deny_in_dont_ask_mode if {
	d := decided(in_mode(with_hooks(edit_input, [review_secrets]), "dontAsk"))
	d.outcome == "deny"
	d.reasons == [dont_ask_reason("Edit", "review-secrets: The file may hold credentials.")]
}

test_a_hook_ask_does_not_beat_a_policy_deny if {
	d := decided(with_hooks(sudo_ls_input, [review_secrets]))
	d.reasons == [privilege_reason("sudo")]
}

test_hook_and_policy_asks_are_reported_together if {
	d := decided(with_hooks(force_push_input, [review_secrets]))
	d.outcome == "ask"
	d.reasons == [force_push_reason, "review-secrets: The file may hold credentials."]
}

# --- allow and none --------------------------------------------------------------------------

test_a_hook_allow_does_not_lift_a_policy_ask if {
	d := decided(with_hooks(force_push_input, [let_through]))
	d.outcome == "ask"
	d.reasons == [force_push_reason]
}

test_a_hook_allow_does_not_lift_a_policy_deny if {
	every doc in [sudo_ls_input, read_outside_input, in_mode(write_input, "plan")] {
		decided(with_hooks(doc, [let_through])).outcome == "deny"
	}
}

test_a_hook_allow_adds_nothing_to_an_allowed_call if {
	d := decided(with_hooks(bash_input, [let_through]))
	d.reasons == ["Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws."]
}

test_a_hook_allow_does_not_allow_what_no_rule_allows if {
	doc := json.remove(with_hooks(with_paths(read_input, []), [let_through]), ["session/workspace"])
	decided(doc).outcome == "deny"
}

test_the_example_hooks_change_nothing if {
	d := decided(hooked_edit_input)
	d.outcome == "allow"
	d.reasons == ["Edit runs in the sandbox, and every path it touches is inside the workspace /srv/ws."]
}

test_no_hooks_and_an_empty_list_change_nothing if {
	decided(with_hooks(read_input, [])).outcome == "allow"
	decided(read_input).outcome == "allow"
}

# --- What the policy cannot read -------------------------------------------------------------

test_a_hook_with_an_unknown_decision_refuses_the_call if {
	d := decided(with_hooks(read_input, [hook("guard", "block", "no")]))
	d.outcome == "deny"
	d.reasons == [unknown_decision_reason("guard", "block")]
}

test_a_hook_without_a_decision_refuses_the_call if {
	d := decided(with_hooks(read_input, [{"name": "guard", "reason": "no"}]))
	d.reasons == [unknown_decision_reason("guard", "nothing")]
}

test_a_hook_entry_that_is_not_an_object_refuses_the_call if {
	d := decided(with_hooks(read_input, ["deny"]))
	d.reasons == [unknown_decision_reason("A PreToolUse hook", "nothing")]
}

test_hooks_that_are_not_a_list_refuse_the_call if {
	every hooks in [{"name": "x", "decision": "allow"}, "deny", null] {
		d := decided(with_hooks(read_input, hooks))
		d.reasons == [concat("", [
			"The daemon sent PreToolUse hook decisions (input.hooks) that are not a list, ",
			"so the call is refused; update the daemon or the policy so that they match.",
		])]
	}
}
