# METADATA
# title: Tests of tooljail.authz
# description: |
#   One scenario per test. The *_input objects below are example input documents; keep them
#   plain JSON (no references), because tests/unit/test_policy_schema.py reads them and checks
#   them against policies/input.schema.json.
package tooljail.authz_test

import data.tooljail.authz

# --- Example input documents (plain JSON) ----------------------------------------------------

read_input := {
	"version": 1,
	"tool": {"name": "Read", "read_only": true, "destructive": false, "concurrency_safe": true, "sandboxed": false, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	"input": {"file_path": "/srv/ws/a.txt", "limit": 10},
	"paths": [{"path": "/srv/ws/a.txt", "access": "read", "inside_workspace": true}],
	"session": {"id": "default", "workspace": "/srv/ws", "mode": "default", "grants": []},
	"caller": {"principal": "local", "transport": "unix"},
	"approval": {"granted": false},
}

write_input := {
	"version": 1,
	"tool": {"name": "Write", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	"input": {"file_path": "/srv/ws/notes/b.txt", "content": "hello\n"},
	"paths": [{"path": "/srv/ws/notes/b.txt", "access": "write", "inside_workspace": true}],
	"session": {"id": "default", "workspace": "/srv/ws", "mode": "default", "grants": []},
	"caller": {"principal": "local", "transport": "unix"},
	"approval": {"granted": false},
}

bash_input := {
	"version": 1,
	"tool": {"name": "Bash", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	"input": {"command": "ls -la", "timeout": 5000},
	"paths": [],
	"session": {"id": "default", "workspace": "/srv/ws", "mode": "default", "grants": []},
	"caller": {"principal": "local", "transport": "unix"},
	"approval": {"granted": false},
	"command": {
		"raw": "ls -la",
		"parsed": true,
		"parse_error": "",
		"simple_commands": [{"argv": ["ls", "-la"], "name": "ls", "path": "ls", "wrappers": [], "assignments": [], "context": "simple"}],
		"redirects": [],
		"written_paths": [],
	},
}

# A destructive line that a person approved: the shape of input.approval when granted.
approved_bash_input := {
	"version": 1,
	"tool": {"name": "Bash", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	"input": {"command": "cd /srv/ws && env A=1 /bin/rm -rf /srv/ws/ 2>/dev/null", "timeout": 60000},
	"paths": [],
	"session": {"id": "s-7", "workspace": "/srv/ws", "mode": "default", "grants": []},
	"caller": {"principal": "local", "transport": "unix"},
	"approval": {
		"granted": true,
		"token_id": "tok-1f3a",
		"approved_by": "local",
		"self_approved": true,
		"scope": "once",
		"issued_at": 1767225600,
		"expires_at": 1767226200,
	},
	"command": {
		"raw": "cd /srv/ws && env A=1 /bin/rm -rf /srv/ws/ 2>/dev/null",
		"parsed": true,
		"parse_error": "",
		"simple_commands": [
			{
				"argv": ["cd", "/srv/ws"], "name": "cd", "path": "cd", "wrappers": [], "context": "list",
				"cwd": "/srv/ws", "words": [{"text": "/srv/ws", "dynamic": false, "path": "/srv/ws"}],
			},
			{
				"argv": ["/bin/rm", "-rf", "/srv/ws/"], "name": "rm", "path": "/bin/rm",
				"wrappers": ["env"], "assignments": ["A=1"], "context": "list", "cwd": "/srv/ws",
				"words": [
					{"text": "-rf", "dynamic": false, "path": ""},
					{"text": "/srv/ws/", "dynamic": false, "path": "/srv/ws"},
				],
			},
		],
		"redirects": [{"op": "2>", "target": "/dev/null"}],
		"written_paths": ["/dev/null"],
	},
}

list_tools_input := {
	"version": 1,
	"caller": {"principal": "local", "transport": "unix"},
	"session": {"id": "default", "workspace": "/srv/ws", "mode": "default", "grants": []},
	"tools": [
		{"name": "Read", "read_only": true, "destructive": false, "concurrency_safe": true, "sandboxed": false, "origin": {"kind": "builtin", "server": "", "trusted": true}},
		{"name": "Grep", "read_only": true, "destructive": false, "concurrency_safe": true, "sandboxed": false, "origin": {"kind": "builtin", "server": "", "trusted": true}},
		{"name": "Write", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
		{"name": "Bash", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	],
}

# --- Helpers ---------------------------------------------------------------------------------

default_sandbox := {
	"timeout_ms": 120000, "memory_mb": 512, "cpus": 1, "pids": 256, "network": "none",
	"git": "read_only",
}

as_principal(doc, principal) := object.union(doc, {"caller": {"principal": principal}})

with_paths(doc, paths) := object.union(doc, {"paths": paths})

bash_timeout(timeout) := object.union(bash_input, {"input": {"timeout": timeout}})

# input.approval as the daemon sends it for a call that carries a valid approval token.
granted := approved_bash_input.approval

approved(doc) := object.union(doc, {"approval": granted})

# What an allow reports when an approval let its asks pass.
approval_note(tool) := sprintf(
	"%s: local approved this call (approval tok-1f3a), so it runs without asking again.",
	[tool],
)

decided(doc) := d if {
	d := authz.decision with input as doc
}

# The decision has this outcome and one of its reasons contains the phrase.
decides(doc, outcome, phrase) if {
	d := decided(doc)
	d.outcome == outcome
	some reason in d.reasons
	contains(reason, phrase)
}

outside_reason(tool, path, access) := sprintf(
	"%s: %s is outside the workspace /srv/ws, so %s access is refused; only paths inside the workspace may be touched.",
	[tool, path, access],
)

read_only_principal_reason(tool) := sprintf(
	"%s can change files or run commands, and principal readonly-bot may only use read-only tools; %s",
	[tool, "use a read-only tool such as Read, Glob, Grep or LS instead."],
)

# --- The decision object ---------------------------------------------------------------------

default_background := {"shells": 2, "timeout_ms": 1800000, "on_timeout": false}

test_read_inside_workspace_is_allowed if {
	authz.decision == {
		"outcome": "allow",
		"reasons": ["Read only reads, and every path it touches is inside the workspace /srv/ws."],
		"sandbox": default_sandbox,
		"result_budget_chars": 50000,
		"turn_budget_chars": 200000,
		"cache_ttl_s": 30,
		"background": default_background,
	} with input as read_input
}

test_no_matching_rule_denies_with_default_reason if {
	# A read-only call with no workspace to check its paths against: no rule allows it.
	doc := json.remove(with_paths(read_input, []), ["session/workspace"])
	authz.decision == {
		"outcome": "deny",
		"reasons": ["No policy rule allows this tool call, so it was refused; use another tool or ask the operator."],
		"sandbox": default_sandbox,
		"result_budget_chars": 50000,
		"turn_budget_chars": 200000,
		"cache_ttl_s": 30,
		"background": default_background,
	} with input as doc
}

test_only_read_only_decisions_may_be_reused if {
	authz.decision.cache_ttl_s == 30 with input as read_input
	authz.decision.cache_ttl_s == 0 with input as json.patch(read_input, [{"op": "replace", "path": "/tool/read_only", "value": false}])
	authz.decision.cache_ttl_s == 0 with input as json.remove(read_input, ["tool/read_only"])
}

test_missing_paths_list_is_denied if {
	d := authz.decision with input as json.remove(read_input, ["paths"])
	d.outcome == "deny"
	d.reasons == ["No policy rule allows this tool call, so it was refused; use another tool or ask the operator."]
}

# --- Workspace confinement -------------------------------------------------------------------

test_read_outside_workspace_names_path_access_and_workspace if {
	doc := with_paths(read_input, [{"path": "/etc/passwd", "access": "read", "inside_workspace": false}])
	d := authz.decision with input as doc
	d.outcome == "deny"
	d.reasons == [outside_reason("Read", "/etc/passwd", "read")]
}

test_write_outside_workspace_names_write_access if {
	doc := with_paths(write_input, [{"path": "/etc/hosts", "access": "write", "inside_workspace": false}])
	d := authz.decision with input as doc
	d.outcome == "deny"
	d.reasons == [outside_reason("Write", "/etc/hosts", "write")]
}

test_one_reason_per_outside_path if {
	doc := with_paths(read_input, [
		{"path": "/srv/ws/ok.txt", "access": "read", "inside_workspace": true},
		{"path": "/etc/shadow", "access": "read", "inside_workspace": false},
		{"path": "/home/u/.ssh/id_ed25519", "access": "read", "inside_workspace": false},
	])
	d := authz.decision with input as doc
	d.outcome == "deny"
	d.reasons == [
		outside_reason("Read", "/etc/shadow", "read"),
		outside_reason("Read", "/home/u/.ssh/id_ed25519", "read"),
	]
}

test_daemon_verdict_outside_wins_over_matching_prefix if {
	# A symlink inside the workspace that resolves elsewhere: only the daemon can know.
	doc := with_paths(read_input, [{"path": "/srv/ws/link", "access": "read", "inside_workspace": false}])
	d := authz.decision with input as doc
	d.reasons == [outside_reason("Read", "/srv/ws/link", "read")]
}

test_prefix_check_catches_daemon_saying_inside if {
	doc := with_paths(read_input, [{"path": "/etc/passwd", "access": "read", "inside_workspace": true}])
	d := authz.decision with input as doc
	d.reasons == [outside_reason("Read", "/etc/passwd", "read")]
}

test_sibling_directory_sharing_the_prefix_is_outside if {
	doc := with_paths(read_input, [{"path": "/srv/ws2/a.txt", "access": "read", "inside_workspace": true}])
	d := authz.decision with input as doc
	d.reasons == [outside_reason("Read", "/srv/ws2/a.txt", "read")]
}

test_parent_segment_is_outside if {
	doc := with_paths(read_input, [{"path": "/srv/ws/../etc/passwd", "access": "read", "inside_workspace": true}])
	d := authz.decision with input as doc
	d.reasons == [outside_reason("Read", "/srv/ws/../etc/passwd", "read")]
}

test_relative_path_is_outside if {
	doc := with_paths(read_input, [{"path": "a.txt", "access": "read", "inside_workspace": true}])
	d := authz.decision with input as doc
	d.reasons == [outside_reason("Read", "a.txt", "read")]
}

test_workspace_root_itself_is_inside if {
	doc := with_paths(read_input, [{"path": "/srv/ws", "access": "read", "inside_workspace": true}])
	d := authz.decision with input as doc
	d.outcome == "allow"
}

test_another_workspace_root_itself_is_inside if {
	doc := {
		"version": 1,
		"tool": {"name": "LS", "read_only": true, "destructive": false, "concurrency_safe": true, "sandboxed": false, "origin": {"kind": "builtin", "server": "", "trusted": true}},
		"input": {"path": "/home/u/proj"},
		"paths": [{"path": "/home/u/proj", "access": "read", "inside_workspace": true}],
		"session": {"id": "s1", "workspace": "/home/u/proj", "mode": "default", "grants": []},
		"caller": {"principal": "local", "transport": "tcp"},
	}
	d := authz.decision with input as doc
	d.reasons == ["LS only reads, and every path it touches is inside the workspace /home/u/proj."]
}

test_relative_workspace_allows_nothing if {
	doc := object.union(read_input, {"session": {"workspace": "srv/ws"}})
	d := authz.decision with input as doc
	d.outcome == "deny"
}

# --- Tools that change things ----------------------------------------------------------------

test_write_inside_workspace_is_allowed if {
	d := authz.decision with input as write_input
	d.outcome == "allow"
	d.reasons == ["Write runs in the sandbox, and every path it touches is inside the workspace /srv/ws."]
}

test_bash_without_paths_is_allowed if {
	d := authz.decision with input as bash_input
	d.outcome == "allow"
	d.reasons == ["Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws."]
}

test_unsandboxed_writer_is_denied if {
	doc := object.union(write_input, {"tool": {"sandboxed": false}})
	d := authz.decision with input as doc
	d.outcome == "deny"
	d.reasons == [concat("", [
		"Write can change files or run commands but is not marked as sandboxed; ",
		"this policy runs such tools only in the sandbox, so the call is refused.",
	])]
}

test_tool_without_traits_is_treated_as_unsandboxed_writer if {
	doc := object.union(write_input, {"tool": {"name": "Mystery"}})
	d := authz.decision with input as json.remove(doc, ["tool/read_only", "tool/sandboxed"])
	d.outcome == "deny"
	d.reasons == [concat("", [
		"Mystery can change files or run commands but is not marked as sandboxed; ",
		"this policy runs such tools only in the sandbox, so the call is refused.",
	])]
}

test_call_without_tool_description_is_denied if {
	d := authz.decision with input as json.remove(write_input, ["tool"])
	d.outcome == "deny"
	d.reasons == [concat("", [
		"The tool can change files or run commands but is not marked as sandboxed; ",
		"this policy runs such tools only in the sandbox, so the call is refused.",
	])]
}

test_read_only_tool_that_writes_is_denied if {
	doc := with_paths(read_input, [{"path": "/srv/ws/a.txt", "access": "write", "inside_workspace": true}])
	d := authz.decision with input as doc
	d.outcome == "deny"
	d.reasons == [concat("", [
		"Read is declared read-only but would write to /srv/ws/a.txt; ",
		"the call is refused because a read-only tool may not write.",
	])]
}

# --- Bash timeout ----------------------------------------------------------------------------

test_bash_timeout_comes_from_input if {
	d := authz.decision with input as bash_input
	d.sandbox.timeout_ms == 5000
}

test_bash_timeout_is_clamped_to_ten_minutes if {
	d := authz.decision with input as bash_timeout(3600000)
	d.sandbox.timeout_ms == 600000
}

test_bash_fractional_timeout_is_rounded_down if {
	d := authz.decision with input as bash_timeout(1500.7)
	d.sandbox.timeout_ms == 1500
}

test_bash_without_timeout_gets_the_default if {
	d := authz.decision with input as json.remove(bash_input, ["input/timeout"])
	d.sandbox == default_sandbox
}

test_bash_zero_timeout_gets_the_default if {
	d := authz.decision with input as bash_timeout(0)
	d.sandbox.timeout_ms == 120000
}

test_bash_string_timeout_gets_the_default if {
	d := authz.decision with input as bash_timeout("5000")
	d.sandbox.timeout_ms == 120000
}

test_timeout_of_other_tools_is_ignored if {
	doc := object.union(write_input, {"input": {"timeout": 5000}})
	d := authz.decision with input as doc
	d.sandbox.timeout_ms == 120000
}

# --- Command rules only read commands ------------------------------------------------------

test_sudo_in_another_tool_input_is_ignored if {
	doc := object.union(write_input, {"input": {"content": "sudo make install\n"}})
	d := authz.decision with input as doc
	d.outcome == "allow"
}

# --- Input version ---------------------------------------------------------------------------

test_unknown_version_is_denied if {
	d := authz.decision with input as object.union(read_input, {"version": 2})
	d.outcome == "deny"
	d.reasons == [concat("", [
		"The daemon sent policy input version 2, but this policy understands version 1 only; ",
		"update the daemon or the policy so that they match.",
	])]
}

test_missing_version_is_denied if {
	d := authz.decision with input as json.remove(read_input, ["version"])
	d.outcome == "deny"
	d.reasons == [concat("", [
		"The daemon sent policy input version (none), but this policy understands version 1 only; ",
		"update the daemon or the policy so that they match.",
	])]
}

# --- Principals (data.json) ------------------------------------------------------------------

test_readonly_bot_may_read_inside_workspace if {
	d := authz.decision with input as as_principal(read_input, "readonly-bot")
	d.outcome == "allow"
}

test_readonly_bot_write_is_denied if {
	d := authz.decision with input as as_principal(write_input, "readonly-bot")
	d.outcome == "deny"
	d.reasons == [
		read_only_principal_reason("Write"),
		"Write is not available to principal readonly-bot; use one of the tools that ListTools shows.",
	]
}

test_readonly_bot_bash_is_denied if {
	d := authz.decision with input as as_principal(bash_input, "readonly-bot")
	d.outcome == "deny"
}

test_read_only_only_denies_a_writer_missing_from_hidden_tools if {
	doc := as_principal(object.union(write_input, {"tool": {"name": "NotebookEdit"}}), "readonly-bot")
	d := authz.decision with input as doc
	d.reasons == [read_only_principal_reason("NotebookEdit")]
}

test_hidden_read_only_tool_is_denied if {
	principals := {"auditor": {"hidden_tools": ["Read"]}}
	d := authz.decision with input as as_principal(read_input, "auditor")
		with data.tooljail.principals as principals
	d.outcome == "deny"
	d.reasons == ["Read is not available to principal auditor; use one of the tools that ListTools shows."]
}

test_call_without_caller_gets_the_shipped_rules if {
	d := authz.decision with input as json.remove(write_input, ["caller"])
	d.outcome == "allow"
}

test_unknown_principal_gets_the_shipped_rules if {
	d := authz.decision with input as as_principal(write_input, "someone-else")
	d.outcome == "allow"
}

# --- Precedence: deny beats ask beats allow --------------------------------------------------

test_ask_tool_asks if {
	principals := {"careful": {"ask_tools": ["Bash"]}}
	d := authz.decision with input as as_principal(bash_input, "careful")
		with data.tooljail.principals as principals
	d.outcome == "ask"
	d.reasons == ["Bash needs a person's approval for principal careful; the call waits until someone approves it."]
}

test_ask_beats_allow if {
	principals := {"careful": {"ask_tools": ["Read"]}}
	d := authz.decision with input as as_principal(read_input, "careful")
		with data.tooljail.principals as principals
	d.outcome == "ask"
}

test_deny_beats_ask if {
	principals := {"careful": {"ask_tools": ["Bash"]}}
	d := authz.decision with input as as_principal(sudo_id_input, "careful")
		with data.tooljail.principals as principals
	d.outcome == "deny"
	d.reasons == [privilege_reason("sudo")]
}

test_deny_beats_allow if {
	# Bash inside the workspace is allowed, but sudo is denied: only the deny reason is reported.
	d := authz.decision with input as sudo_id_input
	d.outcome == "deny"
	d.reasons == [privilege_reason("sudo")]
}

# --- Approval ----------------------------------------------------------------------------------

test_granted_approval_turns_an_ask_into_allow if {
	d := authz.decision with input as approved_bash_input
	d.outcome == "allow"
	d.reasons == [
		"Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		approval_note("Bash"),
	]
}

# Over TCP, a principal sending its own token back has not been approved by anyone.
remote_self_approved := object.union(approved_bash_input, {"caller": {"principal": "bot", "transport": "tcp"}, "approval": {"approved_by": "bot"}})

test_a_remote_principal_cannot_approve_its_own_call if {
	d := authz.decision with input as remote_self_approved
	d.outcome == "deny"
	d.reasons == [concat("", [
		"Bash: principal bot sent its approval token back without an approver having approved the call, ",
		"and this policy does not let it approve its own calls; an approver must approve it first ",
		"(tooljail approvals approve tok-1f3a), then resend the call with the token.",
	])]
}

test_a_principal_data_lets_approve_its_own_calls_may if {
	d := authz.decision with input as remote_self_approved
		with data.tooljail.principals as {"bot": {"self_approve": true}}
	d.outcome == "allow"
}

test_an_approvers_approval_lifts_the_ask_of_a_remote_principal if {
	doc := object.union(remote_self_approved, {"approval": {"approved_by": "alice", "self_approved": false}})
	d := authz.decision with input as doc
	d.outcome == "allow"
	"Bash: alice approved this call (approval tok-1f3a), so it runs without asking again." in d.reasons
}

test_a_permission_request_hooks_approval_counts_by_default if {
	doc := object.union(remote_self_approved, {"approval": {"approved_by": "hook:auto-approve", "self_approved": false}})
	d := authz.decision with input as doc
	d.outcome == "allow"
	"Bash: hook:auto-approve approved this call (approval tok-1f3a), so it runs without asking again." in d.reasons
}

test_a_hook_approval_does_not_answer_a_pre_tool_use_hooks_ask if {
	asked := object.union(remote_self_approved, {
		"approval": {"approved_by": "hook:auto-approve", "self_approved": false},
		"hooks": [{"name": "confirm-prod", "decision": "ask", "reason": "a person must confirm prod"}],
	})
	d := authz.decision with input as asked
	d.outcome == "ask"

	# A person's approval does.
	person := object.union(asked, {"approval": {"approved_by": "alice"}})
	authz.decision.outcome == "allow" with input as person
}

test_a_principal_may_refuse_approvals_by_hooks if {
	doc := object.union(remote_self_approved, {"approval": {"approved_by": "hook:auto-approve", "self_approved": false}})
	d := authz.decision with input as doc
		with data.tooljail.principals as {"bot": {"hook_approvals": false}}
	d.outcome == "deny"
	some reason in d.reasons
	contains(reason, "does not accept approvals by hooks")

	# A person's approval still counts for that principal.
	person := object.union(remote_self_approved, {"approval": {"approved_by": "alice", "self_approved": false}})
	authz.decision.outcome == "allow" with input as person
		with data.tooljail.principals as {"bot": {"hook_approvals": false}}
}

test_an_approval_adds_no_note_when_nothing_asked if {
	d := authz.decision with input as approved(bash_input)
	d.reasons == ["Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws."]
}

test_same_call_without_approval_asks if {
	d := authz.decision with input as object.union(approved_bash_input, {"approval": {"granted": false}})
	d.outcome == "ask"
	d.reasons == [concat("", [
		"Bash: `/bin/rm -rf /srv/ws/` recursively deletes the workspace root /srv/ws; ",
		"a person must approve it before it runs. To delete less, name the exact files or subdirectories inside the workspace.",
	])]
}

test_granted_approval_does_not_lift_a_deny if {
	d := authz.decision with input as approved(sudo_id_input)
	d.outcome == "deny"
	d.reasons == [privilege_reason("sudo")]
}

test_granted_approval_lifts_an_ask_tools_ask if {
	principals := {"careful": {"ask_tools": ["Write"]}}
	d := authz.decision with input as approved(as_principal(write_input, "careful"))
		with data.tooljail.principals as principals
	d.outcome == "allow"
}

test_approval_without_token_id_is_no_approval if {
	doc := object.union(approved_bash_input, {"approval": {"token_id": ""}})
	d := authz.decision with input as doc
	d.outcome == "ask"
}

test_approval_without_approver_is_no_approval if {
	doc := json.remove(approved_bash_input, ["approval/approved_by"])
	d := authz.decision with input as doc
	d.outcome == "ask"
}

test_approval_granted_as_a_string_is_no_approval if {
	doc := object.union(approved_bash_input, {"approval": {"granted": "true"}})
	d := authz.decision with input as doc
	d.outcome == "ask"
}

test_missing_approval_is_no_approval if {
	d := authz.decision with input as json.remove(approved_bash_input, ["approval"])
	d.outcome == "ask"
}

# --- Network ---------------------------------------------------------------------------------

test_network_is_off_by_default if {
	d := authz.decision with input as bash_input
	d.sandbox.network == "none"
}

test_shipped_ci_builder_gets_the_bridge_network if {
	d := authz.decision with input as as_principal(bash_input, "ci-builder")
	d.outcome == "allow"
	d.sandbox.network == "bridge"
}

test_principal_granted_another_network_mode_stays_offline if {
	principals := {"tinkerer": {"network": "host"}}
	d := authz.decision with input as as_principal(bash_input, "tinkerer")
		with data.tooljail.principals as principals
	d.sandbox.network == "none"
}

test_the_repository_is_read_only_unless_the_principal_is_granted_git_writes if {
	authz.decision.sandbox.git == "read_only" with input as bash_input
	writable := authz.decision with input as as_principal(bash_input, "committer")
		with data.tooljail.principals as {"committer": {"git": "writable"}}
	writable.sandbox.git == "writable"
	other := authz.decision with input as as_principal(bash_input, "committer")
		with data.tooljail.principals as {"committer": {"git": "yes"}}
	other.sandbox.git == "read_only"
}

test_readonly_bot_has_no_network if {
	d := authz.decision with input as as_principal(read_input, "readonly-bot")
	d.sandbox.network == "none"
}

# --- Audit masking -----------------------------------------------------------------------------

test_mask_names_the_content_and_edit_fields if {
	authz.mask == {"content", "old_string", "new_string", "edits", "new_source"}
}

test_mask_does_not_hide_commands_or_paths if {
	every field in ["command", "file_path", "path", "pattern"] {
		not field in authz.mask
	}
}

# --- visible_tools ---------------------------------------------------------------------------

test_every_tool_is_visible_to_an_ordinary_principal if {
	authz.visible_tools == {"Read", "Grep", "Write", "Bash"} with input as list_tools_input
}

test_plan_mode_offers_only_read_only_tools if {
	plan := object.union(list_tools_input, {"session": {"mode": "plan"}})
	authz.visible_tools == {"Read", "Grep"} with input as plan
}

test_readonly_bot_sees_only_read_only_tools if {
	doc := as_principal(list_tools_input, "readonly-bot")
	authz.visible_tools == {"Read", "Grep"} with input as doc
}

test_read_only_only_hides_a_writer_missing_from_hidden_tools if {
	extra := object.union(list_tools_input.tools[2], {"name": "NotebookEdit"})
	doc := object.union(as_principal(list_tools_input, "readonly-bot"), {"tools": [extra]})
	count(authz.visible_tools) == 0 with input as doc
}

test_hidden_tools_hide_a_read_only_tool if {
	principals := {"auditor": {"hidden_tools": ["Grep"]}}
	visible := authz.visible_tools with input as as_principal(list_tools_input, "auditor")
		with data.tooljail.principals as principals
	visible == {"Read", "Write", "Bash"}
}

test_no_tools_means_nothing_visible if {
	count(authz.visible_tools) == 0 with input as object.union(list_tools_input, {"tools": []})
}

# --- Kept outputs (results over their budget, saved whole for Read) -------------------------

kept_folder := "/var/lib/tooljail/outputs/ses_1"

kept_read_input := object.union(read_input, {
	"input": {"file_path": "/var/lib/tooljail/outputs/ses_1/3-toolu_a.txt"},
	"paths": [{"path": "/var/lib/tooljail/outputs/ses_1/3-toolu_a.txt", "access": "read", "inside_workspace": false, "kept_output": true}],
	"session": {"id": "ses_1", "workspace": "/srv/ws", "mode": "default", "grants": [], "kept_outputs": "/var/lib/tooljail/outputs/ses_1"},
})

test_read_of_a_kept_output_of_the_session_is_allowed if {
	authz.decision.outcome == "allow" with input as kept_read_input
}

test_a_kept_output_is_for_the_builtin_read_only if {
	grep := object.union(kept_read_input, {"tool": {"name": "Grep"}})
	authz.decision.outcome == "deny" with input as grep
	posing := object.union(kept_read_input, {"tool": {"origin": {"kind": "mcp", "server": "x", "trusted": true}}})
	authz.decision.outcome == "deny" with input as posing
}

test_a_kept_output_outside_the_sessions_folder_is_refused if {
	other := with_paths(kept_read_input, [{"path": "/var/lib/tooljail/outputs/ses_2/1-x.txt", "access": "read", "inside_workspace": false, "kept_output": true}])
	authz.decision.outcome == "deny" with input as other
	folder := with_paths(kept_read_input, [{"path": kept_folder, "access": "read", "inside_workspace": false, "kept_output": true}])
	authz.decision.outcome == "deny" with input as folder
	dotdot := with_paths(kept_read_input, [{"path": "/var/lib/tooljail/outputs/ses_1/../ses_2/1-x.txt", "access": "read", "inside_workspace": false, "kept_output": true}])
	authz.decision.outcome == "deny" with input as dotdot
}

test_a_kept_output_needs_the_daemons_flag_and_a_folder if {
	unflagged := with_paths(kept_read_input, [{"path": "/var/lib/tooljail/outputs/ses_1/3-toolu_a.txt", "access": "read", "inside_workspace": false}])
	authz.decision.outcome == "deny" with input as unflagged
	no_folder := object.union(kept_read_input, {"session": {"kept_outputs": ""}})
	authz.decision.outcome == "deny" with input as no_folder
	written := with_paths(kept_read_input, [{"path": "/var/lib/tooljail/outputs/ses_1/3-toolu_a.txt", "access": "write", "inside_workspace": false, "kept_output": true}])
	authz.decision.outcome == "deny" with input as written
}

test_a_principal_may_have_its_own_turn_budget if {
	authz.decision.turn_budget_chars == 200000 with input as read_input
	authz.decision.turn_budget_chars == 60000 with input as read_input
		with data.tooljail.principals.local as {"turn_budget_chars": 60000}
	authz.decision.turn_budget_chars == 200000 with input as read_input
		with data.tooljail.principals.local as {"turn_budget_chars": 10}
}

# Attacker round 99: every principal's default session works in one shared folder without a
# disk budget; a tenant filled the host's disk there and deleted another tenant's files.
test_a_principal_kept_out_of_the_default_session_writes_only_in_sessions_of_its_own if {
	principals := {"tenant": {"default_session": "read_only"}}
	in_default := object.union(write_input, {"session": {"default": true}})
	d := authz.decision with input as as_principal(in_default, "tenant")
		with data.tooljail.principals as principals
	d.outcome == "deny"
	d.reasons == [concat(" ", [
		"Write can change files or run commands, and principal tenant may do that only in a",
		"session of its own: the default session's folder is shared with other principals.",
		"Open one (OpenSession) and send the call with its session_id.",
	])]
	own := object.union(as_principal(write_input, "tenant"), {"session": {"id": "ses_1"}})
	authz.decision.outcome == "allow" with input as own with data.tooljail.principals as principals
	reading := object.union(read_input, {"session": {"default": true}})
	authz.decision.outcome == "allow" with input as as_principal(reading, "tenant")
		with data.tooljail.principals as principals
	authz.decision.outcome == "allow" with input as in_default with data.tooljail.principals as principals
}

# A tenant's default session in a folder of its own (workspaces.tenant_defaults = "own") shares
# nothing and has a disk budget: "read_only" keeps it out of the shared folder only.
test_a_default_session_in_a_folder_of_its_own_is_a_session_of_its_own if {
	principals := {"tenant": {"default_session": "read_only"}}
	own_default := object.union(write_input, {"session": {"default": true, "own_folder": true}})
	authz.decision.outcome == "allow" with input as as_principal(own_default, "tenant")
		with data.tooljail.principals as principals
	not_own := object.union(write_input, {"session": {"default": true, "own_folder": false}})
	authz.decision.outcome == "deny" with input as as_principal(not_own, "tenant")
		with data.tooljail.principals as principals
}
