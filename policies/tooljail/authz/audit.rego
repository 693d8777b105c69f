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

# Each pattern must take time linear in the text (the daemon runs them on hostile input, as
# ASCII: no lookalike letter in a name): no nested or adjacent unbounded repeats that can match
# the same characters, an anchor (a literal, a word start) before any repeat. A masked value is
# a plain token in a word of its own, so that it never hides what a command runs: token
# characters only (letters, digits, _~+=:@%-, a dot or a slash but not `..` or `//`), quoted or
# not, up to the end of the word; a value with anything else is shown whole. Attacker round 141: the command in
# MY_TOKEN="$(...)" ran unaudited; round 144: the closing quote of one word and the opening quote
# of a later one looked like one quoted value; round 145: braces made one value many words
# ({A_TOKEN=x,-o,-exec,id,{},+} under find), a name with the Kelvin sign was a program, and a
# name or a key's shape inside a path hid the program or the file.
secret_patterns := {
	# NAME=value at the start of a word, where the name says it holds a secret (GITHUB_TOKEN=...,
	# DB_PASSWORD="...").
	`(?i)(?<![^\s;&|("'=])(?=[A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY))[A-Z0-9_]+=(?P<secret>"(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))*"|'(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))*'|(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))+)(?![^\s;&|)<>"'])`,
	# HTTP authorization headers in curl/wget/httpie commands.
	`(?i)authorization:\s*(?:bearer|basic|token)\s+(?P<secret>(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))+)(?![^\s;&|)<>"'])`,
	# API key headers.
	`(?i)\b(?:x-api-key|api-key|x-auth-token|private-token)\s*:\s*(?P<secret>(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))+)(?![^\s;&|)<>"'])`,
	# Options that take a secret: --token X, --password=X, --password 'X'.
	`(?i)--(?:token|password|passwd|api-key|apikey|secret|client-secret)(?:=|\s+)(?P<secret>"(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))*"|'(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))*'|(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))+)(?![^\s;&|)<>"'])`,
	# curl -u user:password.
	`(?<!\S)-u\s*[^\s:'"]+:(?P<secret>(?:[A-Za-z0-9_~+=:@%-]|\.(?!\.)|/(?![./]))+)(?![^\s;&|)<>"'])`,
	# user:password@ in URLs.
	`://[^/\s:@]+:(?P<secret>(?:[A-Za-z0-9_~+=:%-]|\.(?!\.))+)@`,
	# Well-known token shapes, not inside a path or a longer word: GitHub, OpenAI/Anthropic-style
	# keys, AWS access key ids, Slack.
	`(?<![\w/.-])(?P<secret>(?:ghp|gho|ghs|ghu|ghr|github_pat)_[A-Za-z0-9_]{20,})`,
	`(?<![\w/.-])(?P<secret>sk-[A-Za-z0-9_-]{20,})`,
	`(?<![\w/.-])(?P<secret>AKIA[0-9A-Z]{16})\b`,
	`(?<![\w/.-])(?P<secret>xox[abprs]-[A-Za-z0-9-]{10,})`,
}
