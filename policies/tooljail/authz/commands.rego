# Bash command rules.
#
# Rules on input.command, the parsed form of a Bash command line (every simple command of
# pipelines, lists, subshells, substitutions and `bash -c` strings, wrappers peeled off).
# Privilege tools are denied wherever they appear, as the program or as a wrapper; destructive
# patterns need a person's approval. The program lists live in data.json
# (data.tooljail.commands) so a team can edit them without touching Rego.
package tooljail.authz

# --- Which calls these rules read ------------------------------------------------------------

bash_tool if input.tool.name == "Bash"

command_given if object.get(input, "command", null) != null

# The command rules look at every Bash call, and at any other tool that sends a command.
command_tool if bash_tool

command_tool if command_given

command_parsed if input.command.parsed == true

command_well_formed if {
	is_object(input.command)
	is_boolean(input.command.parsed)
	is_array(input.command.simple_commands)
	every cmd in input.command.simple_commands {
		simple_command_well_formed(cmd)
	}
}

simple_command_well_formed(cmd) if {
	is_array(cmd.argv)
	count(cmd.argv) > 0
	every word in cmd.argv {
		is_string(word)
	}
	is_string(cmd.name)
	is_array(cmd.wrappers)
	every wrapper in cmd.wrappers {
		is_string(wrapper)
	}
}

# Rules iterate over this, so an ill-formed command (denied below) cannot break them.
default simple_commands := []

simple_commands := input.command.simple_commands if command_well_formed

# The text the daemon runs, for the fallback scan when the parse is missing or incomplete.
default raw_command := ""

raw_command := input.input.command if {
	is_string(input.input.command)
} else := input.command.raw if {
	is_string(input.command.raw)
}

# The parser's own sentence, ending in a full stop so the reason reads on.
default parse_error := "(no details)."

parse_error := text if {
	text := input.command.parse_error
	is_string(text)
	endswith(text, ".")
} else := concat("", [text, "."]) if {
	text := input.command.parse_error
	is_string(text)
	text != ""
}

# --- Program lists from data.json ------------------------------------------------------------

required_command_lists := ["privilege_tools", "downloaders", "interpreters"]

command_list(key) := {name | some name in data.tooljail.commands[key]; is_string(name)}

privilege_tools := command_list("privilege_tools")

downloaders := command_list("downloaders")

interpreters := command_list("interpreters")

