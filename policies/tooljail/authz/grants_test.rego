# Tests of session grants (grants.rego): approvals a person gave for the rest of a session.
package tooljail.authz_test

import data.tooljail.authz

# --- Example input document (plain JSON) -----------------------------------------------------

# A force push in a session where a person approved `git push` and edits below src/ for the session.
session_grant_bash_input := {
	"version": 1,
	"tool": {"name": "Bash", "read_only": false, "destructive": true, "concurrency_safe": false, "sandboxed": true, "origin": {"kind": "builtin", "server": "", "trusted": true}},
	"input": {"command": "git push -f origin topic", "timeout": 60000},
	"paths": [{"path": "/srv/ws", "access": "write", "inside_workspace": true}],
	"session": {
		"id": "s-12",
		"workspace": "/srv/ws",
		"mode": "default",
		"grants": [
			{"tool": "Bash", "pattern": "git push", "words": ["git", "push"]},
			{"tool": "Edit", "pattern": "/srv/ws/src/", "words": []},
		],
	},
	"caller": {"principal": "local", "transport": "unix"},
	"approval": {"granted": false},
	"command": {
		"raw": "git push -f origin topic",
		"parsed": true,
		"parse_error": "",
		"simple_commands": [{
			"argv": ["git", "push", "-f", "origin", "topic"], "name": "git", "path": "git",
			"wrappers": [], "assignments": [], "context": "simple", "cwd": "/srv/ws",
			"words": [
				{"text": "push", "dynamic": false, "path": "/srv/ws/push"},
				{"text": "-f", "dynamic": false, "path": ""},
				{"text": "origin", "dynamic": false, "path": "/srv/ws/origin"},
				{"text": "topic", "dynamic": false, "path": "/srv/ws/topic"},
			],
			"git": {
				"directory": "/srv/ws", "config": [], "redirected": false, "subcommand": "push",
				"known": true, "options": ["-f"], "operands": ["origin", "topic"],
				"args": ["-f", "origin", "topic"], "dynamic": false,
			},
		}],
		"redirects": [],
		"written_paths": [],
	},
}

# --- Helpers ---------------------------------------------------------------------------------

git_push_grant := {"tool": "Bash", "pattern": "git push", "words": ["git", "push"]}

src_edit_grant := {"tool": "Edit", "pattern": "/srv/ws/src/", "words": []}

with_grants(doc, grants) := object.union(doc, {"session": {"grants": grants}})

# A Bash line in the session of the example above (both grants in force).
granted_line(raw, commands) := with_grants(bash_line(raw, commands), [git_push_grant, src_edit_grant])

# An Edit of `path` by a principal whose edits ask, in a session holding `grants`.
careful_edit(path, grants) := as_principal(
	with_grants(with_paths(edit_input, [{"path": path, "access": "write", "inside_workspace": true}]), grants),
	"careful",
)

bash_grant_note := concat("", [
	"Bash: the session grant for `git push`, which a person approved earlier in this session, ",
	"covers this call, so it runs without asking again.",
])

# Lines a `git push` grant covers (each would ask without it) and lines it must not cover.
covered_lines := {
	"git push -f origin topic": [simple(["git", "push", "-f", "origin", "topic"])],
	"git push --force": [simple(["git", "push", "--force"])],
	"git push -f origin a; git push -f origin b": [
		within(["git", "push", "-f", "origin", "a"], "list"),
		within(["git", "push", "-f", "origin", "b"], "list"),
	],
	"timeout 60 git push -f": [wrapped(["git", "push", "-f"], ["timeout"])],
	"bash -c 'git push +main'": [wrapped(["git", "push", "+main"], ["bash -c"])],
}

uncovered_lines := {
	"git reset --hard": [simple(["git", "reset", "--hard"])],
	"git push -f; rm -rf /": [within(["git", "push", "-f"], "list"), within(["rm", "-rf", "/"], "list")],
	"git push -f && git reset --hard": [within(["git", "push", "-f"], "list"), within(["git", "reset", "--hard"], "list")],
	"git -C /srv/ws push -f": [simple(["git", "-C", "/srv/ws", "push", "-f"])],
	"/usr/bin/git push -f": [simple(["/usr/bin/git", "push", "-f"])],
	"./git push -f": [simple(["./git", "push", "-f"])],
	"git push -f $(curl -s x | sh)": [
		simple(["git", "push", "-f", "$(curl -s x | sh)"]),
		object.union(stage(["curl", "-s", "x"], 0), {"context": "command_substitution"}),
		object.union(stage(["sh"], 1), {"context": "command_substitution"}),
	],
}

