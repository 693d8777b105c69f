# Bash rules on what a command does, from the parser's facts (input.command.simple_commands[i]:
# words with `dynamic` and `path`, `cwd`, and for git `git`). This module uses the helpers of
# commands.rego and never the other way round: the daemon loads modules one at a time, so
# references between modules must not go in a circle.
#
# A target is risky when it is only known at run time, names the workspace itself, the
# directory the command runs in, a folder holding the workspace, or a path outside it; or when
# where it points cannot be known (a relative path after an uncertain `cd`). Inputs without the
# facts (an older daemon) make every target unknown, so the rules ask rather than guess.
package tooljail.authz

# --- Ask rules --------------------------------------------------------------------------------

# Effects, not spellings: the parser says for every word whether it is only known at run time
# and which absolute path it names from the directory the command runs in (input.command
# .simple_commands[i].words, .cwd, .git; the helpers are below). The rules ask when
# a recursive delete, a history rewrite, a remote deletion or a permission opening reaches a
# target that is dynamic, the workspace, the command's own directory, or outside the workspace.

needs_approval contains concat(" ", [
	sprintf("%s: `%s` recursively deletes %s;", [tool_name, shown(cmd), what]),
	"a person must approve it before it runs. To delete less, name the exact files or subdirectories inside the workspace.",
]) if {
	some cmd in simple_commands
	some target in recursive_delete_targets(cmd)
	what := risky_target(cmd, target)
}

needs_approval contains concat(" ", [
	sprintf("%s: `%s` %s;", [tool_name, shown(cmd), what]),
	"a person must approve it before it runs.",
]) if {
	some [i, what] in git_effect
	cmd := simple_commands[i]
}

needs_approval contains concat(" ", [
	sprintf("%s: `%s` lets every user write to %s;", [tool_name, shown(cmd), what]),
	"a person must approve it before it runs. Grant only the permissions needed, on the files that need them.",
]) if {
	some cmd in simple_commands
	basename(cmd.name) == "chmod"
	some mode in chmod_modes(cmd)
	opens_to_everyone(mode)
	what := chmod_reach(cmd)
}

# The same opening given as the mode of what a program makes (`install -d -m 0777 .` changes an
# existing folder's mode as chmod does; `mkdir -m 777 /tmp/x`): attacker round 183.
needs_approval contains concat(" ", [
	sprintf("%s: `%s` lets every user write to %s;", [tool_name, shown(cmd), what]),
	"a person must approve it before it runs. Grant only the permissions needed, on the files that need them.",
]) if {
	some cmd in simple_commands
	some mode in made_modes(cmd)
	made_opens_to_everyone(basename(cmd.name), mode)
	what := made_reach(cmd)
}

# A mask that lets every user write to what is made after it (`umask 0`, `umask o+w`) reaches
# whatever the rest of the command and the programs it runs make, which the policy cannot follow.
needs_approval contains concat(" ", [
	sprintf("%s: `%s` lets every user write to every file and folder the command makes after it;", [tool_name, shown(cmd)]),
	"a person must approve it before it runs. Keep others' write bit in the mask (`umask 022`, `umask 002`).",
]) if {
	some cmd in simple_commands
	basename(cmd.name) == "umask"
	some mask in operand_words(cmd)
	mask_opens_to_everyone(mask)
}

# A copy that keeps modes, or a move, that puts another folder's mode onto a risky folder
# (rounds 184 and 185).
needs_approval contains concat(" ", [
	sprintf("%s: `%s` puts another folder's mode onto %s, which may let every user write to it;", [tool_name, shown(cmd), what]),
	"a person must approve it before it runs. Copy without keeping modes (`cp -r`), or into a folder inside the workspace.",
]) if {
	some cmd in simple_commands
	basename(cmd.name) in {"cp", "rsync", "mv"}
	some what in mode_landings(cmd)
}

# Programs that start others with a umask of their choosing, among other things the policy
# does not read (`start-stop-daemon -k 0`: round 184).
needs_approval contains sprintf(
	"%s: `%s` runs under %s, whose options (a umask, a user, a root folder) the policy does not read; a person must approve it before it runs.",
	[tool_name, shown(cmd), wrapper],
) if {
	some cmd in simple_commands
	some wrapper in array.concat(cmd.wrappers, [basename(cmd.name)])
	wrapper in {"start-stop-daemon", "systemd-run"}
}

needs_approval contains concat(" ", [
	sprintf("%s: `%s` runs program text the policy cannot read (%s),", [tool_name, shown(cmd), why]),
	"so it cannot check what it does; a person must approve it before it runs,",
	"or run the commands directly so that the policy can read them.",
]) if {
	some [i, why] in opaque_code
	cmd := simple_commands[i]
}

needs_approval contains concat(" ", [
	sprintf("%s: the command hides code in an array subscript (%s),", [tool_name, concat(", ", input.command.hidden_code)]),
	"which bash runs when it evaluates the subscript (printf -v, test -v, declare, arithmetic);",
	"the policy cannot check it, so a person must approve it before it runs. Run the commands directly instead.",
]) if {
	is_array(input.command.hidden_code)
	count(input.command.hidden_code) > 0
}

# Files git runs programs from: its configuration and hooks, written by Write/Edit or a redirect.
needs_approval contains sprintf(
	"%s: it writes %s, from which git takes programs to run and where to push; a person must approve it before it runs.",
	[tool_name, path],
) if {
	some path in git_control_writes
}

git_control_writes contains touched.path if {
	some touched in input.paths
	touched.access == "write"
	git_control_path(touched.path)
}

git_control_writes contains target if {
	some target in object.get(input, ["command", "written_paths"], [])
	git_control_path(target)
}

# The redirect's target from the directory the command is in (the session's, or one a `cd` in the
# line moved to): `cd .git && echo x > hooks/pre-commit`.
git_control_writes contains path if {
	some written in object.get(input, ["command", "written_files"], [])
	some path in written.paths
	git_control_path(path)
}

# Where it writes cannot be told: a target whose name is, or may be, one of git's own files is
# taken to be one (`.//config`, `G/pre-push` through a link the line made, `.git/conf?g`, `$F`).
git_control_writes contains written.target if {
	some written in object.get(input, ["command", "written_files"], [])
	not written.known
	may_name_git_control(written)
}

# Inputs of a daemon that did not give the name's end: by the lexical form.
git_control_writes contains written.target if {
	some written in object.get(input, ["command", "written_files"], [])
	not written.known
	not "basename" in object.keys(written)
	regex.match(`(^|/)(config|hooks/[^/]+|info/attributes)$`, object.get(written, "normal", written.target))
}

# A program that is not a known reader, given one of git's files (`sed -i .. .git/config`,
# `tee .git/hooks/pre-commit`, `dd of=.git/config`, `.gi${Z}t/conf?g`): it may write it.
needs_approval contains sprintf(
	"%s: `%s` may write %s, one of git's own files from which it takes programs to run; a person must approve it before it runs.",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in simple_commands
	not object.get(cmd, "reads_only", false)
	not basename(cmd.name) in operands_never_written
	some word in object.get(cmd, "words", [])
	names_git_control(word)
}

# A program that writes the files its operands name, or a file an output option names, given
# a name only known when it runs whose end is not known either (`tee "$X"`, `dd of=$X`, `tee
# .gitattribute{s,}`: attacker round 87; `sort -o "$f"`, `uniq in .gitmodule$(echo s)`: round
# 88): it may be one of git's files, or every file of the workspace in turn. Other programs'
# such words are not taken for writes.
needs_approval contains sprintf(
	"%s: `%s` writes `%s`, a name only known when it runs, which may be one of git's own files; a person must approve it before it runs.",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in simple_commands
	some word in array.concat(written_operands(cmd), output_option_words(cmd))
	word.dynamic == true
	object.get(word, "basename", "") == ""
}

# The file an output option names (`-o F`, `-oF`, `--output=F`, `--out F`), for a program that
# is not a known reader (`grep -o` only prints the matches).
output_option_words(cmd) := [word |
	not basename(cmd.name) in never_write_outputs
	words := cmd_words(cmd)
	some j, option in words
	output_option(option.text)
	some word in array.slice(words, j, j + 2)
]

output_option(text) if regex.match(`^(-o|-out|--out|--output|--outfile|--output-file|--output-document)(=|$)`, text)

output_option(text) if regex.match(`^-o.`, text)

never_write_outputs := {"grep", "egrep", "fgrep", "rg", "ls", "ps", "ssh", "scp", "find", "bash", "sh", "dash", "zsh", "set", "shopt", "git"}

# Decompressing writes the operand's name less its suffix; with -c (or as zcat) it prints.
decompresses_in_place(cmd) if {
	basename(cmd.name) in {"gunzip", "unxz", "bunzip2", "unzstd", "unlzma", "unlz4", "uncompress"}
	not prints_only(options(command_args(cmd)))
}

decompresses_in_place(cmd) if {
	basename(cmd.name) in {"gzip", "xz", "bzip2", "zstd", "lzma", "lz4", "brotli"}
	opts := options(command_args(cmd))
	decompresses(opts)
	not prints_only(opts)
}

# gzip, bzip2, xz, lzma and compress replace each file they are given (`a` by `a.gz`, and back)
# unless told to keep it or print (attacker round 89: `gzip -r .` replaced every file).
replaces_in_place(cmd) if {
	basename(cmd.name) in {"gzip", "bzip2", "xz", "lzma", "compress", "gunzip", "bunzip2", "unxz", "unlzma", "uncompress"}
	opts := options(command_args(cmd))
	not prints_only(opts)
	not has_short_flag(opts, "k")
	not has_long_flag(opts, "--keep")
}

needs_approval contains sprintf(
	"%s: `%s` replaces every file under `%s` with a compressed or decompressed copy; a person must approve it before it runs. Name the files, or keep them (-k).",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in simple_commands
	replaces_in_place(cmd)
	opts := options(command_args(cmd))
	recursive_compression(opts)
	some word in operand_words(cmd)
}

# A decompressor writes the name less its suffix; one that replaces also removes the operand.
writes_beside_operands(cmd) if decompresses_in_place(cmd)

writes_beside_operands(cmd) if replaces_in_place(cmd)

recursive_compression(opts) if has_short_flag(opts, "r")

recursive_compression(opts) if has_long_flag(opts, "--recursive")

decompresses(opts) if has_short_flag(opts, "d")

decompresses(opts) if has_long_flag(opts, "--decompress")

decompresses(opts) if has_long_flag(opts, "--uncompress")

prints_only(opts) if has_short_flag(opts, "c")

prints_only(opts) if has_long_flag(opts, "--stdout")

prints_only(opts) if has_long_flag(opts, "--to-stdout")

written_operands(cmd) := operand_words(cmd) if {
	basename(cmd.name) in {"tee", "sponge", "truncate", "fallocate", "touch"}
} else := operand_words(cmd) if {
	writes_beside_operands(cmd)
} else := array.slice(operand_words(cmd), 1, count(operand_words(cmd))) if {
	# gawk's in-place extension, loaded by any spelling (`-i inplace`, `--include=inplace`,
	# `@include "inplace"` in the program: attacker round 90); the first operand is the program.
	basename(cmd.name) in {"awk", "gawk"}
	some arg in command_args(cmd)
	contains(arg, "inplace")
} else := array.slice(module_operands(cmd), 1, 2) if {
	# python3 -m json.tool IN OUT
	python_module(cmd) == "json.tool"
} else := array.slice(operand_words(cmd), 1, 2) if {
	# uniq IN OUT, xxd IN OUT
	basename(cmd.name) in {"uniq", "xxd"}
} else := [word |
	basename(cmd.name) == "dd"
	some word in object.get(cmd, "words", [])
	startswith(word.text, "of=")
] if {
	basename(cmd.name) == "dd"
} else := array.slice(operands, 1, count(operands)) if {
	# Editing in place: the files after the program text (its first operand; one given by -e
	# is then left out too, and judged by name like every word).
	basename(cmd.name) in {"sed", "perl", "ruby", "awk", "gawk"}
	some opt in options(command_args(cmd))
	regex.match(`^-i|^--in-place|^-[A-Za-z]*i`, opt)
	operands := operand_words(cmd)
} else := []

# git's own commands are judged by what they do (git_effect); these never write what they name.
operands_never_written := {"git", "echo", "printf", "test", "[", "cd", "pushd", "export", "unset", "true", "false", ":"}

names_git_control(word) if git_control_path(word.path)

names_git_control(word) if regex.match(`(^|[/=])\.git/(config|hooks/|info/attributes|rebase-merge|rebase-apply|sequencer)`, word.text)

# Code given on the command line (`python3 -c "...os.open('.gitmodules', ...)"`) that names
# one of git's files anywhere in its text, however it would write it (os.open, pwrite, mknod:
# attacker round 82).
names_git_control(word) if regex.match(`\.git(modules|attributes)\b|\.git/(config|hooks|info/attributes|rebase-merge|rebase-apply|sequencer)`, word.text)

# A word whose place cannot be told (dynamic, or after a `cd` that may fail or in a subshell:
# `cd .git/hooks; cp ../../h pre-commit`), by the name it gives.
names_git_control(word) if {
	word.path == ""
	object.get(word, "basename", "") != ""
	may_name_git_control(word)
}

# A name known whole is one of them, or its known end ends one of them.
may_name_git_control(fact) if {
	object.get(fact, "basename_whole", true) == true
	fact.basename in git_control_names
}

may_name_git_control(fact) if {
	fact.basename_whole == false
	some name in git_control_names
	endswith(name, fact.basename)
}

# git's files from which it takes programs: configuration, attributes, and the hooks it runs
# (githooks(5); a file of another name in hooks/ is never run).
git_control_names := {
	".git", "config", "config.worktree", "attributes", ".gitattributes", ".gitmodules", ".gitconfig", "gitconfig", "applypatch-msg", "pre-applypatch",
	"post-applypatch", "pre-commit", "pre-merge-commit", "prepare-commit-msg", "commit-msg",
	"post-commit", "pre-rebase", "post-checkout", "post-merge", "pre-push", "pre-receive", "update",
	"proc-receive", "post-receive", "post-update", "reference-transaction", "push-to-checkout",
	"pre-auto-gc", "post-rewrite", "sendemail-validate", "fsmonitor-watchman", "p4-changelist",
	"p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit", "post-index-change",
	"git-rebase-todo",
}

