# METADATA
# title: tooljail tool-call authorization
# description: |
#   Decides whether one tool call may run (allow, deny or ask), under which sandbox limits and
#   result budget, and which tools a caller may see in ListTools. The input documents are
#   described in policies/input.schema.json and policies/README.md.
#
#   Each rule adds a full-sentence reason to the deny, needs_approval or allow set; `decision`
#   turns the sets into one answer, where deny beats ask and ask beats allow. A person's approval
#   (input.approval) or a session grant silences needs_approval and never a deny; the session's
#   permission mode may lift the asks that remain or turn them into denies. New rules only add
#   to a set. The Bash command rules are in commands.rego, permission modes in modes.rego,
#   session grants in grants.rego, PreToolUse hook decisions in hooks.rego, open_session in
#   session.rego, mask in audit.rego, background commands in background.rego.
package tooljail.authz

# The input document version this policy understands (input.version).
supported_version := 1

# Ceiling for a Bash call's own timeout, in milliseconds (the tool's documented maximum).
max_timeout_ms := 600000

# METADATA
# title: Decision
# description: The one answer the daemon enforces for a tool call.
# entrypoint: true
decision := {
	"outcome": outcome,
	"reasons": reasons,
	"sandbox": sandbox,
	"result_budget_chars": result_budget_chars,
	"turn_budget_chars": turn_budget_chars,
	"cache_ttl_s": cache_ttl_s,
	"background": background,
}

# METADATA
# title: Visible tools
# description: Names of the tools in input.tools this caller may see in ListTools.
# entrypoint: true
visible_tools contains tool.name if {
	some tool in input.tools
	not tool_hidden(principal_config, tool)
}

# --- Combining the rule sets ---------------------------------------------------------------

# Fail closed: when no rule speaks, the call is denied.
default outcome := "deny"

outcome := "deny" if {
	count(deny) > 0
} else := "ask" if {
	count(ask) > 0
} else := "allow" if {
	count(allow) > 0
}

# Only the reasons of the winning set are reported, sorted so answers are reproducible. An allow
# also reports allow_notes: what let its asks pass without asking a person (an approval, a
# session grant, the mode); notes never allow a call on their own.
default reasons := ["No policy rule allows this tool call, so it was refused; use another tool or ask the operator."]

reasons := sort(deny) if {
	count(deny) > 0
} else := sort(ask) if {
	count(ask) > 0
} else := sort(allow | allow_notes) if {
	count(allow) > 0
}

# The limits of the disposable container; the daemon clamps them to its own ceilings.
sandbox := {
	"timeout_ms": timeout_ms,
	"memory_mb": 512,
	"cpus": 1,
	"pids": 256,
	"network": network,
	"git": git,
}

# Network off, unless data.json grants a principal the egress network (each connection then
# decided by egress.rego) or the bridge network (everything the host reaches: the unsafe one).
default network := "none"

network := "bridge" if principal_config.network == "bridge"

network := "egress" if principal_config.network == "egress"

# The workspace's .git is mounted read-only in the container: git can read the repository there
# but no command, script or build can plant a hook or configuration the host's git would run.
# A principal whose data.json says "git": "writable" gets it writable (committing in the sandbox);
# the command rules in effects.rego are then all that guard it.
default git := "read_only"

git := "writable" if principal_config.git == "writable"

default timeout_ms := 120000

timeout_ms := min([floor(input.input.timeout), max_timeout_ms]) if {
	input.tool.name == "Bash"
	is_number(input.input.timeout)
	input.input.timeout >= 1
}

# Characters of tool_result text the model may receive; the daemon also applies the tool's own cap.
result_budget_chars := 50000

# Characters all the results of one turn (an ExecuteBatch) may hold together; past it the largest
# are kept whole for Read and answered with a preview. A principal's data.json may set its own.
default turn_budget_chars := 200000

turn_budget_chars := principal_config.turn_budget_chars if {
	is_number(principal_config.turn_budget_chars)
	principal_config.turn_budget_chars >= 1000
}

# How long the daemon may reuse this decision for an identical input document (same tool, input,
# paths, session, mode, grants, caller, hook results and approval). Every rule here depends on the
# input and data.json only, never on the clock, so reuse is safe; it is limited to read-only calls
# so that every call that can change something is decided by OPA itself.
# The daemon drops reused decisions when the policy is reloaded.
default cache_ttl_s := 0

cache_ttl_s := 30 if input.tool.read_only == true

# --- Deny rules ------------------------------------------------------------------------------

deny contains concat(" ", [
	sprintf("The daemon sent policy input version %v, but this policy understands version %d only;", [
		object.get(input, "version", "(none)"),
		supported_version,
	]),
	"update the daemon or the policy so that they match.",
]) if {
	not input.version == supported_version
}