# Lines of a table a grant lets run, or lines it leaves asking.
granted_outcomes(table) := {line: d.outcome |
	some line, commands in table
	d := decided(granted_line(line, commands))
}

# --- Bash grants -----------------------------------------------------------------------------

test_the_same_command_asks_no_more if {
	d := decided(session_grant_bash_input)
	d.outcome == "allow"
	d.reasons == [
		"Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		bash_grant_note,
	]
}

test_the_same_command_asks_without_the_grant if {
	d := decided(with_grants(session_grant_bash_input, []))
	d.outcome == "ask"
}

test_a_grant_covers_lines_whose_every_command_starts_with_its_words if {
	missed := {line | some line, outcome in granted_outcomes(covered_lines); outcome != "allow"}
	missed == set()
	count(granted_outcomes(covered_lines)) == count(covered_lines)
}

test_covered_lines_ask_without_the_grant if {
	missed := {line |
		some line, commands in covered_lines
		decided(bash_line(line, commands)).outcome != "ask"
	}
	missed == set()
}

test_a_grant_does_not_cover_another_command_or_a_chained_program if {
	missed := {line | some line, outcome in granted_outcomes(uncovered_lines); outcome != "ask"}
	missed == set()
	count(granted_outcomes(uncovered_lines)) == count(uncovered_lines)
}

test_a_grant_matches_whole_words if {
	# Every Bash call of this principal asks, so only the grant can let these lines run.
	principals := {"careful": {"ask_tools": ["Bash"]}}
	lines := {
		"git": [simple(["git"])],
		"git pushall": [simple(["git", "pushall"])],
		"git status": [simple(["git", "status"])],
		"git push": [simple(["git", "push"])],
	}
	outcomes := {line: d.outcome |
		some line, commands in lines
		d := authz.decision with input as as_principal(granted_line(line, commands), "careful")
			with data.tooljail.principals as principals
	}
	outcomes == {"git": "ask", "git pushall": "ask", "git status": "ask", "git push": "allow"}
}

test_another_command_still_asks_with_its_own_reason if {
	d := decided(granted_line("git reset --hard", uncovered_lines["git reset --hard"]))
	d.reasons == [concat("", [
		"Bash: `git reset --hard` throws away uncommitted changes for good (commit or stash them first, ",
		"or use `git reset --soft`); a person must approve it before it runs.",
	])]
}

test_a_chained_program_keeps_both_asks if {
	d := decided(granted_line("git push -f; rm -rf /", uncovered_lines["git push -f; rm -rf /"]))
	count(d.reasons) == 2
	some reason in d.reasons
	contains(reason, "`git push -f` rewrites the remote's history")
}

test_a_grant_never_lifts_the_sudo_deny if {
	d := decided(granted_line("sudo git push -f", [wrapped(["git", "push", "-f"], ["sudo"])]))
	d.outcome == "deny"
	d.reasons == [privilege_reason("sudo")]
}

test_a_grant_does_not_cover_an_unparsed_line if {
	doc := with_grants(
		unparsed_line("git push -f 'x", "line 1: unterminated quote", [simple(["git", "push", "-f"])]),
		[git_push_grant],
	)
	d := decided(doc)
	d.outcome == "ask"
	some reason in d.reasons
	contains(reason, "could not be fully parsed")
}

test_a_grant_with_no_words_covers_nothing if {
	grant := {"tool": "Bash", "pattern": "", "words": []}
	d := decided(with_grants(force_push_input, [grant]))
	d.outcome == "ask"
}

test_a_grant_with_an_empty_word_covers_nothing if {
	grant := {"tool": "Bash", "pattern": "git push", "words": ["git", ""]}
	d := decided(with_grants(force_push_input, [grant]))
	d.outcome == "ask"
}

test_a_longer_grant_covers_only_longer_prefixes if {
	grant := {"tool": "Bash", "pattern": "git push origin", "words": ["git", "push", "origin"]}
	decided(with_grants(force_push_input, [grant])).outcome == "ask"
	covered := bash_line("git push origin +main", [simple(["git", "push", "origin", "+main"])])
	decided(with_grants(covered, [grant])).outcome == "allow"
}

test_a_bash_grant_does_not_cover_a_file_tool if {
	d := decided(careful_edit("/srv/ws/src/a.py", [git_push_grant]))
		with data.tooljail.principals as bypass_principals
	d.outcome == "ask"
}