# A template directory puts its hooks and configuration into the new repository.
git_effect contains [i, "installs hooks and configuration from a template directory"] if {
	some i, git in git_lines
	git.subcommand in {"init", "clone"}
	has_long_flag(git.options, "--template")
}

# A repository shared with a mode that lets every user write (`git init --shared=0777`): git
# makes its folders so and keeps the mode in core.sharedRepository for every later write
# (attacker round 184; `git config core.sharedRepository` already asks). Git reads a value
# that is not one of its words as a number with strtol (leading blanks and a sign taken:
# `--shared=" 0777"`, round 185); any other value asks.
git_effect contains [i, sprintf("makes the repository writable by every user (%s)", [opt])] if {
	some i, git in git_lines
	git.subcommand == "init"
	some opt in git.options
	key := split(opt, "=")[0]
	count(key) >= 4
	startswith("--shared", key)
	contains(opt, "=")
	not shared_keeps_others_out(substring(opt, count(key) + 1, -1))
}

shared_keeps_others_out(value) if lower(value) in {
	"", "false", "no", "off", "true", "yes", "on", "0", "1", "umask", "group", "all", "world",
	"everybody",
}

shared_keeps_others_out(value) if {
	number := trim_left(trim_left(value, " \t\n\u000b\f\r"), "+")
	regex.match(`^[0-7]+$`, number)
	not octal_gives_others_write(number)
	not startswith(trim_left(value, " \t\n\u000b\f\r"), "++")
}

# Git's own programs run directly (`/usr/lib/git-core/git-init`, `git-push` found through PATH):
# the git rules read only `git SUBCOMMAND` (round 185).
needs_approval contains sprintf(
	"%s: `%s` runs one of git's own programs directly, which the policy does not read as git; a person must approve it before it runs. Run it as `git %s` instead.",
	[tool_name, shown(cmd), trim_prefix(basename(cmd.name), "git-")],
) if {
	some cmd in simple_commands
	startswith(basename(cmd.name), "git-")
}

# A git directory elsewhere (`--separate-git-dir=g`) holds hooks and configuration where a
# write to them is not recognised as one.
git_effect contains [i, "puts the repository's git directory, with its hooks and configuration, outside .git"] if {
	some i, git in git_lines
	git.subcommand in {"init", "clone"}
	has_long_flag(git.options, "--separate-git-dir")
}

# git's environment holds configuration (GIT_CONFIG_COUNT/KEY_n/VALUE_n, GIT_CONFIG_PARAMETERS:
# core.fsmonitor runs shell code), programs it runs (GIT_EDITOR, GIT_SSH_COMMAND, EDITOR), other
# repositories (GIT_DIR) and files it writes (GIT_TRACE=path), as `git -c` does: set in any way
# (an assignment, env, export, declare, read, printf -v), it asks but for a few that only name
# people and dates.
needs_approval contains sprintf(
	"%s: `%s` sets %s, from which git takes configuration, programs to run, another repository or a file to write; a person must approve it before it runs.",
	[tool_name, shown(cmd), name],
) if {
	some cmd in simple_commands
	some word in array.concat(object.get(cmd, "assignments", []), object.get(cmd, "argv", []))
	name := git_environment_name(word)
	not name in harmless_git_environment
}

git_environment_name(word) := name if {
	regex.match(`^(GIT_[A-Za-z0-9_]*|EDITOR|VISUAL)(\+?=|$)`, word)
	name := trim_suffix(split(word, "=")[0], "+")
}

# Named anywhere in the line (a bare `GIT_DIR=x;`, `for GIT_DIR in`, `declare -n r=GIT_DIR`): the
# words of commands do not show every way a variable is set.
needs_approval contains sprintf(
	"%s: the command names %s, from which git takes configuration, programs to run, another repository or a file to write; a person must approve it before it runs.",
	[tool_name, name],
) if {
	command_tool
	some found in regex.find_all_string_submatch_n(`(?:^|[^A-Za-z0-9_])(GIT_[A-Za-z0-9_]+|(?:EDITOR|VISUAL)\+?=)`, object.get(input, ["input", "command"], ""), 20)
	name := trim_suffix(trim_suffix(found[1], "="), "+")
	not name in harmless_git_environment
}

# Interpreters and the loader take code or options from their environment (attacker round 151:
# `PERL5OPT='-Mstrict;system(...)' perl -e 1`), and pagers, browsers and `sh -i` run what
# theirs names: asked about every time the line names one (attacker round 156: twenty harmless
# pagers hid the 21st). ENV, PAGER, MANPAGER and BROWSER are also plain words (`grep ENV
# Dockerfile`, `print('ENV')`): those only where they are set (`NAME=`, `NAME+=`, `${NAME:=..}`,
# `for NAME in`) or given as a variable's name (`read PAGER`, `printf -v PAGER`, `export
# PAGER`, `declare -n r=PAGER`; below, from the parser's words).
needs_approval contains code_environment_reason(name) if {
	command_tool
	some found in regex.find_all_string_submatch_n(code_environment_named, command_text, -1)
	name := found[1]
	code_environment_set(name, found[2])
	not no_pager(name, found[2])
}

needs_approval contains code_environment_reason(name) if {
	command_tool
	some found in regex.find_all_string_submatch_n(
		sprintf(`(?:^|[^A-Za-z0-9_])(?:for|select)\s+(%s)(?:[^A-Za-z0-9_]|$)`, [concat("|", code_environment_words)]),
		command_text,
		-1,
	)
	name := found[1]
}

# Named, for a name that is no plain word; set, for one that is. `rest` is what follows the name.
code_environment_set(name, rest) if {
	not name in code_environment_words
	not regex.match(`^[A-Za-z0-9_]`, rest)
}

code_environment_set(name, rest) if {
	name in code_environment_words
	regex.match(`^:?\+?=`, rest)
}

# A name spelt with quotes or backslashes inside it (`export MANPA""GER=...`, `P\AGER`): named
# (or set) more often once they are removed than where nothing touches it (round 156).
needs_approval contains code_environment_reason(name) if {
	command_tool
	some name in code_environment_names
	named_times(name, code_environment_dequoted) > named_times(name, code_environment_untouched)
}

code_environment_dequoted := regex.find_all_string_submatch_n(
	sprintf(`(?:^|[^A-Za-z0-9_])(%s)([A-Za-z0-9_]?)(:?\+?=)?`, [concat("|", code_environment_names)]),
	command_text_unquoted,
	-1,
)

code_environment_untouched := regex.find_all_string_submatch_n(
	sprintf(`(?:^|[^A-Za-z0-9_"'\\])(%s)([A-Za-z0-9_"'\\]?)(:?\+?=)?`, [concat("|", code_environment_names)]),
	command_text,
	-1,
)

named_times(name, found) := count([f |
	some f in found
	f[1] == name
	f[2] == ""
	code_environment_set(name, f[3])
])

# A name the parser decoded from a quoting no text search sees through (`$'\x50'AGER=id`), and
# the names commands are given (`read PAGER`, `declare -n r=MANPAGER`).
needs_approval contains code_environment_reason(name) if {
	some cmd in simple_commands
	some word in code_environment_cmd_words(cmd)
	not word in {"PAGER=", "PAGER=cat", "MANPAGER=", "MANPAGER=cat"}
	some found in regex.find_all_string_submatch_n(code_environment_named, word, -1)
	name := found[1]
	code_environment_in_word(cmd, name, found[2], word)
}

# A command's assignments and words; printf's `-vNAME` also as NAME (round 159: `set -a;
# printf -vPERL5OPT ...` exported it).
code_environment_cmd_words(cmd) := array.concat(words, [substring(w, 2, -1) |
	basename(cmd.name) == "printf"
	some w in words
	startswith(w, "-v")
]) if {
	words := [w |
		some w in array.concat(object.get(cmd, "assignments", []), object.get(cmd, "argv", []))
		is_string(w)
	]
}

code_environment_in_word(_, name, rest, _) if code_environment_set(name, rest)

code_environment_in_word(cmd, name, _, word) if {
	name in code_environment_words
	basename(cmd.name) in variable_builtins
	regex.match(sprintf(`^(?:[A-Za-z_][A-Za-z0-9_]*=)?%s$`, [name]), word)
}

# Builtins that take variables' names as words (and set, export or point at them).
variable_builtins := {
	"read", "printf", "export", "declare", "typeset", "local", "readonly", "unset", "getopts",
	"mapfile", "readarray", "let",
}

code_environment_reason(name) := sprintf(
	"%s: the command names %s, from which a program takes code, options or libraries to load; a person must approve it before it runs.",
	[tool_name, name],
)

code_environment_names := array.concat(
	[
		"PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME",
		"PYTHONINSPECT", "PYTHONBREAKPOINT", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
		"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH", "BASH_ENV", "LESSOPEN",
		"LESSCLOSE", "PYTHONUSERBASE", "TAR_OPTIONS",
	],
	code_environment_words,
)

# Also plain words; HOME and XDG_CONFIG_HOME name where git and others read configuration that
# runs programs (round 159: `HOME=$PWD/.. git status` ran a core.fsmonitor written just before),
# SHELL what flock, script and others run their strings with (round 161: gawk ran a `flock -c`
# string as its program). TAR_OPTIONS gives tar options (`--checkpoint-action=exec=`).
code_environment_words := ["ENV", "PAGER", "MANPAGER", "BROWSER", "HOME", "XDG_CONFIG_HOME", "SHELL"]

# A name, then what follows it: an assignment's value up to bash's next blank, or the next
# character when it continues the name (then it is another name).
code_environment_named := sprintf(
	`(?:^|[^A-Za-z0-9_])(%s)(:?\+?=[^ \t\n]*|[A-Za-z0-9_]?)`,
	[concat("|", code_environment_names)],
)

default command_text := ""

command_text := input.input.command if is_string(input.input.command)

# The line with its quotes and backslashes removed: names spelt with them inside read whole.
command_text_unquoted := regex.replace(command_text, `["'\\]`, "")

# `PAGER=cat git log`, `export MANPAGER=cat;`, `PAGER= man ls`: the pager is cat or none, up to
# bash's next blank (`PAGER=cat;id`, `PAGER=cat\;id`, `PAGER="cat;id"`, `PAGER=cat$X` are asked
# about as any other value).
no_pager(name, assigned) if {
	name in {"PAGER", "MANPAGER"}
	startswith(assigned, "=")
	trim_suffix(substring(assigned, 1, -1), ";") in {"", "cat", "''", `""`, "'cat'", `"cat"`}
}

# Names bash or GNU programs take behaviour from, named anywhere in the line: BASH_CMDS and
# BASH_ALIASES give a name another program or command (`BASH_CMDS[ls]=/bin/chmod`), and
# POSIXLY_CORRECT makes GNU programs stop reading options at the first operand, where the
# rules read them the GNU way (`POSIXLY_CORRECT=1 chmod 777 . -w`: attacker round 185).
needs_approval contains sprintf(
	"%s: the command names %s, which changes %s; a person must approve it before it runs.",
	[tool_name, name, what],
) if {
	command_tool
	some name, what in behaviour_names
	contains(command_text_unquoted, name)
}

# The same names as the parser decodes the words (`export $'POSIXLY_\x43ORRECT=1'`: round 186).
needs_approval contains sprintf(
	"%s: the command names %s, which changes %s; a person must approve it before it runs.",
	[tool_name, name, what],
) if {
	some cmd in simple_commands
	some word in code_environment_cmd_words(cmd)
	some name, what in behaviour_names
	contains(word, name)
}

# bash's POSIX mode sets POSIXLY_CORRECT, which `set -a` exports to every program after it
# (`set -ao posix; chmod 777 . -w`: attacker round 187).
needs_approval contains sprintf(
	"%s: the command names posix: bash's POSIX mode sets POSIXLY_CORRECT, which changes %s; a person must approve it before it runs.",
	[tool_name, behaviour_names.POSIXLY_CORRECT],
) if {
	command_tool
	regex.match(`(^|[^A-Za-z0-9_])posix([^A-Za-z0-9_]|$)`, command_text_unquoted)
}

# A program run under another name (`exec -a NAME`, the loader's --argv0): git and setarch take
# what to do from that name (`exec -a git-init git status --shared=0777` ran git init: round 187).
needs_approval contains sprintf(
	"%s: `%s` runs under another name (%s), which some programs take as what to do; a person must approve it before it runs.",
	[tool_name, shown(cmd), wrapper],
) if {
	some cmd in simple_commands
	some wrapper in cmd.wrappers
	wrapper in {"exec -a", "ld.so --argv0"}
}

# A shell or an interpreter copied or linked under another name (`ln -s /usr/bin/perl p; ./p
# -e ...`: attacker round 193): the policy reads code only for the names it knows.
needs_approval contains sprintf(
	"%s: `%s` gives %s another name, under which the policy does not read the code it runs; a person must approve it before it runs.",
	[tool_name, shown(cmd), basename(word.text)],
) if {
	some cmd in simple_commands
	basename(cmd.name) in {"ln", "cp", "install", "link", "mv", "rsync"}
	operands := getopt_operands(cmd)
	some i, word in operands
	i < count(operands) - 1
	runs_others(basename(word.text))

	# The system's program, not a file of the workspace that has its name (`cp find cat`).
	program_file(known_path(word))
	not runs_others(new_name(operands[count(operands) - 1].text, word.text))
	not copy_target_folder(cmd)
}

# ... or read out of its file into another (`cat /usr/bin/perl > p`: round 194).
needs_approval contains sprintf(
	"%s: `%s` reads the program %s, which may become another name for it; a person must approve it before it runs.",
	[tool_name, shown(cmd), word],
) if {
	some cmd in simple_commands
	basename(cmd.name) in {"cat", "dd", "head", "tail", "tee", "tar", "cpio", "zip", "busybox", "base64", "xxd", "od", "gzip"}
	some word in command_args(cmd)
	program_file(word)
	runs_others(basename(word))
}

# ... also as a redirection's source (`cat < /usr/bin/perl > p`: round 195).
needs_approval contains sprintf(
	"%s: the command reads the program %s, which may become another name for it; a person must approve it before it runs.",
	[tool_name, redirect.target],
) if {
	command_tool
	some redirect in object.get(input.command, "redirects", [])
	startswith(redirect.op, "<")
	program_file(redirect.target)
	runs_others(basename(redirect.target))
}

