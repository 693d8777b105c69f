package tooljail.authz_test

import data.tooljail.authz

egress_rules := {"principals": {"builder": {
	"allow": [
		{"hosts": ["pypi.org", "*.pythonhosted.org"], "ports": [443]},
		{"hosts": ["api.internal.test"], "ports": [8080], "methods": ["GET"], "paths": ["/v1/"], "address_ranges": ["private"]},
		{"hosts": ["mirror.test"]},
		{"hosts": ["forge.test"], "ports": [22], "opaque": true},
	],
	"budget": {"connections": 5, "bytes": 1000},
}}}

egress_input(principal, destination) := {
	"version": 1,
	"call": {
		"tool_use_id": "toolu_1",
		"tool": "Bash",
		"caller": {"principal": principal, "transport": "unix"},
		"session": {"id": "s", "workspace": "/ws", "mode": "default", "grants": []},
	},
	"destination": object.union(
		{"via": "connect", "port": 443, "intercepted": false, "addresses": [{"address": "192.0.2.1", "range": "public"}]},
		destination,
	),
	"usage": {"connections": 0, "bytes": 0},
}

egress_decision(principal, destination) := d if {
	d := authz.egress with input as egress_input(principal, destination)
		with data.tooljail.egress as egress_rules
}

test_shipped_policy_refuses_every_destination if {
	d := authz.egress with input as egress_input("builder", {"host": "pypi.org"})
	d.allow == false
	contains(d.reasons[0], "CONNECT pypi.org:443")
	d.address_ranges == ["public"]
	d.budget == {"connections": 64, "bytes": 268435456}
}

test_listed_host_and_port_are_allowed_public_only if {
	d := egress_decision("builder", {"host": "pypi.org"})
	d.allow
	d.reasons == []
	d.address_ranges == ["public"]
	d.budget == {"connections": 5, "bytes": 1000}
}

test_other_port_and_principal_are_refused if {
	not egress_decision("builder", {"host": "pypi.org", "port": 80}).allow
	not egress_decision("someone-else", {"host": "pypi.org"}).allow
}

test_wildcard_covers_subdomains_not_the_domain if {
	egress_decision("builder", {"host": "files.pythonhosted.org"}).allow
	egress_decision("builder", {"host": "a.b.pythonhosted.org"}).allow
	not egress_decision("builder", {"host": "pythonhosted.org"}).allow
	not egress_decision("builder", {"host": "evilpythonhosted.org"}).allow
}

test_ports_default_to_443 if {
	egress_decision("builder", {"host": "mirror.test"}).allow
	not egress_decision("builder", {"host": "mirror.test", "port": 8443}).allow
}

test_method_and_path_rules_match_requests_only if {
	request := {"host": "api.internal.test", "port": 8080, "via": "http", "scheme": "http"}
	d := egress_decision("builder", object.union(request, {"method": "GET", "path": "/v1/items?x=1"}))
	d.allow
	d.address_ranges == ["private"]
	not egress_decision("builder", object.union(request, {"method": "POST", "path": "/v1/items"})).allow
	not egress_decision("builder", object.union(request, {"method": "GET", "path": "/v2/items"})).allow

	# a tunnel cannot be checked against a path
	not egress_decision("builder", {"host": "api.internal.test", "port": 8080}).allow
}

test_method_and_path_rules_open_intercepted_tunnels if {
	# the proxy terminates TLS there (a credential is configured) and decides each request
	tunnel := {"host": "api.internal.test", "port": 8080, "intercepted": true}
	d := egress_decision("builder", object.union(tunnel, {"addresses": [{"address": "10.0.0.1", "range": "private"}]}))
	d.allow
	d.address_ranges == ["private"]
	not egress_decision("builder", object.union(tunnel, {"port": 8443})).allow
}

test_refusal_names_method_and_path if {
	d := egress_decision("builder", {"host": "x.test", "port": 80, "via": "http", "method": "get", "path": "/a"})
	contains(d.reasons[0], "GET x.test:80/a")
	contains(d.reasons[0], "\"builder\"")
}

test_egress_network_is_granted_per_principal if {
	d := authz.decision with input as bash_input
		with data.tooljail.principals as {"local": {"network": "egress"}}
	d.sandbox.network == "egress"
}

test_only_rules_saying_so_allow_opaque_tunnels if {
	egress_decision("builder", {"host": "forge.test", "port": 22}).opaque
	not egress_decision("builder", {"host": "pypi.org"}).opaque
	not authz.egress.opaque with input as egress_input("builder", {"host": "forge.test", "port": 22})
}