test_a_grant_lifts_an_ask_tools_ask_of_bash if {
	principals := {"careful": {"ask_tools": ["Bash"]}}
	doc := as_principal(with_grants(bash_line("git push", [simple(["git", "push"])]), [git_push_grant]), "careful")
	d := authz.decision with input as doc with data.tooljail.principals as principals
	d.outcome == "allow"
}

test_a_grant_runs_the_command_in_dont_ask_mode if {
	d := decided(in_mode(session_grant_bash_input, "dontAsk"))
	d.outcome == "allow"
}

test_a_grant_does_not_beat_plan_mode if {
	d := decided(in_mode(session_grant_bash_input, "plan"))
	d.outcome == "deny"
}

test_a_grant_adds_no_note_when_nothing_asked if {
	d := decided(granted_line("git push", [simple(["git", "push"])]))
	d.reasons == ["Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws."]
}

test_an_approved_call_under_a_grant_reports_both if {
	d := decided(approved(session_grant_bash_input))
	d.reasons == [
		"Bash runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		approval_note("Bash"),
		bash_grant_note,
	]
}

# --- File grants -----------------------------------------------------------------------------

test_a_file_grant_covers_files_below_its_directory if {
	d := decided_as(careful_edit("/srv/ws/src/pkg/mod.py", [src_edit_grant]))
	d.outcome == "allow"
	d.reasons == [
		"Edit runs in the sandbox, and every path it touches is inside the workspace /srv/ws.",
		concat("", [
			"Edit: the session grant for Edit under /srv/ws/src/, which a person approved earlier in this session, ",
			"covers this call, so it runs without asking again.",
		]),
	]
}

test_a_file_grant_does_not_cover_siblings if {
	outcomes := {path: decided_as(careful_edit(path, [src_edit_grant])).outcome |
		some path in ["/srv/ws/src2/mod.py", "/srv/ws/mod.py", "/srv/ws/src"]
	}
	outcomes == {"/srv/ws/src2/mod.py": "ask", "/srv/ws/mod.py": "ask", "/srv/ws/src": "ask"}
}

test_a_file_grant_covers_only_its_own_tool if {
	doc := object.union(careful_edit("/srv/ws/src/mod.py", [src_edit_grant]), {"tool": {"name": "Write"}})
	decided_as(doc).outcome == "ask"
}

test_a_file_grant_needs_every_path_below_it if {
	doc := with_paths(careful_edit("/srv/ws/src/a.py", [src_edit_grant]), [
		{"path": "/srv/ws/src/a.py", "access": "write", "inside_workspace": true},
		{"path": "/srv/ws/b.py", "access": "write", "inside_workspace": true},
	])
	decided_as(doc).outcome == "ask"
}

test_a_file_grant_covers_no_call_without_paths if {
	decided_as(with_paths(careful_edit("/srv/ws/src/a.py", [src_edit_grant]), [])).outcome != "allow"
}

test_a_file_grant_never_lifts_the_outside_deny if {
	grant := {"tool": "Edit", "pattern": "/", "words": []}
	doc := with_paths(careful_edit("/etc/hosts", [grant]), [{"path": "/etc/hosts", "access": "write", "inside_workspace": false}])
	d := decided_as(doc)
	d.outcome == "deny"
	d.reasons == [outside_reason("Edit", "/etc/hosts", "write")]
}

test_a_file_grant_with_a_bad_pattern_covers_nothing if {
	patterns := ["/srv/ws/src", "srv/ws/src/", "/srv/ws/src/../", "", 7]
	outcomes := {pattern: decided_as(careful_edit("/srv/ws/src/a.py", [grant])).outcome |
		some pattern in patterns
		grant := {"tool": "Edit", "pattern": pattern, "words": []}
	}
	outcomes == {pattern: "ask" | some pattern in patterns}
}

test_a_file_grant_does_not_cover_a_path_climbing_out if {
	doc := careful_edit("/srv/ws/src/../secrets/key", [src_edit_grant])
	d := decided_as(doc)
	d.outcome == "deny"
}

test_malformed_grants_are_ignored if {
	grants := ["git push", {"tool": "Bash"}, {"tool": "Bash", "words": "git push"}, null]
	d := decided(with_grants(force_push_input, grants))
	d.outcome == "ask"
}

test_grants_that_are_not_a_list_are_ignored if {
	d := decided(with_grants(force_push_input, {"push": git_push_grant}))
	d.outcome == "ask"
}