# A word's path where the facts know it, else the word as written.
known_path(word) := word.path if {
	object.get(word, "path", "") != ""
} else := word.text

# A program's file however its path is spelt (`/bin//perl`, `/usr/./bin/perl`: round 195).
program_file(word) if regex.match(`^(if=)?/+((\.|usr|local)/+)*(s?bin|lib[^/]*(/+[^/]+)*)/+[^/]+$`, word)

# Programs that run what they are given: shells, interpreters and the wrappers that run
# another program (`ln -s /usr/bin/env e; ./e bash -c ...`: round 194).
runs_others(name) if program_reader(name)

runs_others(name) if name in {
	"env", "timeout", "xargs", "nice", "nohup", "stdbuf", "setsid", "busybox", "find", "chroot",
	"unshare", "nsenter", "script", "su", "runuser", "sudo", "doas", "flock", "watch",
	"parallel", "strace", "ltrace", "taskset", "ionice", "chrt", "setpriv", "prlimit", "sg",
	"newgrp", "start-stop-daemon", "systemd-run", "awk", "gawk", "mawk", "sed", "make",
	# The daemon's own list of wrappers it peels (daemon/shell/wrappers.py, round 195).
	"catchsegv", "cgexec", "choom", "cpulimit", "eatmydata", "fakeroot", "faketime", "logsave",
	"numactl", "runcon", "setarch", "sshpass", "uclampset", "valgrind", "ld.so", "linux32",
	"linux64", "i386", "i686", "x86_64", "uname26", "arm64", "aarch64",
}

# The dynamic loader runs the program it is given (`ln -s /lib64/ld-linux-x86-64.so.2 l`).
runs_others(name) if regex.match(`^ld(-linux.*)?\.so`, name)

# The name a copy or link is made under: the destination's, or the source's in a folder
# written with a trailing slash.
new_name(destination, source) := basename(source) if endswith(destination, "/")

else := basename(destination)

# `script` without -c starts a shell that reads its commands from its input, which the policy
# does not parse (`script -q /dev/null <<< 'chmod 777 .'`: round 187).
needs_approval contains sprintf(
	"%s: `%s` starts a shell that reads its commands from its input, which the policy does not read; a person must approve it before it runs. Give the command with -c instead.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	basename(cmd.name) == "script"
	not script_given_a_command(cmd)
}

script_given_a_command(cmd) if {
	some word in cmd_words(cmd)
	regex.match(`^-[A-Za-z]*c|^--c(o(m(m(a(n(d)?)?)?)?)?)?(=|$)`, word.text)
}

# dpkg-statoverride --update sets the mode it records at once (round 187).
needs_approval contains sprintf(
	"%s: `%s` sets owners and modes of files; a person must approve it before it runs.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	basename(cmd.name) == "dpkg-statoverride"
	not every_word_lists(cmd)
}

every_word_lists(cmd) if {
	words := cmd_words(cmd)
	count(words) > 0
	every word in words {
		word.dynamic == false
		word.text in {"--list", "-l", "--help", "-?", "--version", "--force", "--quiet", "--root", "--admindir"}
	}
}

# awk reading its program from its input or a descriptor (`awk -f - <<< 'BEGIN{system(...)}'`):
# the policy cannot read it (round 187).
needs_approval contains sprintf(
	"%s: `%s` reads its program from %s, which the policy cannot read; a person must approve it before it runs. Give the program as its first operand.",
	[tool_name, shown(cmd), source],
) if {
	some cmd in simple_commands
	basename(cmd.name) in stream_programs
	stream_family(basename(cmd.name)) == "awk"
	some source in awk_program_files(cmd)
	awk_stream_source(source)
}

# `-` or a descriptor however its path is spelt (`//dev/stdin`, `/tmp/../dev/stdin`: round 196).
awk_stream_source(source) if source == "-"

awk_stream_source(source) if startswith(source, "<(")

awk_stream_source(source) if descriptor_path(source)

awk_program_files(cmd) := [value |
	words := cmd_words(cmd)
	some j, word in words
	value := awk_file_value(words, j)
]

awk_file_value(words, j) := words[j + 1].text if {
	regex.match(`^-[A-Za-z]*[fE]$|^--(fi(l(e)?)?|exe(c)?)$`, words[j].text)
} else := substring(words[j].text, 2, -1) if {
	regex.match(`^-[fE].`, words[j].text)
} else := value if {
	regex.match(`^--(fi(l(e)?)?|exe(c)?)=`, words[j].text)
	value := substring(words[j].text, indexof(words[j].text, "=") + 1, -1)
}

behaviour_names := {
	"BASH_CMDS": "which program a name runs",
	"BASH_ALIASES": "which command a name runs",
	"POSIXLY_CORRECT": "where programs stop reading their options, which the policy reads otherwise",
}

# `hash -p PROGRAM NAME` and `enable -f LIBRARY NAME` give a name another program or a builtin
# loaded from a file (round 185).
needs_approval contains sprintf(
	"%s: `%s` makes a name run another program, which the policy cannot follow; a person must approve it before it runs.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	some [program, letter] in [["hash", "p"], ["enable", "f"]]
	basename(cmd.name) == program
	some word in cmd_words(cmd)
	gives_option(word, letter)
}

gives_option(word, letter) if regex.match(sprintf(`^-[A-Za-z]*%s`, [letter]), word.text)

# A word only known when it runs may be the option (`O=-p; hash $O /bin/chmod ls`: round 186).
gives_option(word, _) if word.dynamic == true

# A reference to a variable named when it runs, or not named yet (`declare -n r=${n}T`,
# `declare -n r; r=$n`): what is assigned through it reaches any variable, those programs take
# code from included (attacker round 157).
needs_approval contains sprintf(
	"%s: `%s` makes a reference to a variable whose name is only known when it runs; a person must approve it before it runs.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	basename(cmd.name) in {"declare", "typeset", "local"}
	some option in cmd_words(cmd)
	regex.match(`^-[A-Za-z]*n`, option.text)
	some word in cmd_words(cmd)
	not startswith(word.text, "-")
	not nameref_to_a_name(word)
}

nameref_to_a_name(word) if {
	word.dynamic == false
	regex.match(`^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z_][A-Za-z0-9_]*$`, word.text)
}

# Bash defines the functions its environment exports (`env 'BASH_FUNC_ls%%=() { ...; }' bash
# -c ls`: attacker round 157), however the name is spelt.
needs_approval contains code_environment_reason("BASH_FUNC_") if {
	command_tool
	contains(command_text_unquoted, "BASH_FUNC_")
}

needs_approval contains code_environment_reason("BASH_FUNC_") if {
	some cmd in simple_commands
	some word in code_environment_cmd_words(cmd)
	contains(word, "BASH_FUNC_")
}

# A variable's name built when it runs: `export ${P}_DIR=x`, `env "$N=x" git status`, `read
# "$N"`, `printf -v "$N"` (it may be one git or another program takes code from: round 157).
needs_approval contains variable_named_at_run_time(cmd) if {
	some cmd in simple_commands
	basename(cmd.name) in {
		"export", "declare", "typeset", "local", "readonly", "env", "read", "getopts",
		"mapfile", "readarray",
	}
	some word in cmd_words(cmd)
	word.dynamic == true
	not startswith(word.text, "-")
	name_part := split(word.text, "=")[0]
	regex.match("[$`]", name_part)
}

needs_approval contains variable_named_at_run_time(cmd) if {
	some cmd in simple_commands
	basename(cmd.name) == "printf"
	words := cmd_words(cmd)
	some j, option in words
	regex.match(`^-v`, option.text)
	some word in array.slice(words, j, j + 2)
	regex.match("[$`]", word.text)
}

variable_named_at_run_time(cmd) := sprintf(
	"%s: `%s` sets a variable whose name is only known when it runs (it may be one git or another program takes configuration or code from); a person must approve it before it runs.",
	[tool_name, shown(cmd)],
)

harmless_git_environment := {
	"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
	"GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE", "GIT_TERMINAL_PROMPT", "GIT_OPTIONAL_LOCKS",
}

# Moving, copying or linking git's directory or files puts them where a later write is not seen
# as one: `mv .git g && echo x > g/hooks/pre-commit && mv g .git`, `ln -s .git G`.
needs_approval contains sprintf(
	"%s: `%s` moves, copies or links %s, git's own files, after which writes to them are not recognised; a person must approve it before it runs.",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in object.get(input, ["command", "simple_commands"], [])
	basename(cmd.name) in git_file_movers
	some word in object.get(cmd, "words", [])
	git_files_word(word)
}

# A name only known when it runs may be `.git` (`cp -r x/* $D`, `ln -s evil $H`, `mv g .gi?`):
# where a mover, copier or linker puts what it is given. Sources taken out of the workspace are
# judged as deletes below; one moved inside it stays git's directory for the path checks.
needs_approval contains sprintf(
	"%s: `%s` moves, copies or links to `%s`, a name only known when it runs, which may be git's own files; a person must approve it before it runs.",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in simple_commands
	basename(cmd.name) in git_file_movers
	some word in mover_destinations(cmd)
	may_name_git_directory(word)
}

# A link to a name only known when it runs may lead to one of git's files, and what the same
# line then writes through the link is not seen as a write to it (attacker round 85:
# `N=.gitattribute""s; ln -s "$N" A && echo x > A`). A later line's writes go through the link
# on the disk, where it is followed.
needs_approval contains sprintf(
	"%s: `%s` links to `%s`, a name only known when it runs, which may be git's own files, and the line goes on; a person must approve it before it runs. Make the link in a line of its own.",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in simple_commands
	makes_links(cmd)
	some word in operand_words(cmd)
	word.dynamic == true
	may_be_git_file(word)
	line_does_more(cmd)
}

line_does_more(_) if count(object.get(input, ["command", "written_paths"], [])) > 0

line_does_more(_) if count(simple_commands) > 1

makes_links(cmd) if basename(cmd.name) in {"ln", "link", "symlink"}

makes_links(cmd) if {
	basename(cmd.name) == "cp"
	some opt in options(command_args(cmd))
	regex.match(`^-[A-Za-z0-9]*[sl]|^--(symbolic-link|link)$`, opt)
}

may_be_git_file(word) if object.get(word, "basename", "") == ""

may_be_git_file(word) if may_name_git_control(word)

# csplit and split name what they write by a prefix and a suffix they format: the prefix may be
# most of one of git's files, and the suffix the rest (attacker round 86: `csplit -f
# .gitattribute -b '%.0ds' in 2` wrote .gitattributes).
needs_approval contains sprintf(
	"%s: `%s` writes files named `%s` followed by a suffix, which may spell one of git's own files; a person must approve it before it runs. Use another prefix.",
	[tool_name, shown(cmd), prefix],
) if {
	some cmd in simple_commands
	prefix := split_prefix(cmd)
	prefix_may_name_git_control(prefix)
}

split_prefix(cmd) := prefix if {
	basename(cmd.name) == "csplit"
	prefix := option_value(command_args(cmd), "-f", "--prefix", "xx")
} else := prefix if {
	basename(cmd.name) == "split"
	operands := [w | some w in command_args(cmd); not startswith(w, "-")]
	prefix := split_operand_prefix(operands)
}

split_operand_prefix(operands) := operands[count(operands) - 1] if count(operands) >= 2

else := "x"

# The value of an option given as `-f V`, `-fV`, `--prefix=V` or `--prefix V`; `otherwise` without.
option_value(args, short, long, otherwise) := value if {
	some i, arg in args
	arg in {short, long}
	value := args[i + 1]
} else := value if {
	some arg in args
	startswith(arg, concat("", [long, "="]))
	value := substring(arg, count(long) + 1, -1)
} else := value if {
	some arg in args
	startswith(arg, short)
	arg != short
	not startswith(arg, "--")
	value := substring(arg, count(short), -1)
} else := otherwise

prefix_may_name_git_control(prefix) if {
	name := regex.replace(prefix, `^.*/`, "")
	some git_name in git_control_names
	startswith(git_name, name)
}

prefix_may_name_git_control(prefix) if regex.match("[$`*?\\[{]|(^|/)\\.git(/|$)", prefix)

# Programs that write files named by their input, not by their words (an archive, a patch):
# any of them may be git's own (`tar cf - g --transform s,^g,.git, | tar xf -`).
needs_approval contains sprintf(
	"%s: `%s` writes files named inside %s, which may be git's own files (its hooks and configuration); a person must approve it before it runs.",
	[tool_name, shown(cmd), what],
) if {
	some cmd in simple_commands
	what := writes_named_by_input(cmd)
}

writes_named_by_input(cmd) := "the archive it extracts" if {
	basename(cmd.name) in {"tar", "bsdtar", "ptar"}
	tar_extracts(cmd)
} else := "its input (an archive, a patch)" if {
	basename(cmd.name) in input_named_writers
}

# `python3 -m tarfile -e` (attacker round 89), `--ex`, `-ve` (argparse takes a prefix of a long
# option and clusters: round 90): all but listing and testing, which only read.
writes_named_by_input(cmd) := "the archive it extracts" if {
	python_module(cmd) in {"tarfile", "zipfile"}
	not python_archive_reads(cmd)
}

python_archive_reads(cmd) if {
	some arg in command_args(cmd)
	regex.match(`^-[a-z]*[lt]$|^--(l|li|lis|list|t|te|tes|test)$`, arg)
}

writes_named_by_input(cmd) := "the archive it extracts" if {
	basename(cmd.name) == "dpkg"
	some opt in options(command_args(cmd))
	regex.match(`^-[A-Za-z]*[xXR]|^--(ex|vex|unp)`, opt)
}

# python's modules that read statements from the input (`echo ... | python3 -m code`, also
# `-m asyncio`, pdb: attacker round 195).
reads_program_from_stream(cmd) if python_module(cmd) in {"code", "asyncio", "pdb", "idlelib", "idlelib.idle", "cmd", "sqlite3"}

# gawk's debugger reads its commands from the input, and its `eval` runs awk code (round 195).
needs_approval contains sprintf(
	"%s: `%s` starts gawk's debugger, which reads its commands (and awk code to run) from its input; a person must approve it before it runs.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	regex.match(`^(g|m|n)?awk`, basename(cmd.name))
	some word in command_args(cmd)
	regex.match(`^-D|^--debug`, word)
}

