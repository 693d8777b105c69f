package tooljail.authz_test

import data.tooljail.authz

refused_read_input := object.union(read_input, {"session": {"recent_refusals": {"Read": {"deny": 5, "ask": 0}}}})

test_a_tool_denied_again_and_again_is_refused_telling_the_model_to_stop if {
	d := authz.decision with input as refused_read_input
	d.outcome == "deny"
	some reason in d.reasons
	contains(reason, "Read was denied 5 times in this session")
	contains(reason, "Stop retrying it")
}

test_fewer_denials_or_another_tool_or_asks_do_not_count if {
	fewer := object.union(read_input, {"session": {"recent_refusals": {"Read": {"deny": 4, "ask": 9}}}})
	authz.decision.outcome == "allow" with input as fewer
	other := object.union(read_input, {"session": {"recent_refusals": {"Bash": {"deny": 50, "ask": 0}}}})
	authz.decision.outcome == "allow" with input as other
}

test_the_count_is_set_in_data_json if {
	authz.decision.outcome == "allow" with input as refused_read_input
		with data.tooljail.max_refusals_per_tool as 6
	authz.decision.outcome == "deny" with input as refused_read_input
		with data.tooljail.principals.local as {"max_refusals_per_tool": 2}
		with data.tooljail.max_refusals_per_tool as 50
	authz.decision.outcome == "deny" with input as refused_read_input
		with data.tooljail.max_refusals_per_tool as 0
}

test_an_approved_call_is_not_held_back if {
	approved := object.union(approved_bash_input, {"session": {"recent_refusals": {"Bash": {"deny": 9, "ask": 0}}}})
	reasons := authz.decision.reasons with input as approved
	every reason in reasons {
		not contains(reason, "Stop retrying")
	}
	unapproved := object.union(approved, {"approval": {"granted": false}})
	denied := authz.decision with input as unapproved
	denied.outcome == "deny"
}