# One reason per path outside the workspace, naming the path, the access and the workspace.
deny contains concat(" ", [
	sprintf("%s: %v is outside the workspace %v, so %v access is refused;", [
		tool_name,
		object.get(touched, "path", "(no path)"),
		workspace,
		object.get(touched, "access", "any"),
	]),
	"only paths inside the workspace may be touched.",
]) if {
	some touched in input.paths
	not path_allowed(touched)
}

# A tool declared read-only that would write means the daemon's input is inconsistent.
deny contains concat(" ", [
	sprintf("%s is declared read-only but would write to %v;", [tool_name, touched.path]),
	"the call is refused because a read-only tool may not write.",
]) if {
	read_only_tool
	some touched in input.paths
	touched.access == "write"
}

# Tools that change files or run commands only ever run in the sandbox.
deny contains concat(" ", [
	sprintf("%s can change files or run commands but is not marked as sandboxed;", [tool_name]),
	"this policy runs such tools only in the sandbox, so the call is refused.",
]) if {
	not read_only_tool
	not input.tool.sandboxed == true
	not mcp_tool
}

deny contains concat(" ", [
	sprintf("%s can change files or run commands, and principal %s may only use read-only tools;", [
		tool_name,
		principal_name,
	]),
	"use a read-only tool such as Read, Glob, Grep or LS instead.",
]) if {
	principal_config.read_only_only == true
	not read_only_tool
}

# A default session in the configured workspace works in a folder other principals' default
# sessions may share, without a disk budget: a principal set to "read_only" there changes files
# only in sessions of its own. A tenant's default session in a folder of its own is one.
deny contains concat(" ", [
	sprintf("%s can change files or run commands, and principal %s may do that only in a", [
		tool_name,
		principal_name,
	]),
	"session of its own: the default session's folder is shared with other principals.",
	"Open one (OpenSession) and send the call with its session_id.",
]) if {
	principal_config.default_session == "read_only"
	input.session.default == true
	not input.session.own_folder == true
	not read_only_tool
}

deny contains sprintf(
	"%s is not available to principal %s; use one of the tools that ListTools shows.",
	[tool_name, principal_name],
) if {
	tool_listed_hidden(principal_config, input.tool.name)
}

# --- Ask rules -------------------------------------------------------------------------------

# Rules add to needs_approval (hooks.rego adds a hook's ask to hook_needs_approval). An ask
# stands until something lifts it. Every ask is lifted by a person's approval of this call or a
# session grant that covers it (the daemon turns a second ask for an approved call into a deny,
# so every ask must be liftable); the policy's own asks are also lifted by the session's mode
# (acceptEdits, bypassPermissions), a hook's ask is not, because the operator who configured the
# hook asked for a person. In dontAsk mode the asks that stand become denies (modes.rego).
#
# Other modules extend asks_lifted_by (grants.rego) and policy_asks_lifted_by (modes.rego)
# instead of this module referring to their rules: the daemon loads modules one at a time, so
# references between modules must not go in a circle.
pending_approval contains reason if {
	some reason in needs_approval
	count(policy_asks_lifted_by) == 0
}

pending_approval contains reason if {
	some reason in hook_needs_approval
	count(hook_asks_lifted_by) == 0
}

# A hook's ask is lifted as any ask is, except by another hook: a PermissionRequest hook's
# approval does not answer a PreToolUse hook that asked for a person.
hook_asks_lifted_by contains note if {
	some note in asks_lifted_by
	not note == hook_approval_note
}

hook_approval_note := sprintf(
	"%s: %s approved this call (approval %s), so it runs without asking again.",
	[tool_name, input.approval.approved_by, input.approval.token_id],
) if {
	approval_granted
	hook_approval
}

ask contains reason if {
	not session_mode == "dontAsk"
	some reason in pending_approval
}

# Why every ask of this call may pass without a person, one sentence each.
asks_lifted_by contains sprintf(
	"%s: %s approved this call (approval %s), so it runs without asking again.",
	[tool_name, input.approval.approved_by, input.approval.token_id],
) if {
	approval_granted
}

# A caller sending its own token back, with no approver having answered, approved its own
# call. That counts for the Unix socket's caller (a person at the machine, with the CLI) and
# for principals data.json lets (self_approve), not for a remote bot.
deny contains concat(" ", [
	sprintf("%s: principal %s sent its approval token back without an approver having approved the call,", [
		tool_name,
		principal_name,
	]),
	"and this policy does not let it approve its own calls;",
	sprintf("an approver must approve it first (tooljail approvals approve %s), then resend the call with the token.", [
		input.approval.token_id,
	]),
]) if {
	well_formed_approval
	input.approval.self_approved == true
	not self_approval_allowed
	count(needs_approval) + count(hook_needs_approval) > 0
}

self_approval_allowed if input.caller.transport == "unix"

self_approval_allowed if principal_config.self_approve == true

# Why the policy's own asks may pass: all of the above, and the mode.
policy_asks_lifted_by contains note if some note in asks_lifted_by