# The module `python -m` runs (`-m json.tool`, `-mjson.tool`).
# The first one: python passes the words after it to the module (`-mpdb -m this` runs pdb;
# two were two values, an error: attacker round 195).
python_module(cmd) := module if {
	regex.match(`^python[0-9.]*$`, basename(cmd.name))
	args := command_args(cmd)
	firsts := [j | some j, arg in args; regex.match(`^-m`, arg)]
	count(firsts) > 0
	module := module_at(args, min(firsts))
}

module_at(args, j) := args[j + 1] if args[j] == "-m"

else := substring(args[j], 2, -1)

# The operands after the module's name.
module_operands(cmd) := [word |
	module := python_module(cmd)
	some word in operand_words(cmd)
	word.text != module
]

input_named_writers := {
	"unzip", "funzip", "7z", "7za", "7zr", "ar", "pax", "cpio", "bsdcpio", "unsquashfs", "jar",
	"patch", "busybox", "dpkg-deb", "rpm2archive",
}

# A word only known when it runs where tar takes options (before `--`, and not an option's
# value such as -f's): it may be an option that runs a command (`O='--to-command=...'; tar -cf
# x.tar "$O" .`: attacker round 90).
needs_approval contains concat(" ", [
	sprintf("%s: `%s` is given `%s`, only known when it runs, where it may be one of its options, some of which run commands (--to-command, --checkpoint-action);", [tool_name, shown(cmd), word.text]),
	"a person must approve it before it runs. Put `--` before names only known when it runs.",
]) if {
	some cmd in simple_commands
	basename(cmd.name) in {"tar", "bsdtar", "ptar"}
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some j, word in words
	word.dynamic == true
	regex.match("^[$`*?\\[{]", word.text)
	not "--" in array.slice(texts, 0, j)
	not tar_option_value(texts, j)
}

# tar's short options that take a value.
tar_valued_letters := "bCfFgHIKLNTVX"

tar_option_value(texts, j) if regex.match(sprintf(`^-[A-Za-z]*[%s]$|^--(file|directory|files-from|exclude-from|exclude|transform|xform|owner|group|mode|mtime|newer|label|suffix|format)$`, [tar_valued_letters]), texts[j - 1])

# The old style: the first word's letters that take a value take the next words in turn.
tar_option_value(texts, j) if {
	not startswith(texts[0], "-")
	j >= 1
	j <= count(regex.find_n(sprintf("[%s]", [tar_valued_letters]), texts[0], -1))
}

tar_extracts(cmd) if {
	some opt in options(command_args(cmd))
	regex.match(`^-[A-Za-z0-9]*x|^--(extract|get)`, opt)
}

# GNU tar takes a prefix of a long option (`--ext`, `--ge`: attacker round 186).
tar_extracts(cmd) if {
	some opt in options(command_args(cmd))
	key := split(opt, "=")[0]
	some [name, least] in [["--extract", 5], ["--get", 4]]
	count(key) >= least
	startswith(name, key)
}

# The old style: the first word is the letters without a dash (`tar xzf a.tgz`).
tar_extracts(cmd) if {
	first := command_args(cmd)[0]
	not startswith(first, "-")
	regex.match(`^[A-Za-z]*x[A-Za-z]*$`, first)
}

# `rename` computes each new name with an expression (perl's) or a substitution: any name.
needs_approval contains sprintf(
	"%s: `%s` renames files to names computed when it runs, which may be git's own files; a person must approve it before it runs. Use mv with the exact names instead.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	basename(cmd.name) in {"rename", "rename.ul", "prename", "file-rename"}
}

git_file_movers := {"mv", "cp", "ln", "link", "symlink", "rsync", "install", "rename"}

# The destination: the last operand, or with -t (which names it) every operand.
mover_destinations(cmd) := operand_words(cmd) if target_directory_option(cmd)

else := [last] if {
	operands := operand_words(cmd)
	count(operands) > 0
	last := operands[count(operands) - 1]
} else := []

target_directory_option(cmd) if {
	some opt in options(command_args(cmd))
	regex.match(`^-[A-Za-z0-9]*t|^--target`, opt)
}

may_name_git_directory(word) if {
	word.dynamic == true
	object.get(word, "basename", "") == ""
}

may_name_git_directory(word) if {
	word.dynamic == true
	word.basename_whole == false
	endswith(".git", word.basename)
}

may_name_git_directory(word) if {
	word.dynamic == true
	object.get(word, "basename_whole", true) == true
	word.basename == ".git"
}

# Moving names out of the workspace deletes them from it: `mv * /tmp/` empties it as `rm -rf *`
# does, and is judged the same way (a name only known when it runs, the workspace, its
# directory); a move to a known place inside the workspace deletes nothing.
needs_approval contains concat(" ", [
	sprintf("%s: `%s` moves %s to %s, which deletes it from the workspace;", [tool_name, shown(cmd), what, where]),
	"a person must approve it before it runs. To move less, name the exact files or subdirectories inside the workspace.",
]) if {
	some cmd in simple_commands
	basename(cmd.name) == "mv"
	where := move_destination_outside(cmd)
	some source in move_sources(cmd)
	what := risky_target(cmd, source)
}

move_sources(cmd) := array.concat(operand_words(cmd), fed_operands(cmd)) if target_directory_option(cmd)

else := array.concat(array.slice(operand_words(cmd), 0, count(operand_words(cmd)) - 1), fed_operands(cmd))

move_destination_outside(cmd) := "a place the policy cannot tell (given with -t)" if {
	target_directory_option(cmd)
} else := "a place the policy cannot tell (xargs or find hands over names)" if {
	count(fed_operands(cmd)) > 0
} else := where if {
	operands := operand_words(cmd)
	count(operands) > 1
	destination := operands[count(operands) - 1]
	where := leaves_workspace(destination)
}

leaves_workspace(word) := sprintf("`%s`, a place only known when it runs", [word.text]) if {
	word.path == ""
} else := sprintf("%s, outside the workspace %s", [word.path, workspace]) if {
	word.path != trim_right(workspace, "/")
	not inside_workspace(word.path)
}

git_files_word(word) if regex.match(`(^|/)\.git(/|$)|(^|/)\.git(attributes|modules)$`, word.path)

git_files_word(word) if regex.match(`(^|/)\.git(/|$)|(^|/)\.git(attributes|modules)$`, word.text)

# In any git directory below .git (a submodule's .git/modules/x, a work tree's .git/worktrees/x),
# and a `.git` file itself, which names the git directory to use (`gitdir: ...`).
git_control_path(path) if regex.match(`(^|/)\.git/(.+/)?(config(\.worktree)?$|hooks(/|$)|info/attributes$)`, path)

git_control_path(path) if regex.match(`(^|/)\.git$`, path)

# A rebase, am, cherry-pick or revert under way: whoever continues it runs its `exec` lines
# (attacker round 135: a tenant's, written into another's repository).
git_control_path(path) if regex.match(`(^|/)\.git/(.+/)?(rebase-merge|rebase-apply|sequencer)(/|$)`, path)

git_control_path(path) if regex.match(`(^|/)\.gitattributes$|(^|/)\.gitmodules$`, path)

# git's global and system configuration (`~/.gitconfig`, `$XDG_CONFIG_HOME/git/config`,
# `/etc/gitconfig`): read by every git the line runs after it (attacker round 186:
# `core.sharedRepository = 0777` written there, then `git init`). Files of those names inside
# the workspace are read only where a configuration git reads names them (an include, HOME
# set in the line: both asked about), and the workspace's own are kept read-only then.
git_control_path(path) if {
	regex.match(`(^|/)\.?gitconfig$|(^|/)git/(config|attributes)$`, path)
	not inside_workspace(path)
}

# --- Words ------------------------------------------------------------------------------------

# The words after the program, with what the parser knows of them. A command written as an
# alias's value gets the words written after the alias where it is used, which the parser does
# not join to it (`alias c='chmod 777'` then `c .`: attacker round 184): one more word, only
# known when it runs.
cmd_words(cmd) := array.concat(parsed_words(cmd), alias_words(cmd))

parsed_words(cmd) := cmd.words if {
	is_array(cmd.words)
	count(cmd.words) == count(cmd.argv) - 1
} else := [{"text": word, "dynamic": true, "path": ""} | some word in command_args(cmd)]

alias_words(cmd) := [{"text": "(the words after the alias where it is used)", "dynamic": true, "path": ""}] if {
	"alias" in object.get(cmd, "wrappers", [])
} else := []

# Words that are not options: before `--` those not starting with `-`, and all after it.
operand_words(cmd) := [word |
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, word in words
	operand_at(texts, i)
	word.text != ""
]

default cmd_cwd(_) := ""

cmd_cwd(cmd) := cmd.cwd if is_string(cmd.cwd)

# Why a target is risky (a phrase for the reason); undefined when it is not.
risky_target(cmd, word) := sprintf("`%s`, a path only known when the command runs", [word.text]) if {
	word.dynamic == true
} else := sprintf("%s, inside git's own directory (the repository's history)", [word.text]) if {
	inside_git_directory(word)
} else := sprintf("`%s`, relative to a directory that is not certain (after a `cd` that may fail or stay in a subshell)", [word.text]) if {
	word.path == ""
} else := folder if {
	folder := important_folder(cmd, word.path)
} else := sprintf("%s, outside the workspace %s", [word.path, workspace]) if {
	not inside_workspace(word.path)
}

# A folder that exists and matters: the workspace's root, the folder the command runs in, the
# session's working directory, or a folder holding the workspace: risky_target's phrases for them.
important_folder(cmd, path) := sprintf("the workspace root %s", [path]) if {
	path == trim_right(workspace, "/")
} else := sprintf("%s, the directory it runs in", [path]) if {
	path == cmd_cwd(cmd)
} else := sprintf("%s, the session's working directory", [path]) if {
	path == input.command.cwd
} else := sprintf("%s, a folder that holds the workspace", [path]) if {
	holds_workspace(path)
}

# Deleting any of git's directory loses history: `rm -rf .git/objects`, `rm .git/index`.
needs_approval contains sprintf(
	"%s: `%s` deletes %s, inside git's own directory (the repository's history); a person must approve it before it runs.",
	[tool_name, shown(cmd), word.text],
) if {
	some cmd in simple_commands
	basename(cmd.name) in {"rm", "unlink", "shred", "rmdir"}
	some word in operand_words(cmd)
	inside_git_directory(word)
}

inside_git_directory(word) if in_git_directory(word.path)

inside_git_directory(word) if in_git_directory(word.text)

in_git_directory(path) if regex.match(`(^|/)\.git(/|$)`, path)

holds_workspace(path) if path == "/"

holds_workspace(path) if startswith(trim_right(workspace, "/"), concat("", [path, "/"]))

inside_workspace(path) if startswith(path, concat("", [trim_right(workspace, "/"), "/"]))

# --- Recursive deletes -------------------------------------------------------------------------

recursive_delete_targets(cmd) := targets if {
	basename(cmd.name) == "rm"
	recursive(cmd)
	targets := array.concat(operand_words(cmd), fed_operands(cmd))
}

recursive_delete_targets(cmd) := find_start_words(cmd) if {
	basename(cmd.name) == "find"
	find_deletes(cmd)
}

recursive(cmd) if has_short_flag(options(command_args(cmd)), "rR")

# `python3 -m venv --clear DIR` first deletes everything DIR holds (attacker round 91: `.`).
recursive_delete_targets(cmd) := module_operands(cmd) if {
	python_module(cmd) == "venv"
	some arg in command_args(cmd)
	regex.match(`^--cl(e(a(r)?)?)?$`, arg)
}

# A delete that is not recursive still empties the workspace of its files where its names are
# only known when it runs and may be any (`shopt -s globstar dotglob; rm -f -- **`, `rm $F`:
# attacker round 87); a pattern with a fixed end (`*.o`) is left alone.
needs_approval contains concat(" ", [
	sprintf("%s: `%s` deletes `%s`, names only known when it runs that may be every file here;", [tool_name, shown(cmd), word.text]),
	"a person must approve it before it runs. Name the files, or use a pattern with a fixed part (`*.o`).",
]) if {
	some cmd in simple_commands
	basename(cmd.name) in {"rm", "rmdir", "unlink", "shred"}
	not recursive_delete_targets(cmd)
	some word in operand_words(cmd)
	word.dynamic == true
	object.get(word, "basename", "") == ""
}

# Operands that xargs or find -exec hand over (`{}`): unknown here.
fed_operands(cmd) := [{"text": "(the names xargs or find hands over)", "dynamic": true, "path": ""}] if {
	some wrapper in cmd.wrappers
	wrapper in {"xargs", "find -exec", "find -execdir", "find -ok", "find -okdir", "parallel"}
} else := []

recursive_delete_targets(cmd) := array.concat(array.concat(operand_words(cmd), fed_operands(cmd)), listed_operands(cmd)) if {
	basename(cmd.name) in {"tar", "bsdtar"}
	has_long_flag(options(command_args(cmd)), "--remove-files")
}

# Names a list gives (`--files-from=F`, tar's `-T F`, zip's `-@`): unknown here.
listed_operands(cmd) := [{"text": "(the names a list file or standard input gives)", "dynamic": true, "path": ""}] if {
	some opt in options(command_args(cmd))
	regex.match(`^--files-from|^--names-stdin|^-[A-Za-z0-9]*[T@]`, opt)
} else := []

# Names xargs hands a program that may write: any of the workspace's files, git's own among them
# (`echo .git/config | xargs sed -i ...`).
needs_approval contains sprintf(
	"%s: `%s` changes files whose names xargs hands over, which may be any of the workspace's, git's own among them; a person must approve it before it runs. Name the files, or run it on a list you checked.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	some wrapper in cmd.wrappers
	wrapper in {"xargs", "parallel"}
	not object.get(cmd, "program_reads_only", false)
	not basename(cmd.name) in operands_never_written
}

# find running a program that may write on what it finds, from a risky start (`find . -exec
# sed -i d {} +` emptied every file, git's included): judged as a recursive delete is.
needs_approval contains concat(" ", [
	sprintf("%s: `%s` runs %s on every file it finds in %s;", [tool_name, shown(cmd), program, what]),
	"a person must approve it before it runs. Start it in the exact subdirectory inside the workspace.",
]) if {
	some cmd in simple_commands
	basename(cmd.name) == "find"
	some i, word in command_args(cmd)
	word in {"-exec", "-execdir", "-ok", "-okdir"}
	program := basename(command_args(cmd)[i + 1])
	not program in find_exec_readers
	some target in find_start_words(cmd)
	what := risky_target(cmd, target)
}

