# Egress: the decision for each outbound connection of a sandbox that the call decision put on
# the egress network (sandbox.network == "egress"). The daemon's proxy asks once per CONNECT
# tunnel and once per plain-HTTP request (and once per request inside a tunnel it intercepts for
# a credential), with the call it belongs to, the destination and the addresses its name
# resolved to. The input is egress_input in input.schema.json.
#
# Shipped: deny everything. An operator lists what each principal may reach in data.json, e.g.
#
#   "egress": {
#     "budget": {"connections": 64, "bytes": 268435456},
#     "principals": {
#       "ci-builder": {
#         "allow": [
#           # the Python package index (pip): names and files
#           {"hosts": ["pypi.org", "files.pythonhosted.org"], "ports": [443]},
#           # the forge, for git over https (a credential can be bound to it in the daemon's
#           # configuration; its tunnels are then intercepted and each request decided)
#           {"hosts": ["github.com", "*.githubusercontent.com"], "ports": [443]},
#           # git over ssh through the proxy: not TLS, so the rule says opaque
#           {"hosts": ["github.com"], "ports": [22], "opaque": true},
#           # one internal API on a private address: ranges beyond "public" must be named
#           {"hosts": ["api.internal.example"], "ports": [8443], "methods": ["GET"],
#            "paths": ["/v1/"], "address_ranges": ["private"]}
#         ],
#         "budget": {"connections": 256, "bytes": 1073741824}
#       }
#     }
#   }
#
# hosts: exact names, or "*.domain" for any name below domain (not domain itself); ports: a list
# (absent: 443 only); methods and paths (prefixes) apply to requests the proxy sees (plain http,
# or an intercepted tunnel) and make a rule match no CONNECT tunnel the proxy does not
# intercept: a path cannot be checked inside TLS the proxy does not terminate. address_ranges: where the proxy may connect
# (absent: public only), so a name that resolves to loopback, a private network or the cloud
# metadata address is refused unless a rule names that range on purpose. opaque: true lets a
# matching tunnel carry something other than TLS naming its host (git over ssh, say); without
# it a tunnel must begin with a TLS hello whose server name is the CONNECT host.
package tooljail.authz

egress := {
	"allow": egress_allowed,
	"reasons": egress_reasons,
	"address_ranges": egress_address_ranges,
	"budget": egress_budget,
	"opaque": egress_opaque,
}

default egress_allowed := false

egress_allowed if count(egress_matches) > 0

default egress_config := {}

egress_config := data.tooljail.egress

egress_principal := object.get(object.get(egress_config, "principals", {}), input.call.caller.principal, {})

egress_rules := object.get(egress_principal, "allow", [])

egress_matches contains i if {
	some i, rule in egress_rules
	egress_host_matches(rule, input.destination.host)
	input.destination.port in object.get(rule, "ports", [443])
	egress_request_matches(rule)
}

egress_host_matches(rule, host) if host in object.get(rule, "hosts", [])

egress_host_matches(rule, host) if {
	some pattern in object.get(rule, "hosts", [])
	startswith(pattern, "*.")
	endswith(host, substring(pattern, 1, -1))
}

# A rule without methods or paths matches tunnels and requests alike.
egress_request_matches(rule) if {
	not rule.methods
	not rule.paths
}

egress_request_matches(rule) if {
	input.destination.via == "http"
	egress_method_matches(rule)
	egress_path_matches(rule)
}

# A tunnel the proxy intercepts (a credential is configured for it; the sandbox cannot claim
# this) may open for a rule limiting requests: each request inside is then decided by it.
egress_request_matches(_) if {
	input.destination.via == "connect"
	input.destination.intercepted == true
}

egress_method_matches(rule) if not rule.methods

egress_method_matches(rule) if input.destination.method in rule.methods

egress_path_matches(rule) if not rule.paths

egress_path_matches(rule) if {
	some prefix in rule.paths
	startswith(input.destination.path, prefix)
}

default egress_address_ranges := ["public"]

egress_address_ranges := sort({r |
	some i in egress_matches
	some r in object.get(egress_rules[i], "address_ranges", ["public"])
}) if {
	count(egress_matches) > 0
}

# A tunnel must begin with a TLS hello naming its host, unless a matching rule says
# "opaque": true (ssh, or another protocol the proxy cannot read).
default egress_opaque := false

egress_opaque if {
	some i in egress_matches
	egress_rules[i].opaque == true
}

default egress_reasons := []

egress_reasons := [sprintf(
	"No egress rule lets principal %q reach %s; the operator lists the destinations each principal may reach in data.tooljail.egress (policies/tooljail/authz/egress.rego shows how).",
	[input.call.caller.principal, egress_destination_text],
)] if {
	not egress_allowed
}

egress_destination_text := sprintf("%s %s:%d%s", [
	upper(object.get(input.destination, "method", "CONNECT")),
	input.destination.host,
	input.destination.port,
	object.get(input.destination, "path", ""),
])

egress_budget := object.get(
	egress_principal, "budget",
	object.get(egress_config, "budget", {"connections": 64, "bytes": 268435456}),
)