# An allow reports what let its asks pass, only when there was something to ask.
allow_notes contains note if {
	count(needs_approval) > 0
	some note in policy_asks_lifted_by
}

allow_notes contains note if {
	count(hook_needs_approval) > 0
	some note in hook_asks_lifted_by
}

needs_approval contains sprintf(
	"%s needs a person's approval for principal %s; the call waits until someone approves it.",
	[tool_name, principal_name],
) if {
	input.tool.name in object.get(principal_config, "ask_tools", [])
}

# --- Allow rules -----------------------------------------------------------------------------

allow contains sprintf(
	"%s only reads, and every path it touches is inside the workspace %s.",
	[tool_name, workspace],
) if {
	read_only_tool
	all_paths_inside
}

allow contains sprintf(
	"%s runs in the sandbox, and every path it touches is inside the workspace %s.",
	[tool_name, workspace],
) if {
	not read_only_tool
	input.tool.sandboxed == true
	all_paths_inside
}

# --- Helpers ---------------------------------------------------------------------------------

default tool_name := "The tool"

tool_name := input.tool.name if is_string(input.tool.name)

default workspace := "(no workspace)"

workspace := input.session.workspace if is_string(input.session.workspace)

default principal_name := "(unknown)"

principal_name := input.caller.principal if is_string(input.caller.principal)

# The session's permission mode; modes.rego denies a missing or unknown one, so it never runs
# as "default" by accident.
default session_mode := "(none)"

session_mode := input.session.mode if is_string(input.session.mode)

# Per-principal settings from data.json; unknown principals get the shipped rules unchanged.
default principal_config := {}

principal_config := data.tooljail.principals[principal_name]

# The daemon checked the token (signature, binding to this exact call, expiry, replay) before
# saying granted; anything but a well-formed grant counts as no approval.
approval_granted if {
	well_formed_approval
	not input.approval.self_approved == true
	not hook_approval_refused
}

# A PermissionRequest hook that answered an ask in a person's stead is recorded as the approver
# "hook:<name>". Its approval counts unless the principal's data.json sets hook_approvals to false.
hook_approval if startswith(input.approval.approved_by, "hook:")

hook_approval_refused if {
	hook_approval
	principal_config.hook_approvals == false
}

deny contains concat(" ", [
	sprintf("%s: %s approved this call, and principal %s does not accept approvals by hooks", [
		tool_name,
		input.approval.approved_by,
		principal_name,
	]),
	"(hook_approvals is false in data.json); a person must approve it.",
]) if {
	well_formed_approval
	hook_approval_refused
	count(needs_approval) + count(hook_needs_approval) > 0
}

approval_granted if {
	well_formed_approval
	input.approval.self_approved == true
	self_approval_allowed
}

well_formed_approval if {
	input.approval.granted == true
	is_string(input.approval.token_id)
	input.approval.token_id != ""
	is_string(input.approval.approved_by)
	input.approval.approved_by != ""
}

# A tool counts as read-only only when it says so; a missing trait means risky.
read_only_tool if input.tool.read_only == true

# Also false without a usable workspace, so a call listing no paths is not allowed by accident.
all_paths_inside if {
	absolute(workspace)
	is_array(input.paths)
	every touched in input.paths {
		path_allowed(touched)
	}
}

path_allowed(touched) if path_inside(touched, workspace)

# Read of one of the session's kept outputs (a result over its budget, saved whole by the
# daemon): only the built-in Read, only below the session's own folder of them.
path_allowed(touched) if {
	touched.kept_output == true
	touched.access == "read"
	input.tool.name == "Read"
	input.tool.origin.kind == "builtin"
	kept := input.session.kept_outputs
	touched.path != kept
	path_within(touched.path, kept)
}

# Inside only when the daemon says so and the path lies under the workspace (defence in depth).
path_inside(touched, root) if {
	touched.inside_workspace == true
	path_within(touched.path, root)
}

path_within(path, root) if {
	absolute(root)
	path == root
}

path_within(path, root) if {
	absolute(root)
	is_string(path)
	not regex.match(`(^|/)\.\.(/|$)`, path)
	startswith(path, concat("", [trim_right(root, "/"), "/"]))
}

absolute(path) if {
	is_string(path)
	startswith(path, "/")
}

tool_listed_hidden(config, name) if name in object.get(config, "hidden_tools", [])

tool_hidden(config, tool) if tool_listed_hidden(config, tool.name)

tool_hidden(config, tool) if {
	config.read_only_only == true
	not tool.read_only == true
}

# In plan mode only read-only tools run (modes.rego): the others are not offered either.
tool_hidden(_, tool) if {
	input.session.mode == "plan"
	not tool.read_only == true
}

tool_hidden(config, tool) if {
	tool.origin.kind == "mcp"
	not mcp_server_enabled(config, tool.origin.server)
}