find_exec_readers := {
	"grep", "egrep", "fgrep", "rg", "cat", "head", "tail", "wc", "ls", "file", "stat", "du",
	"md5sum", "sha1sum", "sha256sum", "cmp", "diff", "echo", "printf", "test", "[", "basename",
	"dirname", "realpath", "readlink", "strings", "od", "xxd", "hexdump", "jq",
}

# awk programs that write files or run commands (`print > f`, `system()`, pipes): code the policy
# does not follow.
needs_approval contains sprintf(
	"%s: `%s` runs a %s program that can write files or run commands; a person must approve it before it runs.",
	[tool_name, shown(cmd), basename(cmd.name)],
) if {
	some cmd in simple_commands
	basename(cmd.name) in stream_programs
	stream_family(basename(cmd.name)) == "awk"
	some word in command_args(cmd)
	some text in stream_texts(word)
	regex.match(awk_writing, text)
}

# An awk program is also read with its strings emptied, then its strings and everything between
# two slashes (a regular expression, or not: a text looked at more ways only asks more): a `}`
# or `;` in one ended the look for a redirection (`print "}" > "f"`, `print /;/ > "f"`:
# attacker rounds 157, 159 and 161).
stream_texts(word) := [word, no_strings, regex.replace(no_strings, `/(?:[^/\\\n]|\\.)*/`, "//")] if {
	no_strings := regex.replace(word, `"(?:[^"\\]|\\.)*"`, `""`)
}

# gawk calls any function by a name held in a variable, `system` included (`@f()`, `@ f()`:
# round 157), and includes or loads code (round 151).
awk_writing := `system|getline|\||(print|printf)[^;}]*>|fflush|close\(|@[\s\\]*[A-Za-z_]`

# A sed program known as written is read for what it may do, not for what it may not: print,
# delete, substitute with harmless flags (g, p, I, M, a number) and one of a few delimiters,
# transliterate, branch, add text, read a file (`sed_plain`). Anything else asks: `e`, `w`,
# `W`, another delimiter, an address written another way, a program in a file (`-f`). Rounds
# 151, 157, 159 and 161 each found a spelling that rules looking for `e` and `w` missed
# (`1!e rm`, `sa^aidae`, `s,x,y,gw f`, `s-x-id-eg`, `/./Isa.*aidae`).
needs_approval contains sprintf(
	"%s: `%s` runs a sed program the policy cannot read as only printing, deleting or substituting (it may run commands or write files); a person must approve it before it runs.",
	[tool_name, shown(cmd)],
) if {
	some cmd in simple_commands
	stream_family(basename(cmd.name)) == "sed"
	some word in array.concat(stream_program_words(cmd), stream_first_operand(cmd))
	word.dynamic == false
	text := sed_program_text(word.text)
	not regex.match(sed_plain, text)
}

# A sed program word as written: itself, or the value of `--expression=` or of an `-e` with
# its program attached (`-ne1p`); an option word gives none.
sed_program_text(text) := text if not startswith(text, "-")

sed_program_text(text) := substring(text, indexof(text, "=") + 1, -1) if regex.match(`^--e[a-z]*=`, text)

sed_program_text(text) := found[0][1] if {
	not startswith(text, "--")
	found := regex.find_all_string_submatch_n(`^-[A-Za-z]*?e(.+)$`, text, 1)
	count(found) == 1
}

sed_plain := `^(?:[ \t]*(?:(?:(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/[IM]*)(?:[ \t]*,[ \t]*(?:(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/[IM]*)|[+~]\d+))?[ \t]*(?:![ \t]*)?))?(?:(?:s/(?:[^/\\\n]|\\.)*/(?:[^/\\\n]|\\.)*/[gpIiMm0-9]*|s\|(?:[^\|\\\n]|\\.)*\|(?:[^\|\\\n]|\\.)*\|[gpIiMm0-9]*|s#(?:[^#\\\n]|\\.)*#(?:[^#\\\n]|\\.)*#[gpIiMm0-9]*|s:(?:[^:\\\n]|\\.)*:(?:[^:\\\n]|\\.)*:[gpIiMm0-9]*|s,(?:[^,\\\n]|\\.)*,(?:[^,\\\n]|\\.)*,[gpIiMm0-9]*|s@(?:[^@\\\n]|\\.)*@(?:[^@\\\n]|\\.)*@[gpIiMm0-9]*|s%(?:[^%\\\n]|\\.)*%(?:[^%\\\n]|\\.)*%[gpIiMm0-9]*|s_(?:[^_\\\n]|\\.)*_(?:[^_\\\n]|\\.)*_[gpIiMm0-9]*|y/(?:[^/\\\n]|\\.)*/(?:[^/\\\n]|\\.)*/|[pdnNDPhHgGxzF=]|[qQlL][ \t]*\d*|[aic](?:[^\n\\]|\\.|\\\n)*|[:btT][ \t]*[^;\n}]*|[rR][ \t]*[^\n]*|[{}]|#[^\n]*))?[ \t]*[;\n]?)*$`

# sort hands what it spills to its compress program's standard input, and `sh` runs that
# (attacker round 157: `--compress-program=sh` ran the sorted lines): any program but a
# compressor is asked about.
needs_approval contains sprintf(
	"%s: `%s` has sort run `%s` as its compress program, which reads the data sorted; a person must approve it before it runs.",
	[tool_name, shown(cmd), program],
) if {
	some cmd in simple_commands
	basename(cmd.name) == "sort"
	words := cmd_words(cmd)
	some j, _ in words
	program := sort_compressor(words, j)
	not basename(program) in compressors
}

sort_compressor(words, j) := substring(words[j].text, indexof(words[j].text, "=") + 1, -1) if {
	regex.match(`^--co[a-z-]*=`, words[j].text)
}

sort_compressor(words, j) := words[j + 1].text if regex.match(`^--co[a-z-]*$`, words[j].text)

compressors := {"gzip", "bzip2", "xz", "zstd", "lz4", "lzop", "pigz", "pbzip2", "lzip", "compress", "brotli"}

# tar hands the archive it makes (or reads) to its compress program, and a shell or an
# interpreter given no script runs that data (round 159: `tar -cf o.tar -I bash p.txt`).
needs_approval contains sprintf(
	"%s: `%s` has tar feed its archive to `%s`, which runs what it reads; a person must approve it before it runs.",
	[tool_name, shown(cmd), cmd.name],
) if {
	some cmd in simple_commands
	"tar" in object.get(cmd, "wrappers", [])
	reads_code_from_input(cmd)
}

reads_code_from_input(cmd) if {
	basename(cmd.name) in shells
	not has_short_flag(options(command_args(cmd)), "c")
	not shell_script(cmd)
}

# Its script is its standard input however named (`bash /dev/stdin`, `../../dev/stdin`,
# `/proc/self/fd/0`, `-`: round 161).
reads_code_from_input(cmd) if {
	basename(cmd.name) in shells
	not has_short_flag(options(command_args(cmd)), "c")
	standard_input_word(shell_script(cmd))
}

reads_code_from_input(cmd) if {
	inline_code_runner(basename(cmd.name))
	count(code_words(cmd)) == 0
	count(operand_words(cmd)) == 0
}

reads_code_from_input(cmd) if {
	inline_code_runner(basename(cmd.name))
	count(code_words(cmd)) == 0
	standard_input_word(operand_words(cmd)[0])
}

standard_input_word(word) if word.text == "-"

standard_input_word(word) if {
	some name in [word.text, object.get(word, "path", "")]
	regex.match(`(^|/)dev/+(stdin|fd/+0)$|(^|/)proc/+(self|thread-self|[0-9]+)/+fd/+0$`, name)
}

# Emptying files deletes what they hold: `find . -exec truncate -s0 {} +`, `truncate -s0 *`,
# judged on the same targets as a recursive delete.
needs_approval contains concat(" ", [
	sprintf("%s: `%s` empties the files of %s;", [tool_name, shown(cmd), what]),
	"a person must approve it before it runs. To empty less, name the exact files inside the workspace.",
]) if {
	some cmd in simple_commands
	some target in emptied_targets(cmd)
	what := risky_target(cmd, target)
}

emptied_targets(cmd) := array.concat(operand_words(cmd), fed_operands(cmd)) if {
	basename(cmd.name) == "truncate"
}

emptied_targets(cmd) := find_start_words(cmd) if {
	basename(cmd.name) == "find"
	some i, word in command_args(cmd)
	word in {"-exec", "-execdir", "-ok", "-okdir"}
	basename(command_args(cmd)[i + 1]) == "truncate"
}

recursive_delete_targets(cmd) := array.concat(array.concat(operand_words(cmd), fed_operands(cmd)), listed_operands(cmd)) if {
	basename(cmd.name) == "rsync"
	some long in {"--delete", "--delete-before", "--delete-during", "--delete-after", "--delete-excluded", "--remove-source-files", "--del"}
	has_long_flag(options(command_args(cmd)), long)
}

recursive_delete_targets(cmd) := array.concat(array.concat(operand_words(cmd), fed_operands(cmd)), listed_operands(cmd)) if {
	basename(cmd.name) == "zip"
	some opt in options(command_args(cmd))
	regex.match(`^-[A-Za-z0-9]*m|^--move$`, opt)
}

# find deletes what it matches with -delete, or by running rm/rmdir/unlink/shred on it.
find_deletes(cmd) if "-delete" in command_args(cmd)

find_deletes(cmd) if {
	some i, word in command_args(cmd)
	word in {"-exec", "-execdir", "-ok", "-okdir"}
	basename(command_args(cmd)[i + 1]) in {"rm", "rmdir", "unlink", "shred"}
}

# Where find starts: its words before the first expression word (`.` when there are none).
find_start_words(cmd) := starts if {
	words := cmd_words(cmd)
	firsts := [i | some i, w in words; find_expression_word(w.text)]
	end := min(array.concat(firsts, [count(words)]))
	given := [w | some i, w in words; i < end; not w.text in {"-H", "-L", "-P"}]
	count(given) > 0
	starts := given
} else := [{"text": ".", "dynamic": false, "path": cmd_cwd(cmd)}]

find_expression_word(text) if {
	startswith(text, "-")
	not text in {"-H", "-L", "-P"}
}

find_expression_word(text) if text in {"(", ")", "!", ","}

# --- git ---------------------------------------------------------------------------------------

# [index of the simple command, what it does]. A git line without facts (an older daemon) is
# read as a whole as something the policy cannot check.
git_effect contains [i, "runs git in a way the policy cannot read"] if {
	some i, cmd in simple_commands
	basename(cmd.name) == "git"
	not dynamic_program(cmd)
	not has_git_facts(cmd)
}

git_effect contains [i, sprintf("runs git with configuration overrides (%s), which can define aliases, hooks and programs git runs", [concat(", ", git.config)])] if {
	some i, git in git_lines
	count(git.config) > 0
}

git_effect contains [i, "points git at another repository, work tree, configuration or program directory"] if {
	some i, git in git_lines
	git.redirected == true
}

git_effect contains [i, "runs git with words only known when the command runs"] if {
	some i, git in git_lines
	git.dynamic == true
}

git_effect contains [i, sprintf("runs `git %s`, which is not one of git's own commands (an alias from a configuration the policy cannot see, or another program)", [git.subcommand])] if {
	some i, git in git_lines
	git.subcommand != ""
	git.known == false
}

# Commands git runs that the line gives it, as a shell string or a program (attacker round 150:
# `git ls-remote --upload-pack='rm -rf ...' .` ran unasked): the remote side's programs
# (--upload-pack, --receive-pack, --exec, clone's -u), rebase's -x/--exec, grep's pager (-O),
# bisect run, submodule foreach.
git_effect contains [i, "runs a command given to git (the remote's program, rebase's --exec, grep's pager, bisect run or submodule foreach), which the policy does not read"] if {
	some i, git in git_lines
	git_runs_a_command(git)
}

git_runs_a_command(git) if {
	some long in {"--upload-pack", "--receive-pack", "--exec", "--open-files-in-pager"}
	has_long_flag(git.options, long)
}

git_runs_a_command(git) if {
	some subcommand, letter in {"clone": "u", "rebase": "x", "grep": "O"}
	git.subcommand == subcommand
	has_short_flag(git.options, letter)
}

git_runs_a_command(git) if {
	some subcommand, operand in {"bisect": "run", "submodule": "foreach"}
	git.subcommand == subcommand
	operand in git.operands
}

git_effect contains [i, "rewrites the remote's history (a force push; push without forcing, or pull and merge first)"] if {
	some i, git in git_lines
	git.subcommand == "push"
	git_force_push(git)
}

git_effect contains [i, "deletes branches or tags on the remote"] if {
	some i, git in git_lines
	git.subcommand == "push"
	git_remote_delete(git)
}

git_effect contains [i, "throws away uncommitted changes for good (commit or stash them first, or use `git reset --soft`)"] if {
	some i, git in git_lines
	git.subcommand == "reset"
	some long in {"--hard", "--keep", "--merge"}
	has_long_flag(git.options, long)
}

git_effect contains [i, "deletes untracked files for good (run `git clean -n` first to see what it would delete)"] if {
	some i, git in git_lines
	git.subcommand == "clean"
	has_short_flag(git.options, "f")
	not has_short_flag(git.options, "n")
}

git_effect contains [i, "deletes a branch whether or not it was merged"] if {
	some i, git in git_lines
	git.subcommand == "branch"
	git_force_branch_delete(git)
}

git_effect contains [i, "throws away uncommitted changes in the work tree"] if {
	some i, git in git_lines
	git.subcommand in {"checkout", "switch"}
	git_forced(git)
}

git_effect contains [i, "throws away uncommitted changes in the work tree"] if {
	some i, git in git_lines
	git.subcommand == "restore"
	git_restores_work_tree(git)
}

# restore puts back the work tree unless told the index alone (`--staged` without `--worktree`).
git_restores_work_tree(git) if {
	not has_long_flag(git.options, "--staged")
	not "-S" in git.options
}

git_restores_work_tree(git) if "-W" in git.options

git_restores_work_tree(git) if has_long_flag(git.options, "--worktree")

