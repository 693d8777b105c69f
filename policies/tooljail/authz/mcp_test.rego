package tooljail.authz_test

import data.tooljail.authz

mcp_input(principal, server) := {
	"version": 1,
	"tool": {
		"name": sprintf("mcp__%s__search", [server]),
		"read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": false,
		"origin": {"kind": "mcp", "server": server, "trusted": false},
	},
	"input": {"q": "x"},
	"paths": [],
	"session": {"id": "s", "workspace": "/srv/ws", "mode": "default", "grants": []},
	"caller": {"principal": principal, "transport": "tcp"},
	"approval": {"granted": false},
}

mcp_principals := {"researcher": {"mcp_servers": ["docs"]}}

mcp_decision(principal, server) := d if {
	d := authz.decision with input as mcp_input(principal, server) with data.tooljail.principals as mcp_principals
}

test_a_listed_server_is_usable_though_its_tools_are_not_sandboxed if {
	d := mcp_decision("researcher", "docs")
	d.outcome == "allow"
	contains(d.reasons[0], "comes from the MCP server docs")
}

test_other_servers_and_principals_are_denied_with_the_way_out if {
	other := mcp_decision("researcher", "tickets")
	other.outcome == "deny"
	contains(concat(" ", other.reasons), "principals.<name>.mcp_servers")
	mcp_decision("someone", "docs").outcome == "deny"
}

test_builtin_tools_that_are_not_sandboxed_are_still_denied if {
	doc := object.union(mcp_input("researcher", "docs"), {"tool": {"origin": {"kind": "operator"}}})
	d := authz.decision with input as doc with data.tooljail.principals as mcp_principals
	d.outcome == "deny"
	contains(concat(" ", d.reasons), "not marked as sandboxed")
}

test_listing_hides_servers_a_principal_may_not_use if {
	tools := [
		{"name": "Read", "read_only": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
		{"name": "mcp__docs__search", "read_only": false, "origin": {"kind": "mcp", "server": "docs", "trusted": false}},
		{"name": "mcp__tickets__open", "read_only": false, "origin": {"kind": "mcp", "server": "tickets", "trusted": false}},
	]
	listing := {"version": 1, "caller": {"principal": "researcher", "transport": "tcp"}, "tools": tools}
	visible := authz.visible_tools with input as listing with data.tooljail.principals as mcp_principals
	visible == {"Read", "mcp__docs__search"}
}
