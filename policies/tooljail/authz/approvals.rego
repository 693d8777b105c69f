# Who may answer an ask (Admin.Approve, Admin.Deny) and see it (ListPendingApprovals).
#
# An approver is a person's client or a chat-ops bot the operator names in data.json
# (data.tooljail.principals[p].approver), or whoever is on the daemon's Unix socket. Answering
# one's own ask follows the same rule as sending one's own token back (authz.rego): allowed on
# the Unix socket and for principals with self_approve, not for a remote bot.
package tooljail.authz

# METADATA
# title: Answer an approval
# description: Whether input.caller may see, approve or deny the pending ask input.ask.
# entrypoint: true
default approve := {
	"allow": false,
	"reasons": ["No policy rule lets this principal answer approvals; ask the operator to name it an approver."],
}

approve := {"allow": false, "reasons": sort(approve_deny)} if count(approve_deny) > 0

approve := {"allow": true, "reasons": sort(approve_allow)} if {
	count(approve_deny) == 0
	count(approve_allow) > 0
}

approver if input.caller.transport == "unix"

approver if principal_config.approver == true

own_ask if input.ask.principal == principal_name

approve_allow contains sprintf("%s may answer approvals.", [principal_name]) if approver

approve_deny contains sprintf(
	"Principal %s is not an approver (data.tooljail.principals[\"%s\"].approver); ask a person who is.",
	[principal_name, principal_name],
) if {
	not approver
}

approve_deny contains sprintf(
	"Principal %s asked for this call itself and may not approve its own calls; another approver must answer it.",
	[principal_name],
) if {
	approver
	own_ask
	input.action != "list"
	not self_approval_allowed
}