# `git checkout <tree-ish> <path>...` (no `--` needed) overwrites those files; a new branch's
# name is its option's value (`-b=x`), its start point the only operand.
git_effect contains [i, "throws away uncommitted changes in the work tree"] if {
	some i, git in git_lines
	git.subcommand == "checkout"
	count(git.operands) > 1
}

git_effect contains [i, "moves or overwrites a branch by force (the commits it held are then only in the reflog)"] if {
	some i, git in git_lines
	git.subcommand == "branch"
	git_branch_overwrite(git)
}

git_branch_overwrite(git) if {
	some opt in git.options
	opt in {"-M", "-C"}
}

# `checkout -B`/`switch -C`: create the branch, or reset it if it exists.
git_effect contains [i, "moves or overwrites a branch by force (the commits it held are then only in the reflog)"] if {
	some i, git in git_lines
	git.subcommand in {"checkout", "switch"}
	some opt in git.options
	regex.match(`^(-B|-C|--force-create)(=|$)`, opt)
}

git_branch_overwrite(git) if {
	git_forced(git)
	not git_deletes_branch(git)
}

# `clone -c key=value` writes configuration into the new repository, as `git config` would.
git_effect contains [i, "writes configuration into the repository it makes (clone -c/--config), where git takes programs to run"] if {
	some i, git in git_lines
	git.subcommand == "clone"
	git_clone_configures(git)
}

git_clone_configures(git) if "-c" in git.options

git_clone_configures(git) if has_long_flag(git.options, "--config")

git_effect contains [i, "deletes stashed changes for good"] if {
	some i, git in git_lines
	git.subcommand == "stash"
	count(git.operands) > 0
	git.operands[0] in {"drop", "clear"}
}

git_effect contains [i, "rewrites the repository's history"] if {
	some i, git in git_lines
	git.subcommand in {"filter-branch", "filter-repo", "replace"}
}

git_effect contains [i, "deletes history the reflog kept for recovery"] if {
	some i, git in git_lines
	git.subcommand == "reflog"
	count(git.operands) > 0
	git.operands[0] in {"expire", "delete"}
}

git_effect contains [i, "deletes or moves a ref directly (what it pointed to is then only in the reflog)"] if {
	some i, git in git_lines
	git.subcommand == "update-ref"
}

git_effect contains [i, "prunes unreachable objects at once, so nothing lost can be recovered"] if {
	some i, git in git_lines
	git.subcommand in {"gc", "prune"}
	some opt in git.options
	regex.match(`^--prune(=(now|all))?$|^--expire(=now)?$`, opt)
}

# `git prune` itself keeps no grace period (gc's two weeks are gc's): every unreachable object
# goes unless it only shows what it would do.
git_effect contains [i, "prunes unreachable objects at once, so nothing lost can be recovered"] if {
	some i, git in git_lines
	git.subcommand == "prune"
	not has_short_flag(git.options, "n")
}

git_effect contains [i, "deletes tags"] if {
	some i, git in git_lines
	git.subcommand == "tag"
	some opt in git.options
	opt in {"-d", "--delete"}
}

has_git_facts(cmd) if is_object(cmd.git)

# The git facts of each simple command that has them, by index.
git_lines[i] := cmd.git if {
	some i, cmd in simple_commands
	is_object(cmd.git)
}

git_effect contains [i, sprintf("changes git's configuration (%s), where git takes programs to run, what to push and what to check", [key])] if {
	some i, git in git_lines
	git.subcommand == "config"
	key := git_config_write(git)
	not git_config_harmless(key)
}

git_effect contains [i, "throws away uncommitted changes in the work tree"] if {
	some i, git in git_lines
	git.subcommand in {"checkout", "switch"}
	"--" in git.args
}

git_effect contains [i, "throws away uncommitted changes in the work tree"] if {
	some i, git in git_lines
	git.subcommand == "checkout"
	"." in git.operands
}

git_effect contains [i, "deletes tracked files with their uncommitted changes"] if {
	some i, git in git_lines
	git.subcommand == "rm"
	not has_long_flag(git.options, "--cached")
	git_forced(git)
}

git_effect contains [i, "deletes tracked files of the whole tree"] if {
	some i, git in git_lines
	git.subcommand == "rm"
	not has_long_flag(git.options, "--cached")
	has_short_flag(git.options, "r")
	some target in git.operands
	whole_tree_pathspec(target)
}

# A pathspec that may be the whole tree (or more than the names it shows): `.`, `./`, `..`, a
# glob, magic (`:/`, `:!x`), an absolute path.
whole_tree_pathspec(target) if regex.match(`^(\.+/*)+$`, target)

whole_tree_pathspec(target) if regex.match(`[*?\[]`, target)

whole_tree_pathspec(target) if startswith(target, ":")

whole_tree_pathspec(target) if startswith(target, "/")

whole_tree_pathspec(target) if regex.match(`(^|/)\.\.(/|$)`, target)

# git working in its own directory (`git -C .git/hooks apply`), or applying patches to paths
# it would otherwise refuse (`--unsafe-paths`) or below a directory of the patch's choosing.
git_effect contains [i, "works inside git's own directory, where it keeps its hooks and configuration"] if {
	some i, git in git_lines
	in_git_directory(git.directory)
}

# The files a patch names may be git's own (attacker round 88: `git apply <<EOF` creating
# .gitattributes), as with `patch`; `--check`, `--stat`, `--numstat` and `--summary` only read.
git_effect contains [i, "writes the files a patch names, which may be git's own (its hooks and configuration)"] if {
	some i, git in git_lines
	git.subcommand in {"apply", "am"}
	not only_reads_patch(git)
}

only_reads_patch(git) if {
	git.subcommand == "apply"
	some long in {"--check", "--stat", "--numstat", "--summary"}
	has_long_flag(git.options, long)
	not has_long_flag(git.options, "--apply")
}

git_effect contains [i, "applies a patch outside the work tree's checks (--unsafe-paths, --directory)"] if {
	some i, git in git_lines
	git.subcommand in {"apply", "am"}
	some long in {"--unsafe-paths", "--directory"}
	has_long_flag(git.options, long)
}

# Options that name a file git writes its output to (`git log --output=.git/config`).
git_effect contains [i, "writes its output to a file an option names (--output, --output-directory, -o)"] if {
	some i, git in git_lines
	names_output_file(git)
}

names_output_file(git) if {
	some long in {"--output", "--output-directory"}
	has_long_flag(git.options, long)
}

names_output_file(git) if {
	git.subcommand in {"format-patch", "archive"}
	has_short_flag(git.options, "o")
}

# `git config --file F` writes a file of its choosing.
git_effect contains [i, "writes configuration to a file an option names (--file, -f)"] if {
	some i, git in git_lines
	git.subcommand == "config"
	some opt in git.options
	regex.match(`^(--file|--fil|--fi|-f)(=|$)|^-[A-Za-z]*f`, opt)
}

# The key a `git config` line sets (undefined when it only reads): `git config KEY VALUE`,
# `git config set KEY VALUE`, `--add`, `--replace-all`, `--unset`, `--edit`, ...
git_config_write(git) := key if {
	count(git.operands) >= 2
	not git.operands[0] in {"get", "list", "get-regexp", "get-all"}
	key := git_config_key(git)
} else := "(the whole file)" if {
	some opt in git.options
	opt in {"-e", "--edit"}
} else := key if {
	some opt in git.options
	regex.match(`^--(add|replace-all|unset|unset-all|rename-section|remove-section)`, opt)
	key := git_config_key(git)
}

git_config_key(git) := git.operands[1] if {
	git.operands[0] in {"set", "unset"}
	count(git.operands) >= 2
} else := git.operands[0] if count(git.operands) > 0

else := "(unknown)"

git_config_harmless(key) if {
	lower(key) in {"user.name", "user.email", "core.autocrlf", "init.defaultbranch", "pull.rebase", "color.ui", "commit.gpgsign", "advice.detachedhead"}
}

git_force_push(git) if has_short_flag(git.options, "f")

git_force_push(git) if {
	some long in {"--force", "--force-with-lease", "--force-if-includes", "--mirror"}
	has_long_flag(git.options, long)
}

git_force_push(git) if {
	some refspec in git.operands
	startswith(refspec, "+")
}

git_remote_delete(git) if has_short_flag(git.options, "d")

git_remote_delete(git) if {
	some long in {"--delete", "--prune", "--mirror"}
	has_long_flag(git.options, long)
}

git_remote_delete(git) if {
	some refspec in git.operands
	startswith(refspec, ":")
}

git_force_branch_delete(git) if "-D" in git.options

git_force_branch_delete(git) if {
	git_deletes_branch(git)
	git_forced(git)
}

git_deletes_branch(git) if "-d" in git.options

git_deletes_branch(git) if has_long_flag(git.options, "--delete")

git_forced(git) if "-f" in git.options

git_forced(git) if has_long_flag(git.options, "--force")

git_forced(git) if has_long_flag(git.options, "--discard-changes")

# --- Permissions -------------------------------------------------------------------------------

# Options that take a value, per program, read as getopt reads them: a cluster's first such
# letter takes the rest of the word or the next word; a long option (any prefix getopt takes,
# down to the length given) takes `=value` or the next word. A value is never an option and
# never ends the options (`install -S -- -d -m 777 .`: `--` is -S's suffix; attacker round 184).
valued_options := {
	"chmod": {"short": "", "long": {["--reference", 5]}},
	"mkdir": {"short": "m", "long": {["--mode", 3]}},
	"mkfifo": {"short": "m", "long": {["--mode", 3]}},
	"mknod": {"short": "m", "long": {["--mode", 3]}},
	"install": {"short": "gmoSt", "long": {
		["--mode", 3], ["--owner", 3], ["--group", 3], ["--suffix", 4],
		["--strip-program", 8], ["--target-directory", 3],
	}},
	"cp": {"short": "St", "long": {["--suffix", 4], ["--target-directory", 3], ["--no-preserve", 6], ["--sparse", 4]}},
	"mv": {"short": "St", "long": {["--suffix", 4], ["--target-directory", 3]}},
	"rsync": {"short": "eBfTM", "long": {["--rsh", 4], ["--filter", 4], ["--temp-dir", 4], ["--chmod", 4]}},
}

# words[i] is the value of the option before it.
value_at(program, texts, i) if {
	i > 0
	takes_value(program, texts[i - 1])
}

takes_value(program, text) if {
	letters := valued_options[program].short
	letters != ""
	regex.match(sprintf(`^-[^-%s]*[%s]$`, [letters, letters]), text)
}

takes_value(program, text) if {
	some [name, _] in valued_options[program].long
	long_option_of(program, text, name)
}

# `text` is a prefix getopt takes for the long option `long` of `program`, without a value.
long_option_of(program, text, long) if {
	some [name, least] in valued_options[program].long
	name == long
	not contains(text, "=")
	count(text) >= least
	startswith(long, text)
}

# The value attached to the long option `long` of `program` (`--mode=777`, `--mo=777`).
attached_long_value(program, text, long) := substring(text, count(key) + 1, -1) if {
	some [name, least] in valued_options[program].long
	name == long
	key := split(text, "=")[0]
	contains(text, "=")
	count(key) >= least
	startswith(long, key)
}

getopt_end(program, texts) := min(array.concat([i | some i, text in texts; text == "--"; not value_at(program, texts, i)], [count(texts)]))

getopt_option_at(program, texts, i) if {
	i < getopt_end(program, texts)
	option_word(texts[i])
	not value_at(program, texts, i)
}

getopt_operand_at(program, texts, i) if {
	i < getopt_end(program, texts)
	not option_word(texts[i])
	not value_at(program, texts, i)
}

getopt_operand_at(program, texts, i) if i > getopt_end(program, texts)

getopt_operands(cmd) := [word |
	program := basename(cmd.name)
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, word in words
	getopt_operand_at(program, texts, i)
	word.text != ""
]

# A short flag of `program` given in a cluster before any letter that takes a value.
getopt_flag(cmd, letter) if {
	program := basename(cmd.name)
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, text in texts
	getopt_option_at(program, texts, i)
	not startswith(text, "--")
	regex.match(sprintf(`^-[^-%s]*[%s]`, [valued_options[program].short, letter]), text)
}

# A long flag, by any prefix of at least `least` characters.
getopt_long_flag(cmd, name, least) if {
	program := basename(cmd.name)
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, text in texts
	getopt_option_at(program, texts, i)
	key := split(text, "=")[0]
	count(key) >= least
	startswith(name, key)
}

# The value of option `letter` or of the long option `long` in words[i]: the next word, the rest
# of a cluster (`-mM`, `-DmM`) or `--long=V`.
option_value_word(program, words, i, letter, long) := words[i + 1] if {
	regex.match(sprintf(`^-[^-%s]*%s$`, [valued_options[program].short, letter]), words[i].text)
} else := words[i + 1] if {
	long_option_of(program, words[i].text, long)
} else := {"text": value, "dynamic": words[i].dynamic, "path": ""} if {
	found := regex.find_all_string_submatch_n(sprintf(`^-[^-%s]*%s(.+)$`, [valued_options[program].short, letter]), words[i].text, 1)
	count(found) == 1
	value := found[0][1]
} else := {"text": value, "dynamic": words[i].dynamic, "path": ""} if {
	value := attached_long_value(program, words[i].text, long)
}

# chmod's modes: each option word that is a mode (GNU chmod takes `-w`, `-t,o+w`, `-x,o+w` as
# modes: attacker round 184), --reference (another file's mode, any prefix: `--ref`), else its
# first operand.
chmod_modes(cmd) := modes if {
	modes := [mode |
		words := cmd_words(cmd)
		texts := [w.text | some w in words]
		some i, word in words
		getopt_option_at("chmod", texts, i)
		mode := chmod_option_mode(word)
	]
	count(modes) > 0
} else := [operand] if {
	operand := getopt_operands(cmd)[0]
}

chmod_option_mode(word) := {"text": "--reference", "dynamic": false, "path": ""} if {
	startswith(word.text, "--")
	startswith("--reference", split(word.text, "=")[0])
	count(split(word.text, "=")[0]) >= 5
} else := word if regex.match("^-[rwxXstugoa,+=0-7]", word.text)

