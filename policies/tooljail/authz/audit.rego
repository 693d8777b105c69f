# Audit log masking.
#
# Names of tool input fields whose values the audit log must not record in clear (file
# contents and edit texts can hold secrets and are large). The daemon replaces the value of
# every field with one of these names, at any depth of the tool input, before logging it.
package tooljail.authz

# METADATA
# title: Masked input fields
# description: Field names of input.input whose values the audit log masks, at any depth.
# entrypoint: true
mask contains field if some field in masked_fields

# Write's content, Edit's texts, MultiEdit's edits (which hold old_string and new_string), and
# NotebookEdit's cell source (attacker round 144: it reached the audit in clear).
masked_fields := {"content", "old_string", "new_string", "edits", "new_source"}

# METADATA
# title: Secret patterns
# description: Regular expressions for secrets inside any text of the tool input (a token in a
#   Bash command, a password in a URL); the audit log hides a match's `secret` group, or the
#   whole match when it has none. The daemon refuses a policy whose patterns it cannot compile.
# entrypoint: true
mask_patterns contains pattern if some pattern in secret_patterns

# Each pattern must take time linear in the text (the daemon runs them on hostile input): no
# nested or adjacent unbounded repeats that can match the same characters, an anchor (a literal,
# a word start) before any repeat, and values that stop at shell syntax, so that a masked value
# never hides the rest of a command from the audit: a quoted value holding a blank, shell
# syntax, an expansion (`$`, a backquote) or an escape is not masked at all. Attacker round 141:
# the command in MY_TOKEN="$(...)" ran unaudited; round 144: the closing quote of one word and
# the opening quote of a later one looked like one quoted value (`echo 'A_TOKEN='; id; echo ''`),
# which a pattern cannot tell from a quoted secret with blanks: those are shown.
secret_patterns := {
	# NAME=value where the name says it holds a secret (GITHUB_TOKEN=..., DB_PASSWORD="...").
	`(?i)\b(?=[A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY))[A-Z0-9_]+=(?P<secret>"[^\s"'\x60;&|<>()$\\]*"|'[^\s'"\x60;&|<>()$\\]*'|[^\s'"\x60;&|<>()$\\]+)`,
	# HTTP authorization headers in curl/wget/httpie commands.
	`(?i)authorization:\s*(?:bearer|basic|token)\s+(?P<secret>[^\s'"\x60;&|<>()$\\]+)`,
	# API key headers.
	`(?i)\b(?:x-api-key|api-key|x-auth-token|private-token)\s*:\s*(?P<secret>[^\s'"\x60;&|<>()$\\]+)`,
	# Options that take a secret: --token X, --password=X, --password 'X'.
	`(?i)--(?:token|password|passwd|api-key|apikey|secret|client-secret)(?:=|\s+)(?P<secret>"[^\s"'\x60;&|<>()$\\]*"|'[^\s'"\x60;&|<>()$\\]*'|[^\s'"\x60;&|<>()$\\]+)`,
	# curl -u user:password.
	`(?<!\S)-u\s*[^\s:'"]+:(?P<secret>[^\s'"\x60;&|<>()$\\]+)`,
	# user:password@ in URLs.
	`://[^/\s:@]+:(?P<secret>[^@\s/'"\x60;&|<>()$\\]+)@`,
	# Well-known token shapes: GitHub, OpenAI/Anthropic-style keys, AWS access key ids, Slack.
	`\b(?P<secret>(?:ghp|gho|ghs|ghu|ghr|github_pat)_[A-Za-z0-9_]{20,})`,
	`\b(?P<secret>sk-[A-Za-z0-9_-]{20,})`,
	`\b(?P<secret>AKIA[0-9A-Z]{16})\b`,
	`\b(?P<secret>xox[abprs]-[A-Za-z0-9-]{10,})`,
}
