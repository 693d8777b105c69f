package tooljail.authz_test

import data.tooljail.authz

retried_read_input := object.union(read_input, {"refused_before": {"deny": 3, "ask": 0}})

test_a_call_denied_again_and_again_is_refused_telling_the_model_to_stop if {
	d := authz.decision with input as retried_read_input
	d.outcome == "deny"
	some reason in d.reasons
	contains(reason, "This Read call was already denied 3 times in this session")
	contains(reason, "Stop retrying it")
}

test_fewer_denials_asks_or_other_calls_of_the_tool_do_not_count if {
	fewer := object.union(read_input, {"refused_before": {"deny": 2, "ask": 9}})
	authz.decision.outcome == "allow" with input as fewer
	tool_wide := object.union(read_input, {"session": {"recent_refusals": {"Read": {"deny": 50, "ask": 0}}}})
	authz.decision.outcome == "allow" with input as tool_wide
}

test_the_count_is_set_in_data_json if {
	authz.decision.outcome == "allow" with input as retried_read_input
		with data.tooljail.max_refusals_per_call as 4
	authz.decision.outcome == "deny" with input as retried_read_input
		with data.tooljail.principals.local as {"max_refusals_per_call": 2}
		with data.tooljail.max_refusals_per_call as 50
	authz.decision.outcome == "deny" with input as retried_read_input
		with data.tooljail.max_refusals_per_call as 0
}

test_an_approved_call_is_not_held_back if {
	approved := object.union(approved_bash_input, {"refused_before": {"deny": 9, "ask": 0}})
	reasons := authz.decision.reasons with input as approved
	every reason in reasons {
		not contains(reason, "Stop retrying")
	}
	unapproved := object.union(approved, {"approval": {"granted": false}})
	denied := authz.decision with input as unapproved
	denied.outcome == "deny"
}