# What chmod changes: its operands but the mode, and the mode itself when it is only known at
# run time (`chmod {777,.}`, `chmod "$@"`, `chmod $X` may hold targets too: round 184).
chmod_targets(cmd) := array.concat(rest, dynamic_mode) if {
	operands := getopt_operands(cmd)
	modes := chmod_modes(cmd)
	rest := [word |
		some i, word in operands
		not mode_operand_at(modes, operands, i)
	]
	dynamic_mode := [mode | some mode in modes; mode.dynamic == true]
}

mode_operand_at(modes, operands, 0) if {
	count(operands) > 0
	modes == [operands[0]]
}

# Write for others: a number whose last digit has the 2 bit (any number of digits: `0000777`,
# also after an operator with no who: `=777`, `+777`), or a symbolic clause giving w to o or a
# (or to all with `=` and no who: with `+` the umask may still keep it out); a dynamic mode
# could be anything, and so could another file's (--reference).
opens_to_everyone(mode) if mode.dynamic == true

opens_to_everyone(mode) if startswith(mode.text, "--reference")

opens_to_everyone(mode) if octal_gives_others_write(mode.text)

# A clause without a who may set a number after other operations (`+r=777`, `=+777`, `-w+777`:
# attacker round 185): each number after `+` or `=`.
opens_to_everyone(mode) if {
	some clause in split(mode.text, ",")
	regex.match(`^[+=-]`, clause)
	some number in regex.find_all_string_submatch_n(`[+=]([0-7]+)`, clause, -1)
	octal_gives_others_write(number[1])
}

# A clause for others (o, a, or no who) that adds or sets w, or copies another class's bits
# (o=u, o+g), anywhere among its operations (o-x+w).
opens_to_everyone(mode) if {
	some clause in split(mode.text, ",")
	regex.match(`^[ugoa]*[oa][ugoa]*([+=-][rwxXstugo]*)*[+=][rwxXst]*w`, clause)
}

opens_to_everyone(mode) if {
	some clause in split(mode.text, ",")
	regex.match(`^[ugoa]*[oa][ugoa]*([+=-][rwxXstugo]*)*[+=][ug]`, clause)
}

opens_to_everyone(mode) if {
	some clause in split(mode.text, ",")
	regex.match(`^([+=-][rwxXst]*)*=[rwxXst]*w`, clause)
}

octal_gives_others_write(text) if {
	regex.match(`^[0-7]+$`, text)
	to_number(substring(text, count(text) - 1, 1)) in {2, 3, 6, 7}
}

# How far it reaches: recursively (also over what xargs or find -exec hand it), or onto a
# risky target.
chmod_reach(cmd) := "every name xargs or find hands it" if {
	count(fed_operands(cmd)) > 0
} else := what if {
	has_short_flag(options(command_args(cmd)), "R")
	targets := [w.text | some w in chmod_targets(cmd)]
	what := sprintf("everything under %s", [concat(" ", targets)])
} else := concat(" and ", risks) if {
	# Every risky target named, in one value however many there are.
	risks := [risk |
		some target in chmod_targets(cmd)
		risk := risky_target(cmd, target)
	]
	count(risks) > 0
}

# Each mode an option of mkdir, mkfifo, mknod or install gives: `-m M`, `-m` ending a cluster
# (`-pm M`), `-mM`, `-DmM`, `--mode=M`, `--mode M` or a prefix (`--mo M`). For install, a word
# only known at run time where options are may hold one (`install -d {-m777,.}`: round 184);
# mkdir, mkfifo and mknod only make new names, which the policy lets be made open inside the
# workspace, so theirs are not followed (`mkdir -p "$D"` is not asked about).
made_modes(cmd) := [mode |
	program := basename(cmd.name)
	program in mode_makers
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, word in words
	mode := made_mode_at(program, words, texts, i)
]

mode_makers := {"mkdir", "mkfifo", "mknod", "install"}

made_mode_at(program, words, texts, i) := option_value_word(program, words, i, "m", "--mode") if {
	getopt_option_at(program, texts, i)
} else := words[i] if {
	program == "install"
	words[i].dynamic == true
	i < getopt_end(program, texts)
	not value_at(program, texts, i)
}

# mkdir starts a symbolic mode from a=rwx, mknod and mkfifo from a=rw: others may write unless
# the last clause names them (o or a) and takes their w away; a clause without a who spares
# what the umask holds (others' w, as a rule). install starts from nothing, as chmod does.
made_opens_to_everyone(_, mode) if opens_to_everyone(mode)

made_opens_to_everyone(program, mode) if {
	program in {"mkdir", "mkfifo", "mknod"}
	not regex.match(`^[0-7]+$`, mode.text)
	not closes_to_others(mode.text)
}

closes_to_others(text) if {
	clauses := split(text, ",")
	regex.match(`^[ugoa]*[oa][ugoa]*([+=-][rwxXstugo]*)*(=[rxXst]*|-[rwxXst]*w[rwxXst]*)$`, clauses[count(clauses) - 1])
}

# What a made mode reaches: the operands; for install making files only the destination (the
# last operand, or -t's folder); what xargs or find hands over.
made_reach(cmd) := "every name xargs or find hands it" if {
	count(fed_operands(cmd)) > 0
} else := concat(" and ", risks) if {
	risks := [risk |
		some target in made_targets(cmd)
		risk := made_risk(cmd, target)
	]
	count(risks) > 0
}

# install without -d makes files in its destination when that is a folder: the workspace's
# root or the folder the command runs in is then no risk (a file made there is inside).
made_risk(cmd, target) := risk if {
	installs_files(cmd)
	risk := risky_target(cmd, target)
	not lands_inside_workspace(target)
} else := risky_target(cmd, target) if not installs_files(cmd)

# install making files, not folders: no -d, and no word only known at run time that may be -d.
installs_files(cmd) if {
	basename(cmd.name) == "install"
	not getopt_flag(cmd, "d")
	not getopt_long_flag(cmd, "--directory", 4)
	not dynamic_option_word(cmd)
}

dynamic_option_word(cmd) if {
	program := basename(cmd.name)
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, word in words
	word.dynamic == true
	i < getopt_end(program, texts)
	not value_at(program, texts, i)
}

lands_inside_workspace(word) if {
	word.dynamic == false
	not inside_git_directory(word)
	word.path == trim_right(workspace, "/")
}

lands_inside_workspace(word) if {
	word.dynamic == false
	not inside_git_directory(word)
	inside_workspace(word.path)
}

made_targets(cmd) := folders if {
	installs_files(cmd)
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	folders := [folder |
		some i, _ in words
		getopt_option_at("install", texts, i)
		folder := option_value_word("install", words, i, "t", "--target-directory")
	]
	count(folders) > 0
} else := [last] if {
	installs_files(cmd)
	targets := getopt_operands(cmd)
	count(targets) > 0
	last := targets[count(targets) - 1]
} else := getopt_operands(cmd)

# A umask that leaves others' write: a number without the 2 bit in its last digit (bash takes
# any number of digits: `umask 00000`), a symbolic one giving w to others (`o+w`, `a=rwx`,
# `+w`), or one only known when it runs.
mask_opens_to_everyone(mask) if mask.dynamic == true

mask_opens_to_everyone(mask) if {
	regex.match(`^[0-7]+$`, mask.text)
	to_number(substring(mask.text, count(mask.text) - 1, 1)) in {0, 1, 4, 5}
}

mask_opens_to_everyone(mask) if {
	not regex.match(`^[0-7]+$`, mask.text)
	opens_to_everyone(mask)
}

mask_opens_to_everyone(mask) if {
	some clause in split(mask.text, ",")
	regex.match(`^([+=-][rwxXst]*)*\+[rwxXst]*w`, clause)
}

# Where a copy that keeps modes (`cp -a`, `-p`, `--preserve=mode`; `rsync -a`, `-p`, `--chmod`)
# or a move (which always keeps them) puts a folder's mode on a folder that already exists:
# - the destination itself, when it copies a folder's contents onto it (`cp -a /var/tmp/. .`,
#   `rsync -a /var/tmp/ .`, a source only known when it runs) or with -T (`mv -T ../n ../app`);
#   every operand after the first may be the destination (an option's value the table does
#   not know may stand last: `cp -a t/. . --sparse always`);
# - the folder of the source's name inside the destination (`cp -a t/app ..` over the folder
#   the command runs in, `cp -a t/ws /srv` over the workspace).
mode_landings(cmd) := {what |
	keeps_modes(cmd)
	lands_on_destination(cmd)
	some target in copy_destinations(cmd)
	what := landing_risk(cmd, target)
} | {what |
	keeps_modes(cmd)
	some source in copy_sources(cmd)
	source.dynamic == false
	name := regex.replace(trim_right(source.text, "/"), `^.*/`, "")
	not name in {"", ".", ".."}
	some target in copy_destinations(cmd)
	what := named_landing(cmd, target, name)
}

# Where the source's name lands in the destination; a destination whose place is not known
# here (a name only known at run time, `~+/..`, a link the line made, after an uncertain `cd`,
# an attached `-t..`) may hold any folder (round 186).
named_landing(cmd, target, name) := risky_target(cmd, target) if {
	target.path == ""
} else := important_folder(cmd, concat("/", [trim_right(target.path, "/"), name]))

keeps_modes(cmd) if copies_modes(cmd)

keeps_modes(cmd) if basename(cmd.name) == "mv"

copies_modes(cmd) if {
	basename(cmd.name) in {"cp", "rsync"}
	getopt_flag(cmd, "ap")
}

copies_modes(cmd) if {
	basename(cmd.name) in {"cp", "rsync"}
	getopt_long_flag(cmd, "--archive", 4)
}

copies_modes(cmd) if {
	basename(cmd.name) == "rsync"
	some name in ["--perms", "--chmod"]
	getopt_long_flag(cmd, name, 4)
}

# cp's --preserve without a list keeps the mode; with one, an item naming mode or all, in any
# abbreviation cp takes (`--preserve=m`, `=al`: round 185).
copies_modes(cmd) if {
	basename(cmd.name) == "cp"
	some word in cmd_words(cmd)
	key := split(word.text, "=")[0]
	count(key) >= 4
	startswith("--preserve", key)
	preserves_mode(word.text)
}

preserves_mode(text) if not contains(text, "=")

preserves_mode(text) if {
	some item in split(substring(text, indexof(text, "=") + 1, -1), ",")
	item != ""
	some kept in ["mode", "all"]
	startswith(kept, item)
}

lands_on_destination(cmd) if {
	basename(cmd.name) in {"cp", "mv"}
	getopt_flag(cmd, "T")
}

lands_on_destination(cmd) if {
	basename(cmd.name) in {"cp", "mv"}
	getopt_long_flag(cmd, "--no-target-directory", 6)
}

lands_on_destination(cmd) if {
	basename(cmd.name) in {"cp", "rsync"}
	some source in copy_sources(cmd)
	contents_source(basename(cmd.name), source)
}

contents_source(_, word) if word.dynamic == true

# A folder's contents: a last component `.` or `..`, with or without slashes after it (`t/./`,
# `./`, `t/x/..`: round 186).
contents_source(_, word) if regex.match(`(^|/)\.\.?/*$`, word.text)

contents_source("rsync", word) if endswith(word.text, "/")

# The destinations: -t's folder, or each operand after the first.
copy_destinations(cmd) := [folder] if {
	folder := copy_target_folder(cmd)
} else := array.slice(getopt_operands(cmd), 1, count(getopt_operands(cmd)))

# cp's and mv's -t (rsync's -t keeps times).
copy_target_folder(cmd) := folder if {
	program := basename(cmd.name)
	program in {"cp", "mv"}
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	some i, _ in words
	getopt_option_at(program, texts, i)
	folder := option_value_word(program, words, i, "t", "--target-directory")
}

# The sources: every operand with -t, else all but the last.
copy_sources(cmd) := getopt_operands(cmd) if {
	copy_target_folder(cmd)
} else := array.slice(getopt_operands(cmd), 0, count(getopt_operands(cmd)) - 1)

# A destination that may be a folder that matters: one only known when it runs or relative to
# an uncertain folder, or one that matters (a path outside the workspace is the sandbox's own).
landing_risk(cmd, target) := risky_target(cmd, target) if {
	target.path == ""
} else := important_folder(cmd, target.path)

# --- Program text the policy cannot read ------------------------------------------------------

# `source` / `.` reading code from a stream, a substitution or a path known only at run time.
opaque_code contains [i, sprintf("%s reads its commands from `%s`", [cmd.name, word.text])] if {
	some i, cmd in simple_commands
	cmd.name in {"source", "."}
	some word in operand_words(cmd)
	opaque_source(word)
}

opaque_code contains [i, sprintf("%s reads its program from a process substitution", [cmd.name])] if {
	some i, cmd in simple_commands
	basename(cmd.name) in interpreters
	not basename(cmd.name) in shells
	some word in command_args(cmd)
	startswith(word, "<(")
}

# An interpreter given its program on the command line (python -c, perl -e, node -e, ...)
# or on its input (a heredoc or here-string: `python3 <<EOF`) whose text calls what deletes
# files or runs other programs (data.tooljail.commands.code_effects): the policy cannot follow
# such code, so a person reads it.
opaque_code contains [i, sprintf("%s code that can %s", [basename(cmd.name), effect])] if {
	some i, cmd in simple_commands
	inline_code_runner(basename(cmd.name))
	some code in inline_code(cmd)
	some effect, pattern in code_effects
	regex.match(pattern, code)
}

# Words that may be program text: the word of a code option and the one after it, as the code
# may be attached (`-cCODE`, `--eval=CODE`) or follow; the option may end a cluster (`python3
# -Ic`, `perl -le`: attacker round 88). Any text fed on the input, whether or not the program
# reads its program there (`python3 $S <<EOF` with S=/dev/stdin).
inline_code(cmd) := array.concat(code, [lower(text) | some text in code]) if {
	# PHP's function names ignore case (`SYSTEM("id")`: attacker round 190).
	regex.match(`^php`, basename(cmd.name))
	code := code_texts(cmd)
} else := code_texts(cmd)

code_texts(cmd) := array.concat(
	[text |
		some word in array.concat(code_words(cmd), module_code_words(cmd))
		some text in code_forms(word)
	],
	array.concat(object.get(cmd, "stdin_texts", []), object.get(cmd, "stdin_read_as", [])),
)