# Interpreters that take `-s` for "read the program from standard input".
shells := {"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "rbash", "yash", "posh"}

valid_name_list(list) if {
	is_array(list)
	every name in list {
		is_string(name)
		name != ""
	}
}

# --- Deny rules ------------------------------------------------------------------------------

# Fail closed: a missing or broken list must not silently switch a rule off.
deny contains concat(" ", [
	sprintf("%s: the policy data has no valid list data.tooljail.commands.%s,", [tool_name, key]),
	"so commands cannot be checked and the call is refused;",
	"the operator must fix policies/data.json (a list of program names).",
]) if {
	command_tool
	some key in required_command_lists
	not valid_name_list(object.get(data.tooljail.commands, key, null))
}

deny contains concat(" ", [
	sprintf("%s: the daemon sent a parsed command (input.command) that is not in the expected shape,", [tool_name]),
	"so the call is refused; update the daemon or the policy so that they match.",
]) if {
	command_given
	not command_well_formed
}

deny contains concat(" ", [
	sprintf("%s: the command runs %s, which can raise privileges or reach beyond the sandbox,", [tool_name, program]),
	"and this policy never allows it, not even with an approval;",
	sprintf("leave %s out, because the command already runs in a sandbox with all the access it is given.", [program]),
]) if {
	some program in privilege_used
}

# As the program itself, wherever it appears: pipelines, substitutions, `bash -c` strings.
privilege_used contains program if {
	some cmd in simple_commands
	program := basename(cmd.name)
	program in privilege_tools
}

# As a wrapper peeled off the real program (`sudo ls`, `timeout 5 doas ls`).
privilege_used contains program if {
	some cmd in simple_commands
	some wrapper in cmd.wrappers
	program := basename(split(wrapper, " ")[0])
	program in privilege_tools
}

# Without a complete parse the raw text is also scanned word by word, so neither a parser gap
# nor a person's approval of an unparsed line can run a privilege tool. Plain words such as
# `echo su` match too; this only happens to lines the parser could not read.
privilege_used contains word if {
	command_tool
	not command_parsed
	some word in regex.split(`[^A-Za-z0-9_.+-]+`, raw_command)
	word in privilege_tools
}

# --- Ask rules: what the policy cannot check -------------------------------------------------

needs_approval contains concat(" ", [
	sprintf("%s: the daemon sent no parsed command (input.command),", [tool_name]),
	"so the policy cannot check what the command runs; a person must approve it before it runs.",
]) if {
	bash_tool
	not command_given
}

needs_approval contains concat(" ", [
	sprintf("%s: the command could not be fully parsed, so the policy cannot check what it runs.", [tool_name]),
	sprintf("The parser reports: %s", [parse_error]),
	"A person must approve it before it runs; or fix the syntax and send the command again.",
]) if {
	command_well_formed
	input.command.parsed == false
}

needs_approval contains concat(" ", [
	sprintf("%s: the program %s is only known when the command runs (it comes from an expansion),", [
		tool_name,
		cmd.name,
	]),
	"so the policy cannot check it; a person must approve it before it runs,",
	"or write the program's name out instead.",
]) if {
	some cmd in simple_commands
	dynamic_program(cmd)
}

needs_approval contains concat(" ", [
	sprintf("%s: %s reads the commands it runs from a pipe or a process substitution,", [
		tool_name,
		cmd.name,
	]),
	"so the policy cannot check them; a person must approve it before it runs,",
	"or run those commands directly instead of feeding them to a shell.",
]) if {
	not line_downloads
	some cmd in simple_commands
	program_reader(basename(cmd.name))
	reads_program_from_stream(cmd)
	fed_by_pipe(cmd)
}

# Shells, and interpreters that read a program on their input (`printf ... | python3`: attacker
# round 88).
program_reader(name) if name in shells

program_reader(name) if inline_code_runner(name)

# --- Ask rules: destructive patterns ---------------------------------------------------------

needs_approval contains concat(" ", [
	sprintf("%s: `%s` creates a new file system, erasing what the target held;", [tool_name, shown(cmd)]),
	"a person must approve it before it runs.",
]) if {
	some cmd in simple_commands
	startswith(basename(cmd.name), "mkfs")
}

needs_approval contains concat(" ", [
	sprintf("%s: `%s` writes raw data to the device %s;", [tool_name, shown(cmd), device]),
	"a person must approve it before it runs. Write to a file in the workspace instead.",
]) if {
	some cmd in simple_commands
	basename(cmd.name) == "dd"
	some word in command_args(cmd)
	startswith(word, "of=/dev/")
	device := substring(word, 3, -1)
	not device in harmless_devices
}

needs_approval contains concat(" ", [
	sprintf("%s: the command downloads with %s and feeds the result to %s,", [tool_name, downloader, runner]),
	"so it would run code nobody has read; a person must approve it before it runs.",
	"Download to a file in the workspace and read it first instead.",
]) if {
	some fetch in simple_commands
	downloader := basename(fetch.name)
	downloader in downloaders
	some runner in code_runners
}

# --- Helpers ---------------------------------------------------------------------------------

basename(path) := regex.replace(path, `^.*/`, "")

command_args(cmd) := array.slice(cmd.argv, 1, count(cmd.argv))

# The command as the model wrote it (argv after quote removal), cut to keep reasons readable.
shown(cmd) := text if {
	full := concat(" ", cmd.argv)
	count(full) <= 120
	text := full
} else := concat("", [substring(concat(" ", cmd.argv), 0, 117), "..."])

# Words before `--` that start with `-` are options, wherever they stand (GNU tools accept
# `rm / -rf`); every other word is an operand.
options_end(args) := min(array.concat([i | some i, word in args; word == "--"], [count(args)]))

options(args) := [word |
	some i, word in args
	i < options_end(args)
	option_word(word)
]

operands(args) := [word |
	some i, word in args
	operand_at(args, i)
]

operand_at(args, i) if {
	i < options_end(args)
	not option_word(args[i])
}

operand_at(args, i) if i > options_end(args)

option_word(word) if {
	startswith(word, "-")
	word != "-"
}

# A short option cluster (`-rf`, `-fR`) holding one of `letters`, or its long form.
has_short_flag(opts, letters) if {
	some opt in opts
	not startswith(opt, "--")
	regex.match(sprintf(`^-[A-Za-z0-9]*[%s]`, [letters]), opt)
}

has_short_flag(opts, letters) if {
	some letter in split(letters, "")
	has_long_flag(opts, long_flags[letter])
}

long_flags := {"r": "--recursive", "R": "--recursive", "f": "--force", "n": "--dry-run"}

# GNU tools accept any unambiguous prefix of a long option (`--rec`), and `--opt=value`.
has_long_flag(opts, long) if {
	some opt in opts
	startswith(opt, "--")
	count(opt) > 2
	startswith(long, split(opt, "=")[0])
}

harmless_devices := {"/dev/null", "/dev/stdout", "/dev/stderr"}

line_downloads if {
	some cmd in simple_commands
	basename(cmd.name) in downloaders
}

# What would run downloaded code: an interpreter reading its program from a stream, or a
# `sh -c` whose command is computed at run time (`sh -c "$(curl ...)"`).
code_runners contains runner if {
	some cmd in simple_commands
	runner := basename(cmd.name)
	runner in interpreters
	reads_program_from_stream(cmd)
}

code_runners contains wrapper if {
	some cmd in simple_commands
	dynamic_program(cmd)
	some wrapper in cmd.wrappers
	endswith(wrapper, " -c")
}

# No script file or program text among the arguments, or an explicit stream: `-`, `-s`, `<(...)`.
# A word that is an option's value is no script (`bash -o pipefail`, `python3 -W ignore`, `perl
# -I lib`: attacker round 193).
reads_program_from_stream(cmd) if {
	args := command_args(cmd)
	every i, word in args {
		not script_at(basename(cmd.name), args, i, word)
	}
}

script_at(_, _, 0, word) := script_word(word)

script_at(program, args, i, word) if {
	i > 0
	script_word(word)
	not takes_a_value(program, args[i - 1])
}

# Options whose value may be the next word, by program: the shells' -o/-O (also ending a
# cluster, and with +), python's -W and -X, perl's -I; any other interpreter's option may.
takes_a_value(program, option) if {
	program in shells
	regex.match(`^[-+][A-Za-z]*[oO][A-Za-z]*$|^--?(rcfile|init-file)$`, option)
}

takes_a_value(program, option) if {
	regex.match(`^python`, program)
	regex.match(`^-[A-Za-z]*[WX]$|^--check-hash-based-pycs$`, option)
}

takes_a_value(program, option) if {
	regex.match(`^perl`, program)
	regex.match(`^-[A-Za-z]*[IF]$`, option)
}

takes_a_value(program, option) if {
	not program in shells
	not regex.match(`^(python|perl)`, program)
	regex.match(`^-[^=]+$`, option)
	option != "--"
}

reads_program_from_stream(cmd) if {
	some word in command_args(cmd)
	stream_word(word)
}

reads_program_from_stream(cmd) if {
	basename(cmd.name) in shells
	has_short_flag(options(command_args(cmd)), "s")
}

script_word(word) if {
	not regex.match(`^[-+]`, word)
	not stream_word(word)
}

stream_word(word) if word in {"-", "/dev/stdin", "/dev/fd/0"}

stream_word(word) if startswith(word, "<(")

# Each -o or -O of a cluster takes a word (`bash -oo a b`); with two, the script cannot be told.
reads_program_from_stream(cmd) if {
	basename(cmd.name) in shells
	some word in command_args(cmd)
	regex.match(`^[-+][A-Za-z]*[oO][A-Za-z]*[oO]`, word)
}

# python's -i, then perl's debugger, read statements from the input after the program
# (attacker round 194: `echo ... | python3 -i -c pass`, `echo ... | perl -de 0`).
reads_program_from_stream(cmd) if {
	regex.match(`^python`, basename(cmd.name))
	some word in command_args(cmd)
	regex.match(`^-[^-WXcm]*i`, word)
}

reads_program_from_stream(cmd) if {
	regex.match(`^perl`, basename(cmd.name))
	some word in command_args(cmd)
	regex.match(`^-[^-eEIMmxiFD]*d($|[A-Za-z])`, word)
}

# A script that is a descriptor however its path is spelt (`/../dev/fd/3`, `//dev/./fd/3`,
# `fd/3` from /dev: attacker round 193), where the program reads a stream.
reads_program_from_stream(cmd) if {
	some word in command_args(cmd)
	descriptor_path(word)
}

# ... or a name that leads to one from where it runs (`cd /dev/fd && bash 3`: round 194).
reads_program_from_stream(cmd) if {
	some word in object.get(cmd, "words", [])
	descriptor_path(object.get(word, "path", ""))
}

reads_program_from_stream(cmd) if {
	some word in object.get(cmd, "words", [])
	regex.match(`^([0-9]+|stdin)$`, word.text)
	object.get(word, "path", "") == ""
}

descriptor_path(word) if regex.match(`^/+(\.{0,2}/+)*(dev|proc)/`, word)

# Its end, slashes collapsed: `..` before it may lead anywhere (`/usr/../proc/self/fd//0`,
# `/dev//stdin`: attacker round 196).
descriptor_path(word) if regex.match(`(^|/)(fd/[0-9]+|stdin)/*$`, regex.replace(word, `/+`, "/"))

# A later stage of a pipeline (stage is optional in the input; without it any stage counts).
fed_by_pipe(cmd) if {
	cmd.context == "pipeline"
	object.get(cmd, "stage", 1) > 0
}

fed_by_pipe(cmd) if {
	some word in command_args(cmd)
	startswith(word, "<(")
}

# Input redirected from a stream another command writes (`bash < <(echo ...)`, `<&3`, a
# descriptor's path), on the command or a compound command around it (attacker round 193).
fed_by_pipe(cmd) if object.get(cmd, "stdin_stream", false) == true

# A command inside a compound command that is a later stage (`cat x | { python3 -; }`, a loop,
# a subshell) reads that pipe too (attacker round 192).
fed_by_pipe(cmd) if {
	object.get(cmd, "pipeline", 0) > 0
	object.get(cmd, "stage", 0) > 0
}

# The parser marks such programs `dynamic`; the pattern covers inputs without that field.
dynamic_program(cmd) if cmd.dynamic == true

dynamic_program(cmd) if regex.match("[$`*?]|\\[.+\\]", cmd.name)
