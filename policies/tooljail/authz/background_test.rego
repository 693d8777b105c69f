package tooljail.authz_test

import data.tooljail.authz

background_bash := object.union(bash_input, {"input": {"command": "make watch", "run_in_background": true}})

shell_tools_listing := object.union(list_tools_input, {"tools": [
	{"name": "Bash", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	{"name": "BashOutput", "read_only": true, "destructive": false, "concurrency_safe": true, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	{"name": "KillShell", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
]})

test_background_commands_are_granted_by_default if {
	authz.decision.background == {"shells": 2, "timeout_ms": 1800000, "on_timeout": false} with input as background_bash
	authz.decision.outcome == "allow" with input as background_bash
}

test_a_principal_sets_its_background_grant if {
	authz.decision.background == {"shells": 5, "timeout_ms": 60000, "on_timeout": true} with input as background_bash
		with data.tooljail.principals.local as {"background_shells": 5, "background_timeout_ms": 60000, "background_on_timeout": true}
}

test_malformed_background_settings_fall_back_to_the_defaults if {
	authz.decision.background == {"shells": 2, "timeout_ms": 1800000, "on_timeout": false} with input as background_bash
		with data.tooljail.principals.local as {"background_shells": -1, "background_timeout_ms": 5, "background_on_timeout": "yes"}
	authz.decision.background.shells == 2 with input as background_bash
		with data.tooljail.principals.local as {"background_shells": 1.5}
}

test_no_background_shells_denies_run_in_background if {
	authz.decision.outcome == "deny" with input as background_bash
		with data.tooljail.principals.local as {"background_shells": 0}
	some reason in authz.decision.reasons with input as background_bash
		with data.tooljail.principals.local as {"background_shells": 0}
	contains(reason, "may not run commands in the background")
}

test_foreground_bash_is_not_refused_for_no_background_shells if {
	authz.decision.outcome == "allow" with input as bash_input
		with data.tooljail.principals.local as {"background_shells": 0}
}

test_shell_tools_are_listed_when_background_commands_are_granted if {
	authz.visible_tools == {"Bash", "BashOutput", "KillShell"} with input as shell_tools_listing
}

test_shell_tools_are_hidden_without_background_commands if {
	authz.visible_tools == {"Bash"} with input as shell_tools_listing
		with data.tooljail.principals.local as {"background_shells": 0}
}