# Code with an escape that may stand for a letter and that the daemon could not read: a
# `\N{...}` under a name only Perl's charnames knows, Perl's case escapes (`"\LRMTREE"`), `\c2`
# (attacker round 190). The policy cannot tell what name it spells.
opaque_code contains [i, sprintf("%s code with escapes the policy cannot read (such as \\N{...} under a name Unicode does not give, or Perl's \\L, \\l, \\u, \\c), which may spell other names", [basename(cmd.name)])] if {
	some i, cmd in simple_commands
	inline_code_runner(basename(cmd.name))
	unread_escape(cmd)
}

unread_escape(cmd) if {
	some word in array.concat(code_words(cmd), module_code_words(cmd))
	object.get(word, "unread_escape", false) == true
}

unread_escape(cmd) if object.get(cmd, "stdin_unread_escape", false) == true

# A word of code as written, and as the interpreter may read it where that differs: the daemon
# decodes escapes and applies NFKC (`read_as`), as Python reads `ｃhmod` as `chmod` and
# JavaScript `\u0063hmod` (attacker round 185). Text in other scripts (`print("é")`) is read
# as any other.
code_forms(word) := {word.text, word.read_as} if {
	object.get(word, "read_as", "") != ""
} else := {word.text}

# Modules of python's that run their arguments as code (`python3 -m timeit -s SETUP STMT`,
# `-m pdb -c '!...'`: attacker round 90).
module_code_words(cmd) := cmd_words(cmd) if {
	python_module(cmd) in {"timeit", "pdb", "cProfile", "profile", "trace"}
} else := []

# A word only known when it runs may be a code option too (`python3 $F "$C"` with F=-c): the
# word after it is then read as code.
code_words(cmd) := [word |
	words := cmd_words(cmd)
	some j, option in words
	some word in code_words_at(basename(cmd.name), words, j, option)
]

code_words_at(name, words, j, option) := array.slice(words, j, j + 2) if {
	code_option(name, option.text)
} else := array.slice(words, j + 1, j + 2) if {
	option.dynamic == true
} else := []

# Program text only known when it runs: a variable, a substitution (`C='...'; python3 -c "$C"`,
# `python3 <<< "$C"`: attacker round 89), which the policy cannot read.
opaque_code contains [i, sprintf("%s program text only known when it runs", [basename(cmd.name)])] if {
	some i, cmd in simple_commands
	inline_code_runner(basename(cmd.name))
	some word in code_words(cmd)
	word.dynamic == true
}

opaque_code contains [i, sprintf("%s program text only known when it runs, on its input", [basename(cmd.name)])] if {
	some i, cmd in simple_commands
	inline_code_runner(basename(cmd.name))
	object.get(cmd, "stdin_dynamic", false) == true
}

code_option(name, flag) if regex.match(sprintf(`^-[A-Za-z0-9]*[%s]`, [code_letters(name)]), flag)

code_option(_, flag) if regex.match(`^--(eval|exec|print|run)(=|$)`, flag)

code_option(_, "eval") # deno eval CODE

code_letters(name) := "eEMm" if {
	# -M and -m: `-Mstrict;unlink ...` is `use strict;unlink ...;` (attacker round 90)
	name == "perl"
} else := "ep" if {
	name in {"node", "nodejs", "bun", "deno"}
} else := "rBRE" if {
	name == "php"
} else := "ce"

# A sed or awk program only known when it runs (`S='1e rm ...'; sed "$S"`, `gawk -e "$P"`, `awk
# -f "$F"`): what it writes or runs cannot be read (attacker round 155).
opaque_code contains [i, sprintf("%s program text only known when it runs", [basename(cmd.name)])] if {
	some i, cmd in simple_commands
	basename(cmd.name) in stream_programs
	some word in stream_program_words(cmd)
	word.dynamic == true
}

# What of a sed or awk command may be its program: every word before its first operand known
# as written (a word only known when it runs may be the program, or -e, -f), but the values
# of options that take data (-v, -F, sed's -l); and the value of a program option (-e, -f,
# --expression, --file, gawk's --source, --include, --exec, -l/--load) wherever it stands:
# GNU's tools take options after operands too.
stream_program_words(cmd) := array.concat(leading, valued) if {
	name := basename(cmd.name)
	words := cmd_words(cmd)
	operands := [j | some j, _ in words; stream_static_operand(name, words, j)]
	first := min(array.concat(operands, [count(words)]))
	leading := [w | some j, w in array.slice(words, 0, first); not stream_data_value(name, words, j)]
	valued := [w |
		some j, option in words
		stream_program_option(name, option.text)
		some w in array.slice(words, j, j + 2)
	]
}

# The first operand known as written: the program, unless -e or -f gave it.
stream_first_operand(cmd) := [words[min(operands)]] if {
	words := cmd_words(cmd)
	operands := [j | some j, _ in words; stream_static_operand(basename(cmd.name), words, j)]
	count(operands) > 0
} else := []

stream_static_operand(name, words, j) if {
	words[j].dynamic == false
	not startswith(words[j].text, "-")
	not stream_data_value(name, words, j)
}

stream_data_value(name, words, j) if words[j - 1].text in stream_data_options[stream_family(name)]

stream_data_value(name, words, j) if {
	some option in stream_data_options[stream_family(name)]
	regex.match(`^-[A-Za-z]$`, option)
	startswith(words[j].text, option)
	count(words[j].text) > 2
}

stream_data_value(name, words, j) if {
	some option in stream_data_options[stream_family(name)]
	startswith(option, "--")
	startswith(words[j].text, concat("", [option, "="]))
}

stream_data_options := {
	"sed": {"-l", "--line-length"},
	"awk": {"-v", "-F", "--assign", "--field-separator"},
}

stream_family(name) := "sed" if name in {"sed", "gsed"}

else := "awk"

stream_programs := {"sed", "gsed", "awk", "gawk", "mawk", "nawk", "busybox"}

stream_program_option(name, text) if {
	stream_family(name) == "sed"
	regex.match(`^-[A-Za-z]*[ef]|^--(e|fi)`, text)
}

stream_program_option(name, text) if {
	stream_family(name) == "awk"
	regex.match(`^-[A-Za-z]*[efiEl]|^--(so|fi|inc|e|lo)`, text)
}

# A shell's script that is a descriptor (`bash /dev/fd/3 3<<EOF`, `/proc/self/fd/4`), or a name
# only known when it runs where the shell is fed a heredoc, a here-string or a pipe (`bash $S
# <<< ...` with S=/dev/stdin): the commands it reads are not parsed (attacker round 88). Its own
# standard input fed a heredoc is parsed instead (`bash /dev/stdin <<EOF`).
opaque_code contains [i, sprintf("%s reads its commands from `%s`", [cmd.name, word.text])] if {
	some i, cmd in simple_commands
	basename(cmd.name) in shells
	not has_short_flag(options(command_args(cmd)), "c")
	word := shell_script(cmd)
	opaque_script(cmd, word)
}

# The script a shell runs: its first word that is neither an option nor an option's value
# (`bash -o pipefail x.sh`); the words after it are the script's own.
shell_script(cmd) := words[min(scripts)] if {
	words := cmd_words(cmd)
	texts := [w.text | some w in words]
	scripts := [j | some j, _ in texts; not shell_option_at(texts, j)]
	count(scripts) > 0
}

shell_option_at(texts, j) if regex.match(`^[-+]`, texts[j])

shell_option_at(texts, j) if takes_a_value("bash", texts[j - 1])

opaque_script(_, word) if {
	regex.match(`^/(dev|proc)/`, object.get(word, "path", ""))
	not stream_word(word.text)
	not word.text in harmless_devices
	not object.get(word, "path", "") in harmless_devices
}

opaque_script(_, word) if {
	regex.match(`^([0-9]+|stdin)$`, word.text)
	object.get(word, "path", "") == ""
}

opaque_script(_, word) if {
	descriptor_path(word.text)
	not stream_word(word.text)
	not word.text in harmless_devices
}

opaque_script(cmd, word) if {
	word.dynamic == true
	fed_input(cmd)
}

fed_input(cmd) if count(object.get(cmd, "stdin_texts", [])) > 0

fed_input(cmd) if fed_by_pipe(cmd)

opaque_source(word) if word.dynamic == true

opaque_source(word) if word.text in {"-", "/dev/stdin", "/dev/fd/0"}

opaque_source(word) if startswith(word.text, "<(")

# A descriptor however its path is spelt (`. /proc/self/fd/0 <<< ...`, `. /dev/fd/3 3< <(...)`:
# attacker round 193).
opaque_source(word) if descriptor_path(word.text)

# A name that leads to a descriptor from where it runs, or may (`cd /dev/fd && source 3`, a
# number or `stdin` where the folder is not known: round 194).
opaque_source(word) if regex.match(`^/(dev|proc)/`, object.get(word, "path", ""))

opaque_source(word) if {
	regex.match(`^([0-9]+|stdin)$`, word.text)
	object.get(word, "path", "") == ""
}

inline_code_runner(name) if name in {"python", "python2", "python3", "perl", "ruby", "node", "nodejs", "deno", "bun", "php", "lua", "Rscript"}

inline_code_runner(name) if regex.match(`^python3\.[0-9]+$`, name)

# An interpreter named with its version, as Debian installs them beside the plain name
# (attacker round 150 ran `perl5.36.0 -e 'system(...)'` unasked).
inline_code_runner(name) if regex.match(`^(?:python|perl|ruby|node|nodejs|php|lua|pypy|jruby)[0-9][0-9.]*(?:-[A-Za-z0-9_.-]+)?$`, name)

# Python's debugger runs a script, and its `-c` commands run Python (`!import os; ...`).
inline_code_runner(name) if regex.match(`^pdb3?(?:\.[0-9]+)?$`, name)

# "write files" takes, beyond the plain writers, what attackers wrote with (rounds 82-86):
# - an open whose mode shows a write, read to the end of the statement past nested calls
#   (`open(str(p), 'w')`), or whose mode is computed: a variable or a call (not a keyword
#   argument, and not os.open's own flags such as `os.O_RDONLY`), a quoted one joined or
#   formatted, an f-string, an escaped one (`"\167"`), an unpacked one (`open(p, *m)`),
#   pathlib's `.open('a')`;
# - os.open with numeric or variable flags, dup2 (output redirected into a file), FileIO;
# - perl's handle opened with a computed mode or a quoted `>`, `|` or `+<` one, and sysopen;
# - link calls however spelled (`os.link (`, perl's `link a, b`, hardlink_to), and node's,
#   ruby's, php's and lua's writers.
# "run other programs" includes functions found by a name built when it runs (`vars(os)[...]`).
default code_effects := {
	"write files": `\.write|pwrite|O_WRONLY|O_RDWR|O_CREAT|O_APPEND|O_TRUNC|mknod|write_text|write_bytes|writeFile|appendFile|open\([^;\n]*,\s*(mode\s*=\s*)?['"][^'"]*[wax+]|copyfile|copy2|copytree|\brename|\breplace\s*\(|symlink|\blink|fopen|File\.open|IO\.write|>\s*["']|(^|[^.\w]|\bio\.|\bcodecs\.)open\([^;\n]*,\s*(mode\s*=\s*)?[A-Za-z_][A-Za-z0-9_.]*\s*[^A-Za-z0-9_.=\s]|open\([^;\n]*,\s*(mode\s*=\s*)?['"][^'"]*['"]\s*[+%.]|open\([^;\n]*,\s*(mode\s*=\s*)?[fF][rR]?['"]|\bopen\s*\(?\s*(my\s+\$\w+|\$\w+|[A-Z][A-Z0-9_]*)\s*,\s*([^'"\s]|['"]\s*(\+[<>]|>|\||-\|))|\.open\(\s*(mode\s*=\s*)?['"][^'"]*[wax+]|\.open\(\s*(mode\s*=\s*)?[A-Za-z_][A-Za-z0-9_.]*\s*\)|open\([^)]*[,(]\s*\*|sysopen|FileIO\([^)]*,|copyFile|WriteStream|openSync\([^;\n]*,\s*[^\s)]|file_put_contents|fwrite|FileUtils|io\.output|\bfile\s*=\s*open|os\.open\([^;\n,]*,\s*([^oO0\s]|0[^,)\s]|[oO][^sS_]|os[^.]|os\.[^O]|os\.O[^_]|os\.O_[^R]|os\.O_R[^D]|O[^_]|O_[^R]|O_R[^D])|O_RDONLY\s*[|+^]|from\s+os\s+import\s+[^;\n]*(\*|\bopen\b)|import\s+os\s+as\b|sys\.modules|extract|FileHandler|\bfilename\s*=|dup2|hardlink|open\([^;\n]*,\s*(mode\s*=\s*)?['"][^'"]*\\|\$\^I|\$\{\^I\}|\$-i\b|inplace`,
	"change who may use files": `chmod|chown|setfacl|\bumask\b|xattr|acl`,
	"delete files": `rm_rf|rm_f\b|ExtUtils|rmtree|unlink|remove|rmdir|truncate|\brm\b|shutil|fs\.rm|\.rm\b|rmSync|rimraf|File\.delete|delete_file|os\.remove|\bdel\b`,
	"run other programs": `\bbreakpoint\s*\(|set_trace|/dev/+(stdin|fd\b)|/proc/+[^\s'"]*/+fd\b|chdir\s*\(?\s*["']/+(dev|proc)|system|popen|subprocess|spawn|exec|\beval\b|fork|child_process|pty|__import__|importlib|getattr|compile|\bopen3\b|backtick|Kernel|%x|qx|\bvars\s*\(|__dict__|\bglobals\s*\(|attrgetter|methodcaller|get_field|Formatter|__globals__|\boperator\b|builtins|__getattribute__|\binspect\b|ctypes|\bpickle\b|\bmarshal\b|\bsyscall\b|\bposix\b|\blocals\s*\(|\b(timeit|cProfile|profile|pdb|pydoc|pkgutil|runpy|code)\s*\.|\bimport\s+[^;\n]*\b(timeit|cProfile|profile|pdb|pydoc|pkgutil|runpy|code)\b|\bfrom\s+(timeit|cProfile|profile|pdb|pydoc|pkgutil|runpy|code)\b|Interactive(Interpreter|Console)|runsource|runcode|compile_command|resolve_name|\blocate\b|dictConfig|fileConfig|pager|_get_command_stdout|run_module|run_path|\x60|readpipe|CORE::|&\s*\{|/ee\b`,
}

code_effects := data.tooljail.commands.code_effects if is_object(data.tooljail.commands.code_effects)
