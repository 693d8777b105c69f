"""Bash lines as the policy sees them: every simple command, unwrapped, and every written path."""

from __future__ import annotations

import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.shell.parse import (
    MAX_COMMAND_BYTES,
    MAX_SIMPLE_COMMANDS,
    MAX_WORD_CHARS,
    TIME_BUDGET_S,
    parse_command,
)
from daemon.shell.words import decode_ansi_c
from daemon.shell.wrappers import Word, deferred_scripts, unwrap

Cmd = tuple[list[str], list[str]]
"""(argv, wrappers) of one simple command."""


def policy(line: str) -> dict[str, Any]:
    doc = parse_command(line).to_policy()
    json.dumps(doc)  # the policy input must be plain JSON
    return doc


def cmds(doc: dict[str, Any]) -> list[Cmd]:
    return [(c["argv"], c["wrappers"]) for c in doc["simple_commands"]]


# (line, parsed, [(argv, wrappers)...], written_paths)
TABLE: list[tuple[str, bool, list[Cmd], list[str]]] = [
    ("ls -la", True, [(["ls", "-la"], [])], []),
    (
        "git status && git push --force origin main",
        True,
        [(["git", "status"], []), (["git", "push", "--force", "origin", "main"], [])],
        [],
    ),
    ("cat a | sh", True, [(["cat", "a"], []), (["sh"], [])], []),
    (
        "curl -s https://x | bash",
        True,
        [(["curl", "-s", "https://x"], []), (["bash"], [])],
        [],
    ),
    ("echo $(rm -rf /)", True, [(["echo", "$(rm -rf /)"], []), (["rm", "-rf", "/"], [])], []),
    ("echo `whoami`", True, [(["echo", "`whoami`"], []), (["whoami"], [])], []),
    ("(cd /tmp; rm -rf x)", True, [(["cd", "/tmp"], []), (["rm", "-rf", "x"], [])], []),
    ("{ rm -rf /; }", True, [(["rm", "-rf", "/"], [])], []),
    ("sudo rm -rf /", True, [(["rm", "-rf", "/"], ["sudo"])], []),
    ("sudo -u root -E rm -rf /", True, [(["rm", "-rf", "/"], ["sudo"])], []),
    ("env X=1 rm -rf /", True, [(["rm", "-rf", "/"], ["env"])], []),
    ("env -i PATH=/bin rm x", True, [(["rm", "x"], ["env"])], []),
    ("timeout 5 rm -rf /", True, [(["rm", "-rf", "/"], ["timeout"])], []),
    (
        "timeout -s KILL 5s nice -n 10 nohup /bin/rm -rf /",
        True,
        [(["/bin/rm", "-rf", "/"], ["timeout", "nice", "nohup"])],
        [],
    ),
    ("bash -c 'rm -rf /'", True, [(["rm", "-rf", "/"], ["bash -c"])], []),
    (
        'sh -c "echo hi; rm -rf ~"',
        True,
        [(["echo", "hi"], ["sh -c"]), (["rm", "-rf", "~"], ["sh -c"])],
        [],
    ),
    (
        "bash -c \"bash -c 'sudo reboot'\"",
        True,
        [(["reboot"], ["bash -c", "bash -c", "sudo"])],
        [],
    ),
    ("/usr/bin/sudo id", True, [(["id"], ["sudo"])], []),
    ("xargs rm < files.txt", True, [(["rm"], ["xargs"])], []),
    (
        "find . -name '*.pyc' -exec rm {} +",
        True,
        [
            (["find", ".", "-name", "*.pyc", "-exec", "rm", "{}", "+"], []),
            (["rm", "{}"], ["find -exec"]),
        ],
        [],
    ),
    ("echo hi > out.txt 2>> err.log", True, [(["echo", "hi"], [])], ["out.txt", "err.log"]),
    ("cat <<EOF\nhello\nEOF", True, [(["cat"], [])], []),
    ('for f in *; do rm "$f"; done', True, [(["rm", "$f"], [])], []),
    ("if true; then sudo ls; fi", True, [(["true"], []), (["ls"], ["sudo"])], []),
    ("f() { rm -rf /; }; f", True, [(["rm", "-rf", "/"], []), (["f"], [])], []),
    (
        "diff <(ls a) <(ls b)",
        True,
        [(["diff", "<(ls a)", "<(ls b)"], []), (["ls", "a"], []), (["ls", "b"], [])],
        [],
    ),
    ("a=1 b=2 cmd arg", True, [(["cmd", "arg"], [])], []),
    ("'r''m' -rf /", True, [(["rm", "-rf", "/"], [])], []),
    ("r\\m -rf /", True, [(["rm", "-rf", "/"], [])], []),
    ('echo "unterminated', False, [(["echo"], [])], []),
    ("ls ((", False, [(["ls"], [])], []),
    ("", True, [], []),
    ("  \t\n  ", True, [], []),
    ("# rm -rf / is only a comment", True, [], []),
    # Bypass attempts and tree-sitter-bash quirks beyond the brief's table.
    ("r\\\nm -rf /", True, [(["rm", "-rf", "/"], [])], []),
    ("echo a # x \\\nrm -rf /", True, [(["echo", "a"], []), (["rm", "-rf", "/"], [])], []),
    ("sudo 2>/dev/null rm -rf /", True, [(["rm", "-rf", "/"], ["sudo"])], ["/dev/null"]),
    ("rm >x -rf /", True, [(["rm", "-rf", "/"], [])], ["x"]),
    ("echo > out.txt hi there", True, [(["echo", "hi", "there"], [])], ["out.txt"]),
    ("$'\\x72m' -rf /", True, [(["rm", "-rf", "/"], [])], []),
    ("\\sudo reboot", True, [(["reboot"], ["sudo"])], []),
    ("eval 'sudo reboot'", True, [(["reboot"], ["eval", "sudo"])], []),
    ("env -S 'rm -rf /'", True, [(["rm", "-rf", "/"], ["env"])], []),
    ("bash -lc 'rm x'", True, [(["rm", "x"], ["bash -c"])], []),
    ("bash -o pipefail -c 'rm x'", True, [(["rm", "x"], ["bash -c"])], []),
    ("sudo --us root rm x", True, [(["rm", "x"], ["sudo"])], []),
    ("bash <<'EOF'\nrm -rf /\nEOF", True, [(["rm", "-rf", "/"], ["bash -s"])], []),
    ("bash <<< 'rm -rf /'", True, [(["rm", "-rf", "/"], ["bash -s"])], []),
    # Attacker round 88: -s with operands (the positional parameters), and a script that is
    # standard input itself, still read their commands from the heredoc or here-string.
    ("bash -s x <<< 'rm -rf *'", True, [(["rm", "-rf", "*"], ["bash -s"])], []),
    ("sh -es -- x y <<< 'rm -rf *'", True, [(["rm", "-rf", "*"], ["sh -s"])], []),
    ("bash /dev/stdin <<'EOF'\nrm -rf *\nEOF", True, [(["rm", "-rf", "*"], ["bash -s"])], []),
    ("bash //dev/fd/0 x <<< 'rm x'", True, [(["rm", "x"], ["bash -s"])], []),
    ("bash /proc/self/fd/0 <<< 'rm x'", True, [(["rm", "x"], ["bash -s"])], []),
    # A shell given a script is fed its input too: the script may be a link to it.
    (
        "bash /dev/fd/3 3<<'E'\nrm x\nE",
        True,
        [(["bash", "/dev/fd/3"], []), (["rm", "x"], ["bash -s"])],
        [],
    ),
    ("bash s <<< 'rm x'", True, [(["bash", "s"], []), (["rm", "x"], ["bash -s"])], []),
    # What a `bash -c` string or eval is fed, the commands in it are fed.
    ("bash -c bash <<< 'rm x'", True, [(["rm", "x"], ["bash -c", "bash -s"])], []),
    ("eval 'sh -s' <<< 'rm x'", True, [(["rm", "x"], ["eval", "sh -s"])], []),
    # Attacker round 90: command strings tar, flock, script and watch run through a shell.
    (
        "tar cf /dev/null --checkpoint=1 --checkpoint-action=exec='rm -rf *' .",
        True,
        [
            (
                [
                    "tar",
                    "cf",
                    "/dev/null",
                    "--checkpoint=1",
                    "--checkpoint-action=exec=rm -rf *",
                    ".",
                ],
                [],
            ),
            (["rm", "-rf", "*"], ["tar"]),
        ],
        [],
    ),
    (
        "tar -c -I 'sh -c \"rm x\"' -f /dev/null a",
        True,
        [
            (["tar", "-c", "-I", 'sh -c "rm x"', "-f", "/dev/null", "a"], []),
            (["rm", "x"], ["tar", "sh -c"]),
        ],
        [],
    ),
    (
        "tar --use-c 'rm y' -cf o a",
        True,
        [(["tar", "--use-c", "rm y", "-cf", "o", "a"], []), (["rm", "y"], ["tar"])],
        [],
    ),
    (
        "tar xIf 'rm z' a.tar",
        True,
        [(["tar", "xIf", "rm z", "a.tar"], []), (["rm", "z"], ["tar"])],
        [],
    ),
    (
        "tar -xf a.tar --to-command='rm w'",
        True,
        [(["tar", "-xf", "a.tar", "--to-command=rm w"], []), (["rm", "w"], ["tar"])],
        [],
    ),
    (
        "tar -cf a.tar --checkpoint-action=echo .",
        True,
        [(["tar", "-cf", "a.tar", "--checkpoint-action=echo", "."], [])],
        [],
    ),
    (
        "tar -cf a.tar -I zstd x",
        True,
        [(["tar", "-cf", "a.tar", "-I", "zstd", "x"], []), (["zstd"], ["tar"])],
        [],
    ),
    (
        "flock /tmp/l -c 'rm v'",
        True,
        [(["flock", "/tmp/l", "-c", "rm v"], []), (["rm", "v"], ["flock"])],
        [],
    ),
    (
        "script -qc 'rm u' /dev/null",
        True,
        [(["script", "-qc", "rm u", "/dev/null"], []), (["rm", "u"], ["script"])],
        [],
    ),
    (
        "watch -n 1 rm t",
        True,
        [(["watch", "-n", "1", "rm", "t"], []), (["rm", "t"], ["watch"])],
        [],
    ),
    ("command -v rm", True, [(["command", "-v", "rm"], [])], []),
    ("bash script.sh", True, [(["bash", "script.sh"], [])], []),
    ("sudo", True, [(["sudo"], [])], []),
    ("env A=1", True, [(["env", "A=1"], [])], []),
    (
        "sudo find / -execdir sh -c 'rm \"$1\"' _ {} \\;",
        True,
        [
            (["find", "/", "-execdir", "sh", "-c", 'rm "$1"', "_", "{}", ";"], ["sudo"]),
            (["rm", "$1"], ["sudo", "find -execdir", "sh -c"]),
        ],
        [],
    ),
    (
        "trap 'rm -rf /' EXIT",
        True,
        [(["trap", "rm -rf /", "EXIT"], []), (["rm", "-rf", "/"], ["trap"])],
        [],
    ),
    ("trap - EXIT", True, [(["trap", "-", "EXIT"], [])], []),
    (
        "alias ll='sudo reboot'",
        True,
        [(["alias", "ll=sudo reboot"], []), (["reboot"], ["alias", "sudo"])],
        [],
    ),
    ("export X=$(id)", True, [(["export", "X=$(id)"], []), (["id"], [])], []),
    ("x=`whoami`", True, [(["whoami"], [])], []),
    ("exec 3>f 2>&1 >&-", True, [(["exec"], [])], ["f"]),
    ("ls >& all.log", True, [(["ls"], [])], ["all.log"]),
    ("cat > >(tee x)", True, [(["cat"], []), (["tee", "x"], [])], []),
    ("time { rm x; }", True, [(["rm", "x"], [])], []),
    ("if ! time -p { sudo rm x; }; then :; fi", True, [(["rm", "x"], ["sudo"]), ([":"], [])], []),
    ("coproc { rm x; }", True, [(["rm", "x"], [])], []),
    (
        "echo `echo \\`rm x\\``",
        True,
        [(["echo", "`echo \\`rm x\\``"], []), (["echo", "`rm x`"], []), (["rm", "x"], [])],
        [],
    ),
    ("echo time { x; }", False, [(["echo", "time", "{", "x"], []), (["}"], [])], []),
    ("echo ${y/`id`/z}", False, [(["echo", "${y/`id`/z}"], [])], []),
    ("{rm,-rf,/}", False, [], []),
]


@pytest.mark.parametrize(
    ("line", "parsed", "expected", "written"), TABLE, ids=[repr(t[0])[:40] for t in TABLE]
)
def test_table(line: str, parsed: bool, expected: list[Cmd], written: list[str]) -> None:
    doc = policy(line)
    assert doc["raw"] == line
    assert cmds(doc) == expected
    assert doc["written_paths"] == written
    assert doc["parsed"] is parsed
    assert (doc["parse_error"] == "") is parsed


@pytest.mark.parametrize(
    ("line", "texts"),
    [
        ("python3 <<'EOF'\nimport os\nos.remove('a')\nEOF", ["import os\nos.remove('a')\n"]),
        ("perl <<< 'unlink q{f2.txt}'", ["unlink q{f2.txt}"]),
        ('python3 - x <<< "$CODE"', ["$CODE"]),
        ("python3 x.py", []),
        ("bash -c 'python3' <<< 'import os'", ["import os"]),
        # A program bash runs from the script it reads on its input reads the script's rest.
        ("bash <<'E'\nperl\nunlink q{keep.txt}\nE", ["perl\nunlink q{keep.txt}\n"]),
        # An unquoted delimiter: bash takes the backslash before \\, $, ` and a line's end
        # (attacker round 191: `\\\\x73ystem` reached python3 as `\\x73ystem`); a quoted one
        # gives the body as written.
        ('python3 <<EOF\nf("\\\\x73ys\\\ntem")\nEOF', ['f("\\x73ystem")\n']),
        ("python3 <<'EOF'\nf(\"\\\\x73ys\\\ntem\")\nEOF", ['f("\\\\x73ys\\\ntem")\n']),
    ],
)
def test_what_a_program_is_fed_on_its_input_is_kept(line: str, texts: list[str]) -> None:
    """An interpreter reading its program from a heredoc or here-string (attacker round 88):
    the policy reads that text as it reads `python3 -c`'s."""
    command = policy(line)["simple_commands"][0]
    assert command.get("stdin_texts", []) == texts


@pytest.mark.parametrize(
    ("line", "dynamic"),
    [
        ('python3 <<< "$C"', True),
        ("python3 <<E\nprint($(cat x))\nE", True),
        ("bash -c python3 <<< `cat c`", True),
        ("python3 <<< 'print(1)'", False),
        ("perl <<'E'\nmy $x = 1;\nE", False),
        ("perl <<E\nprint 1;\nE", False),
    ],
)
def test_what_a_program_is_fed_is_marked_when_only_known_as_it_runs(
    line: str, dynamic: bool
) -> None:
    """Attacker round 89: `python3 <<< "$C"` hid the program in a variable."""
    command = policy(line)["simple_commands"][0]
    assert command.get("stdin_dynamic", False) is dynamic


def test_contract_example_has_exactly_the_documented_shape() -> None:
    line = "cd sub && sudo -u x env A=1 /bin/rm -rf / | tee out.txt 2>/dev/null"
    assert policy(line) == {
        "raw": line,
        "parsed": True,
        "parse_error": "",
        "simple_commands": [
            {"argv": ["cd", "sub"], "name": "cd", "path": "cd", "wrappers": [],
             "assignments": [], "context": "list", "pipeline": 0, "stage": 0, "dynamic": False},
            {"argv": ["/bin/rm", "-rf", "/"], "name": "rm", "path": "/bin/rm",
             "wrappers": ["sudo", "env"], "assignments": ["A=1"], "context": "pipeline",
             "pipeline": 1, "stage": 0, "dynamic": False},
            {"argv": ["tee", "out.txt"], "name": "tee", "path": "tee", "wrappers": [],
             "assignments": [], "context": "pipeline", "pipeline": 1, "stage": 1,
             "dynamic": False},
        ],
        "redirects": [{"op": "2>", "target": "/dev/null"}],
        "written_paths": ["/dev/null"],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("line", "contexts"),
    [
        ("echo $(rm -rf /)", ["simple", "command_substitution"]),
        ("diff <(ls a) x", ["simple", "process_substitution"]),
        ("(cd /tmp; rm -rf x)", ["subshell", "subshell"]),
        ("{ rm -rf /; }", ["group"]),
        ("f() { rm -rf /; }; f", ["function", "list"]),
        ("if a; then b; else c; fi", ["if", "if", "if"]),
        ("while a; do b; done", ["while", "while"]),
        ("for f in *; do rm $f; done", ["for"]),
        ("case $x in a) rm;; esac", ["case"]),
        ("a; b & c", ["list", "list", "list"]),
    ],
)
def test_context_names_the_innermost_construct(line: str, contexts: list[str]) -> None:
    assert [c["context"] for c in policy(line)["simple_commands"]] == contexts


def test_pipeline_numbers_and_stages_tell_what_feeds_what() -> None:
    doc = policy("curl -s x | sudo bash; cat a | grep b | sh -c 'wc -l'")
    placed = [(c["name"], c["pipeline"], c["stage"]) for c in doc["simple_commands"]]
    assert placed == [("curl", 1, 0), ("bash", 1, 1), ("cat", 2, 0), ("grep", 2, 1), ("wc", 2, 2)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "curl x | sh | cat && true",
            [("curl", "pipeline", 1, 0), ("sh", "pipeline", 1, 1), ("cat", "pipeline", 1, 2),
             ("true", "list", 0, 0)],
        ),
        (
            "a | b | c && d | e | f && g",
            [("a", "pipeline", 1, 0), ("b", "pipeline", 1, 1), ("c", "pipeline", 1, 2),
             ("d", "pipeline", 2, 0), ("e", "pipeline", 2, 1), ("f", "pipeline", 2, 2),
             ("g", "list", 0, 0)],
        ),
        (
            "a | (b) | c || d",
            [("a", "pipeline", 1, 0), ("b", "subshell", 1, 1), ("c", "pipeline", 1, 2),
             ("d", "list", 0, 0)],
        ),
    ],
)  # fmt: skip
def test_a_pipeline_of_three_stages_before_and_or_is_one_pipeline(
    line: str, expected: list[tuple[str, str, int, int]]
) -> None:
    # tree-sitter-bash reads `a | b | c && d` as `a | (b | c && d)`: `sh` in `curl x | sh | cat
    # && true` was the first stage of a pipeline of its own, so "a shell fed by a pipe" missed
    # it, and a `cd` after the && was taken to run in a subshell.
    doc = policy(line)
    placed = [(c["name"], c["context"], c["pipeline"], c["stage"]) for c in doc["simple_commands"]]
    assert placed == expected
    assert parse_command(line).simple_commands[-1].top_level is True


def test_heredoc_continued_by_a_pipe_stays_one_pipeline() -> None:
    doc = policy("bash <<EOF | tee x\nrm -rf /\nEOF")
    placed = [(c["name"], c["wrappers"], c["pipeline"], c["stage"]) for c in doc["simple_commands"]]
    assert placed == [("rm", ["bash -s"], 1, 0), ("tee", [], 1, 1)]


@pytest.mark.parametrize(
    ("line", "name", "dynamic"),
    [
        ("$X -rf /", "$X", True),
        ("$(which rm) -rf /", "$(which rm)", True),
        ('"$(echo rm)" -rf /', "$(echo rm)", True),
        ("/bin/r? -rf /", "r?", True),
        ("/bin/rm -rf $HOME/*", "rm", False),
        ("'/bin/r?' x", "r?", False),
        ("sudo $CMD", "$CMD", True),
    ],
)
def test_executable_known_only_at_run_time_is_marked_dynamic(
    line: str, name: str, dynamic: bool
) -> None:
    first = policy(line)["simple_commands"][0]
    assert (first["name"], first["dynamic"]) == (name, dynamic)


@pytest.mark.parametrize(
    ("line", "argv", "translated"),
    [
        ('chmod $"777" .', ["chmod", "$777", "."], 1),
        ('install -m$"777" -d .', ["install", "-m$777", "-d", "."], 1),
        ('echo x$"7"y', ["echo", "x$7y"], 1),
    ],
)
def test_a_translated_string_is_one_word_known_only_at_run_time(
    line: str, argv: list[str], translated: int
) -> None:
    # tree-sitter splits `$"..."` into `$` and a string; bash reads one word, translated
    # through the message catalogues the line may choose (TEXTDOMAINDIR): attacker round 185.
    command = parse_command(line).simple_commands[0]
    assert list(command.argv) == argv
    assert [i for i, d in enumerate(command.dynamic_words) if d] == [translated]


def test_the_remote_shell_tar_runs_gets_words_only_known_at_run_time() -> None:
    """Attack (round 186): tar ran `chmod 777 .` from `--rsh-command=/bin/chmod`, the archive's
    host `777` and `--rmt-command=.`, while the parser saw chmod with no operand."""
    line = "tar -cf 777:x --rsh-command=/bin/chmod --rmt-command=. f"
    nested = [c for c in parse_command(line).simple_commands if c.wrappers == ("tar",)]
    assert [list(c.argv) for c in nested] == [["/bin/chmod", "$@"]]
    assert nested[0].dynamic_words[1]


def test_redirects_list_every_operator_and_only_outputs_are_written() -> None:
    doc = policy("cmd <<<word <in.txt >out.txt 2>&1 &>>all.log >|forced 3>>fd3 2>/dev/null")
    assert doc["redirects"] == [
        {"op": "<", "target": "in.txt"},
        {"op": ">", "target": "out.txt"},
        {"op": "2>&", "target": "1"},
        {"op": "&>>", "target": "all.log"},
        {"op": ">|", "target": "forced"},
        {"op": "3>>", "target": "fd3"},
        {"op": "2>", "target": "/dev/null"},
    ]
    assert doc["written_paths"] == ["out.txt", "all.log", "forced", "fd3", "/dev/null"]


def test_redirects_inside_nested_strings_and_substitutions_are_listed() -> None:
    doc = policy("bash -c 'echo x > /etc/passwd' && echo $(date > /tmp/d)")
    assert doc["written_paths"] == ["/etc/passwd", "/tmp/d"]


def test_quoted_redirect_target_is_unquoted() -> None:
    assert policy('echo hi > "my file.txt"')["written_paths"] == ["my file.txt"]


def test_assignments_from_prefix_sudo_and_env_are_collected() -> None:
    first = policy("A=1 sudo B=2 env -u X C=3 rm x")["simple_commands"][0]
    assert first["argv"] == ["rm", "x"]
    assert first["assignments"] == ["A=1", "B=2", "C=3"]
    assert first["wrappers"] == ["sudo", "env"]


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ('export A""B=x', ["export", "AB=x"]),
        ("declare -x MAN''PAGER=id", ["declare", "-x", "MANPAGER=id"]),
        ('local a=1 b"c"=2', ["local", "a=1", "bc=2"]),
        ('readonly P"AGER"', ["readonly", "PAGER"]),
        ("export A$X=1 B", ["export", "A$X=1", "B"]),
        ("export A B=2", ["export", "A", "B=2"]),
    ],
)
def test_a_declared_name_spelt_with_quotes_is_one_word(line: str, argv: list[str]) -> None:
    """tree-sitter splits a declaration's word at a quote in its name (`A` and `""B=x`), where
    bash reads one word, `AB=x` (attacker round 156: `export MANPA""GER=...` named no
    MANPAGER to the policy)."""
    (command,) = parse_command(line).simple_commands
    assert list(command.argv) == argv


def test_what_commands_are_fed_counts_towards_the_words_limit() -> None:
    """A here-string every command of a `bash -c` string inherits is given to each: 1,800 times
    14 KB made a 25 MB policy input of a 30 KB line. What they are fed is counted as their words
    are, so such a line is refused instead (and the input stays small)."""
    line = f"bash -c '{'; '.join(['python3'] * 1800)}' <<< '{'x' * 14_000}'"
    doc = policy(line)
    assert doc["parsed"] is False
    assert "characters of words" in doc["parse_error"]
    assert len(json.dumps(doc)) < 2 * MAX_WORD_CHARS + len(line) * 2


def test_nesting_beyond_the_depth_limit_is_unparsed_but_keeps_the_shell_visible() -> None:
    line = 'bash -c "bash -c \'bash -c \\"bash -c reboot\\"\'"'
    doc = policy(line)
    assert doc["parsed"] is False
    assert "nested more than 3 levels" in doc["parse_error"]
    assert cmds(doc) == [(["bash", "-c", "reboot"], ["bash -c", "bash -c", "bash -c"])]


def test_syntax_error_inside_a_bash_c_string_says_where() -> None:
    doc = policy("bash -c 'echo \"oops'")
    assert doc["parsed"] is False
    assert doc["parse_error"].startswith("In the command string run by `bash -c`: At line 1")


def test_unparsed_line_says_where_and_what_to_do() -> None:
    doc = policy('ls\necho "unterminated')
    assert doc["parsed"] is False
    assert "line 2, column 6" in doc["parse_error"]
    assert "check the quotes" in doc["parse_error"]


def test_huge_input_is_refused_quickly_with_a_reason() -> None:
    line = "echo " + "x" * 200_000
    started = time.monotonic()
    doc = policy(line)
    assert time.monotonic() - started < 1
    assert doc["parsed"] is False
    assert doc["simple_commands"] == []
    assert f"over {MAX_COMMAND_BYTES} bytes" in doc["parse_error"]


@pytest.mark.parametrize("line", ["rm -rf /\x00", "\x00", "echo a\x00b; rm x"])
def test_nul_bytes_are_unparsed(line: str) -> None:
    doc = policy(line)
    assert doc["parsed"] is False
    assert "NUL byte" in doc["parse_error"]


def test_text_that_is_not_unicode_is_unparsed_but_recovered() -> None:
    doc = policy("echo \ud800; rm -rf /")
    assert doc["parsed"] is False
    assert "not valid Unicode" in doc["parse_error"]
    assert ["rm", "-rf", "/"] in [c["argv"] for c in doc["simple_commands"]]


@pytest.mark.parametrize("line", ["{\U0006a137", "{\U000e0001", "{\U000ffffd x"])
def test_input_that_crashed_tree_sitter_bash_is_parsed_safely(line: str) -> None:
    # tree-sitter-bash 0.25.1 segfaults on these about one run in two (found by fuzzing); a
    # regression would kill the test process.
    for _ in range(300):
        doc = policy(line)
    assert doc["parsed"] is False  # tree-sitter reads `{` as an unclosed group here


def test_non_ascii_text_is_kept_and_non_ascii_spaces_do_not_split_words() -> None:
    doc = policy("echo 'héllo wörld' 日本; sudo\u00a0rm x")
    assert cmds(doc) == [(["echo", "héllo wörld", "日本"], []), (["sudo\u00a0rm", "x"], [])]


@pytest.mark.parametrize(
    "line",
    [
        "$(" * 20_000 + "x" + ")" * 20_000,
        "(" * 30_000 + "x" + ")" * 30_000,
        "if a; then " * 9_000,
        '"$(' * 30_000,
        "`" * 90_000,
        "a|" * 49_000 + "b",
        "eval " * 19_000 + "x",
    ],
    ids=["substitutions", "subshells", "ifs", "open-quotes", "backticks", "pipe", "evals"],
)
def test_deep_or_large_input_ends_within_the_budget(line: str) -> None:
    started = time.monotonic()
    doc = policy(line)
    assert time.monotonic() - started < TIME_BUDGET_S + 2
    assert doc["parsed"] is False
    assert doc["parse_error"]
    assert len(doc["simple_commands"]) <= MAX_SIMPLE_COMMANDS


def test_many_commands_are_capped() -> None:
    doc = policy("a;" * 6_000)
    # Whichever bound stops it first (the count, or the time budget on a slow machine).
    assert len(doc["simple_commands"]) <= MAX_SIMPLE_COMMANDS
    assert doc["parsed"] is False
    assert "more than" in doc["parse_error"] or "longer than" in doc["parse_error"]


def test_parsing_from_many_threads_gives_the_same_results() -> None:
    lines = [line for line, *_ in TABLE] * 4
    expected = [policy(line) for line in lines]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(policy, lines)) == expected


# --- unwrap on its own -------------------------------------------------------------------------


def words(line: str) -> list[Word]:
    return [Word(w) for w in shlex.split(line)]


@pytest.mark.parametrize(
    ("line", "argv", "wrappers"),
    [
        ("sudo -- rm x", ["rm", "x"], ["sudo"]),
        ("sudo -Eu root rm x", ["rm", "x"], ["sudo"]),
        ("sudo -uroot rm x", ["rm", "x"], ["sudo"]),
        ("sudo -l", ["sudo", "-l"], []),
        ("doas -u root rm x", ["rm", "x"], ["doas"]),
        ("env - rm x", ["rm", "x"], ["env"]),
        ("env -C /tmp -u HOME rm x", ["rm", "x"], ["env -C"]),
        ("env --split-string='rm -rf /'", ["rm", "-rf", "/"], ["env"]),
        ("timeout --kill-after 1 --signal=TERM 5 rm", ["rm"], ["timeout"]),
        ("timeout 5", ["timeout", "5"], []),
        ("nice -10 rm", ["rm"], ["nice"]),
        ("nice --adjustment 5 rm", ["rm"], ["nice"]),
        ("nohup -- rm", ["rm"], ["nohup"]),
        ("stdbuf -oL -e 0 rm", ["rm"], ["stdbuf"]),
        ("xargs -0 -n 1 -P4 -I{} rm {}", ["rm", "{}"], ["xargs"]),
        ("xargs -i rm {}", ["rm", "{}"], ["xargs"]),
        ("command -p rm", ["rm"], ["command"]),
        ("command -V rm", ["command", "-V", "rm"], []),
        ("exec -a name rm", ["rm"], ["exec -a"]),
        ("time -f %e -o t.txt rm", ["rm"], ["time"]),
        ("builtin echo", ["echo"], ["builtin"]),
        ("busybox rm -rf /", ["rm", "-rf", "/"], ["busybox"]),
        ("ionice -c 3 rm", ["rm"], ["ionice"]),
        ("setsid rm", ["rm"], ["setsid"]),
        ("/usr/bin/env /usr/bin/nohup rm", ["rm"], ["env", "nohup"]),
    ],
)
def test_unwrap_follows_each_wrappers_options(
    line: str, argv: list[str], wrappers: list[str]
) -> None:
    found = unwrap(words(line))
    assert [w.text for w in found.argv] == argv
    assert list(found.wrappers) == wrappers


@pytest.mark.parametrize(
    ("line", "script"),
    [
        ("bash -c 'rm x'", "rm x"),
        ("sh -ec 'rm x' name arg", "rm x"),
        ("bash -c -x 'rm x'", "rm x"),
        ("zsh -o err_exit -c 'rm x'", "rm x"),
        ("bash --norc --rcfile f -c 'rm x'", "rm x"),
        ("dash +x -c 'rm x'", "rm x"),
    ],
)
def test_unwrap_finds_the_shell_command_string(line: str, script: str) -> None:
    found = unwrap(words(line))
    assert found.script is not None
    assert found.script.text == script
    assert found.script.label.endswith(" -c")


@pytest.mark.parametrize(
    ("line", "argv", "wrapper"),
    [
        ("setarch x86_64 mount -t tmpfs x /mnt", ["mount", "-t", "tmpfs", "x", "/mnt"], "setarch"),
        ("setarch x86_64 -R --uname-2.6 rm x", ["rm", "x"], "setarch"),
        ("linux32 -- rm x", ["rm", "x"], "linux32"),
        ("x86_64 rm x", ["rm", "x"], "x86_64"),
        ("taskset 1 nsenter -t 1 -m true", ["true"], "taskset"),
        ("taskset -c 0-1 rm x", ["rm", "x"], "taskset"),
        ("prlimit --nofile=64 rm -rf /w", ["rm", "-rf", "/w"], "prlimit"),
        ("prlimit -n64 --cpu=10 rm x", ["rm", "x"], "prlimit"),
        ("flock /tmp/lk rm -rf /w", ["rm", "-rf", "/w"], "flock"),
        ("flock -w 5 -x /tmp/lk rm x", ["rm", "x"], "flock"),
        ("chrt -f 10 rm x", ["rm", "x"], "chrt"),
        ("chrt --sched-runtime 5 -d 0 rm x", ["rm", "x"], "chrt"),
        ("setpriv --reuid 1000 --init-groups rm x", ["rm", "x"], "setpriv"),
        ("choom -n 100 -- rm x", ["rm", "x"], "choom"),
        ("uclampset -m 0 rm x", ["rm", "x"], "uclampset"),
        ("runcon -t t rm x", ["rm", "x"], "runcon"),
        ("runcon u:r:t:s0 rm x", ["rm", "x"], "runcon"),
        ("chroot --userspec=1:1 / rm x", ["rm", "x"], "chroot"),
        ("unshare -r -S 0 rm x", ["rm", "x"], "unshare"),
        ("nsenter -t 1 -m rm x", ["rm", "x"], "nsenter"),
        ("strace -f -o /dev/null rm x", ["rm", "x"], "strace"),
        ("ltrace -e malloc rm x", ["rm", "x"], "ltrace"),
        ("fakeroot -- rm x", ["rm", "x"], "fakeroot"),
        ("faketime '2020-01-01' rm x", ["rm", "x"], "faketime"),
        ("eatmydata rm x", ["rm", "x"], "eatmydata"),
        ("numactl --cpunodebind=0 -m 0 rm x", ["rm", "x"], "numactl"),
        ("cgexec -g cpu:g rm x", ["rm", "x"], "cgexec"),
        ("cpulimit -l 50 -- rm x", ["rm", "x"], "cpulimit"),
        ("sshpass -p pw rm x", ["rm", "x"], "sshpass"),
        ("valgrind --tool=memcheck rm x", ["rm", "x"], "valgrind"),
        ("catchsegv rm x", ["rm", "x"], "catchsegv"),
        ("runuser -u nobody -- rm x", ["rm", "x"], "runuser"),
    ],
)
def test_unwrap_peels_the_other_wrappers_of_a_linux_system(
    line: str, argv: list[str], wrapper: str
) -> None:
    """Attacker round 149: `setarch x86_64 mount ...`, `prlimit --nofile=64 rm -rf <ws>/*` and
    `flock /tmp/lk rm -rf <ws>/*` were judged as setarch, prlimit and flock, so the policy's
    deny and ask rules for what they ran never applied."""
    found = unwrap(words(line))
    assert [w.text for w in found.argv] == argv
    assert found.wrappers[:1] == (wrapper,)


@pytest.mark.parametrize(
    ("line", "argv", "wrapper"),
    [
        ("prlimit -o description rm -rf /w", ["rm", "-rf", "/w"], "prlimit"),
        ("setarch --uname-2.6 rm -rf /w", ["rm", "-rf", "/w"], "setarch"),
        (
            "/lib64/ld-linux-x86-64.so.2 /bin/rm -rf /w",
            ["/bin/rm", "-rf", "/w"],
            "ld-linux-x86-64.so.2",
        ),
        (
            "ld.so --library-path /x --argv0 y /bin/rm -rf /w",
            ["/bin/rm", "-rf", "/w"],
            "ld.so --argv0",
        ),
        (
            "start-stop-daemon -S -x /bin/rm -- -rf /w",
            ["/bin/rm", "-rf", "/w"],
            "start-stop-daemon",
        ),
        ("start-stop-daemon --start --exec /bin/rm", ["/bin/rm"], "start-stop-daemon"),
        ("logsave /dev/null rm -rf /w", ["rm", "-rf", "/w"], "logsave"),
    ],
)
def test_unwrap_reads_round_150s_wrappers_as_they_run(
    line: str, argv: list[str], wrapper: str
) -> None:
    """Attacker round 150: an option's value with a `p` read as prlimit's -p, setarch's options
    before its (optional) architecture, the dynamic loader and start-stop-daemon running their
    operand."""
    found = unwrap(words(line))
    assert [w.text for w in found.argv] == argv
    assert found.wrappers[:1] == (wrapper,)


@pytest.mark.parametrize("line", ["env -S'\\c' rm -rf /w", "env -S'nice #' rm -rf /w"])
def test_an_env_string_with_escapes_or_comments_is_a_program_known_only_when_it_runs(
    line: str,
) -> None:
    """Round 150: env -S reads `\\c` (end of the string) and `#` (a comment) its own way;
    shlex made them the program."""
    found = unwrap(words(line))
    assert found.argv[0].dynamic


def test_rbash_runs_its_string_like_any_shell() -> None:
    found = unwrap(words("rbash -c 'rm -rf /w'"))
    assert found.script is not None and found.script.text == "rm -rf /w"


@pytest.mark.parametrize(
    ("line", "script"),
    [
        ("script -qc'rm -rf /w' /dev/null", "rm -rf /w"),
        ("script -q --comm 'rm -rf /w' /dev/null", "rm -rf /w"),
        ("flock -xc'rm -rf /w' /tmp/l", "rm -rf /w"),
        ("mapfile -t -c 1 -C 'rm -rf /w;:' A", "rm -rf /w;:"),
        ("readarray -C'rm -rf /w;:' A", "rm -rf /w;:"),
        ("watch -g -n1 -d rm -rf /w", "rm -rf /w"),
        ("prove --exec 'rm -rf /w' t.t", "rm -rf /w"),
        ("git-shell -c 'rm -rf /w'", "rm -rf /w"),
        ("scriptlive -c 'rm -rf /w' t s", "rm -rf /w"),
    ],
)
def test_strings_round_150_ran_are_parsed(line: str, script: str) -> None:
    """Round 150: a value attached to a cluster (`-qc'...'`), an abbreviated long option
    (`--comm`), mapfile's callback, watch's -d (which takes no word of its own)."""
    assert script in [s.text for s in deferred_scripts(words(line))]


@pytest.mark.parametrize(
    "line",
    [
        "split --filter='rm -rf /w' f o_",
        "split --filt='rm -rf /w' f o_",
        "split -n 1 --filter 'rm -rf /w' f o_",
        "split -l5 --fi='rm -rf /w' f",
    ],
)
def test_splits_filter_is_parsed(line: str) -> None:
    """Attacker round 155: split runs its --filter (any prefix) through `sh -c`, unread."""
    assert "rm -rf /w" in [s.text for s in deferred_scripts(words(line))]


@pytest.mark.parametrize(
    "line",
    ["setarch x86_64", "linux64 -R", "chroot /", "unshare -r", "nsenter -t 1 -m", "fakeroot"],
)
def test_a_wrapper_with_no_program_runs_a_shell_on_its_input(line: str) -> None:
    """Without a program these start a shell, which reads its commands from standard input
    (a heredoc can feed it)."""
    assert unwrap(words(line)).stdin_shell


@pytest.mark.parametrize(
    "line", ["taskset -p 1 1234", "prlimit -p 1234 --nofile=64", "chrt -p 10 1234", "choom -p 1"]
)
def test_a_wrapper_given_a_process_runs_nothing(line: str) -> None:
    found = unwrap(words(line))
    assert found.wrappers == () and found.argv[0].text == line.split()[0]


@pytest.mark.parametrize(
    ("line", "script"),
    [
        ("su -c 'rm x' nobody", "rm x"),
        ("runuser -u n -c 'rm x'", "rm x"),
        ("sg grp 'rm x'", "rm x"),
    ],
)
def test_commands_su_runuser_and_sg_run_are_parsed(line: str, script: str) -> None:
    assert script in [s.text for s in deferred_scripts(words(line))]


def test_dynamic_word_is_never_taken_for_a_wrapper() -> None:
    found = unwrap([Word("$SUDO", dynamic=True), Word("rm")])
    assert [w.text for w in found.argv] == ["$SUDO", "rm"]
    assert found.wrappers == ()


# --- properties ----------------------------------------------------------------------------------

SHELLISH = st.sampled_from(
    ["sudo", "env", "X=1", "bash", "-c", "'", '"', "`", "$(", ")", "(", "{", "}", ";", "&&",
     "||", "|", "&", ">", ">>", "<", "<<", "EOF", "\n", "\\", "\\\n", "$", "${", "#", "rm",
     "-rf", "/", "*", "if", "then", "fi", "do", "done", "for", "in", "case", "esac", "eval",
     "find", "-exec", "{}", "+", "\\;", "<(", ">(", "$'\\x41'", "=", "!", "[[", "]]", "((",
     "))", "2>&1", "&>", "<<<", "xargs", "timeout", "5", "nice", "-n", "--", "sh", "'x'",
     '"y"', " ", "\t", "\x00", "é"]
)  # fmt: skip


def check_well_formed(line: str) -> None:
    started = time.monotonic()
    doc = policy(line)
    assert time.monotonic() - started < TIME_BUDGET_S + 2
    assert isinstance(doc["parsed"], bool)
    assert (doc["parse_error"] == "") is doc["parsed"]
    assert len(doc["simple_commands"]) <= MAX_SIMPLE_COMMANDS
    for command in doc["simple_commands"]:
        assert command["argv"]
        assert command["path"] == command["argv"][0]
        assert command["path"].endswith(command["name"]) or command["path"].endswith("/")
    assert set(doc["written_paths"]) <= {r["target"] for r in doc["redirects"]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_random_text_never_crashes(line: str) -> None:
    check_well_formed(line)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SHELLISH, max_size=60), st.sampled_from(["", " "]))
def test_random_shell_tokens_never_crash(tokens: list[str], separator: str) -> None:
    check_well_formed(separator.join(tokens))


ARG = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(ARG, max_size=6))
def test_quote_removal_gives_back_the_quoted_words(args: list[str]) -> None:
    doc = policy("printf " + shlex.join(args))
    assert doc["parsed"] is True
    assert cmds(doc) == [(["printf", *args], [])]


WRAPPERS = st.sampled_from(
    [("sudo", "sudo"), ("sudo -u root -E", "sudo"), ("env A=1", "env"), ("env -i", "env"),
     ("timeout 5", "timeout"), ("timeout -s KILL 5s", "timeout"), ("nice -n 10", "nice"),
     ("nohup", "nohup"), ("stdbuf -oL", "stdbuf"), ("xargs -0", "xargs"), ("command", "command"),
     ("exec", "exec"), ("time -p", "time"), ("doas", "doas"), ("/usr/bin/sudo", "sudo")]
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.lists(WRAPPERS, max_size=5), st.sampled_from(["", "bash -c ", "sh -c "]))
def test_any_chain_of_wrappers_still_exposes_rm(chain: list[tuple[str, str]], shell: str) -> None:
    inner = "rm -rf /"
    if shell:
        inner = shell + shlex.quote(inner)
    line = " ".join([*(w for w, _ in chain), inner])
    expected = [label for _, label in chain] + ([shell.strip()] if shell else [])
    doc = policy(line)
    assert cmds(doc) == [(["rm", "-rf", "/"], expected)]
    assert doc["simple_commands"][0]["name"] == "rm"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "echo | cat | cat\nrm -rf x && true",
            [["echo"], ["cat"], ["cat"], ["rm", "-rf", "x"], ["true"]],
        ),
        ("a | b | c d\nrm -rf / && ls", [["a"], ["b"], ["c", "d"], ["rm", "-rf", "/"], ["ls"]]),
        (
            "if x; then a | b | c\nrm y && z; fi",
            [["x"], ["a"], ["b"], ["c"], ["rm", "y"], ["z"]],
        ),
        (
            "cat <<EOF | a | b\nrm -rf q\nEOF\nrm -rf w && ls",
            [["cat"], ["a"], ["b"], ["rm", "-rf", "w"], ["ls"]],
        ),
        ("bash -c 'a | b | c\nrm -rf x && true'", None),
    ],
)
def test_a_newline_ends_a_command_even_where_tree_sitter_runs_two_lines_together(
    line: str, expected: list[list[str]] | None
) -> None:
    # tree-sitter-bash 0.25.1 reads `a | b | c<newline>rm -rf x && true` as the one command
    # `c rm -rf x`, without an error: the rm was invisible to the policy (found by hypothesis in
    # CI). A newline between two words of a command always ends it in bash.
    doc = policy(line)
    argvs = [c["argv"] for c in doc["simple_commands"]]
    assert doc["parsed"] is True, doc["parse_error"]
    if expected is None:
        assert ["rm", "-rf", "x"] in argvs
    else:
        assert argvs == expected


_PIECES = ["a", "b -x", "c y z", "-x", "d"]


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(
        st.lists(
            st.tuples(st.sampled_from(_PIECES), st.sampled_from([" | ", " && ", " || ", " |& "])),
            min_size=1,
            max_size=5,
        ),
        min_size=2,
        max_size=4,
    ),
    ends=st.lists(st.sampled_from(["\n", "\n\n", ";\n", " ;\n", "\n "]), min_size=4, max_size=4),
)
def test_every_line_of_a_script_of_lists_and_pipelines_is_its_own_commands(
    lines: list[list[tuple[str, str]]], ends: list[str]
) -> None:
    texts = ["".join(piece + op for piece, op in line[:-1]) + line[-1][0] for line in lines]
    script = texts[0]
    for end, text in zip(ends, texts[1:], strict=False):
        script += end + text
    expected = sorted(piece.split() for line in lines for piece, _ in line)
    doc = policy(script)
    assert doc["parsed"] is True, (script, doc["parse_error"])
    assert sorted(c["argv"] for c in doc["simple_commands"]) == expected, script


@pytest.mark.parametrize(
    "line",
    [
        "echo hi\n\\rm -rf /x",
        'cat <<S|\nx\nS\nrm -rf "$x" /x',
        "cat <<S|\nx\nS\nrm -rf $(true) /x > /etc/passwd",
        "bash <<E\n$x\nrm -rf /x > /etc/passwd\n",
        'cat <<E"x"\nEx\nrm -rf /x\nE"x"',
        "cat <<$'E'\nE\nrm -rf /x\n$'E'",
        "0</dev/null rm -rf /x",
        "x=1 {fd}>f rm -rf /x",
        "time V=1 rm -rf /x",
        "coproc V=1 rm -rf /x",
        "bash -c >&- 'rm -rf /x'",
        "eval >&- 'rm -rf /x'",
    ],
)
def test_lines_bash_reads_otherwise_than_the_grammar_are_never_parsed_without_the_rm(
    line: str,
) -> None:
    """Found by differential fuzzing against bash (each line runs `rm -rf /x` in bash): the
    analyser said parsed, with the rm hidden as an argument, in a heredoc, or dropped."""
    parsed = parse_command(line)
    argvs = [list(c.argv) for c in parsed.simple_commands]
    assert not parsed.parsed or ["rm", "-rf", "/x"] in argvs, (argvs, parsed.redirects)
    if "/etc/passwd" in line:
        assert not parsed.parsed or "/etc/passwd" in parsed.written_paths


def test_a_closed_descriptor_takes_no_target() -> None:
    parsed = parse_command("rm -rf >&- /important")
    assert [list(c.argv) for c in parsed.simple_commands] == [["rm", "-rf", "/important"]]
    assert parsed.written_paths == ()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('c1 "a" 2>> f1\n\\rm -rf /x\n', [["c1", "a"], ["rm", "-rf", "/x"]]),
        ('"c3" "a"\n\n10>\tf2 rm 3>\tf3 -rf /x', [["c3", "a"], ["rm", "-rf", "/x"]]),
        ("c3 0</dev/null a", [["c3", "a"]]),
        ("c6 {fd}>  f2 a", [["c6", "a"]]),
    ],
)
def test_redirections_neither_swallow_the_next_line_nor_give_their_descriptor_as_a_word(
    line: str, expected: list[list[str]]
) -> None:
    """Differential fuzzing against bash, a second round: a newline after a redirection's target
    and a descriptor written against a redirection in the middle of a command."""
    parsed = parse_command(line)
    assert parsed.parsed, parsed.parse_error
    assert [list(c.argv) for c in parsed.simple_commands] == expected


@pytest.mark.parametrize("line", ["rm -rf y -2>&1", "find . -2>&1 -delete", "a -12>f"])
def test_a_descriptor_that_is_not_a_number_is_not_trusted(line: str) -> None:
    """Attacker round 58: bash gives `-2` to the command; the grammar made it the descriptor of
    the redirection, so the word was dropped from what the policy saw."""
    assert not parse_command(line).parsed


@pytest.mark.parametrize(
    "line",
    [
        "python3 - <<'EOF'\nz = '''\n\tEOF\n#'''; import shutil; shutil.rmtree('.git')\nEOF",
        "python3 - <<'EOF'\nz = '''\nEOF\t\n#'''; import shutil; shutil.rmtree('.git')\nEOF",
    ],
)
def test_a_heredoc_ends_only_on_its_delimiter_alone(line: str) -> None:
    """Attacker round 192: the grammar ended `<<EOF` on `\\tEOF` and on `EOF\\t`, where bash
    reads on, and the rest of the body (rmtree) reached python3 unread."""
    assert not parse_command(line).parsed


def test_a_dashed_heredoc_ends_on_its_delimiter_after_tabs() -> None:
    parsed = parse_command("cat <<-EOF\n\tx\n\tEOF")
    assert parsed.parsed, parsed.parse_error


@pytest.mark.parametrize(
    ("line", "reader"),
    [
        ("{ python3 -; } <<'EOF'\nimport os\nEOF", "python3"),
        ("( python3 - ) <<'EOF'\nimport os\nEOF", "python3"),
        ("if true; then python3 -; fi <<'EOF'\nimport os\nEOF", "python3"),
        ("while python3 -; do break; done <<'EOF'\nimport os\nEOF", "python3"),
        ("for i in 1; do perl; done <<'E'\nunlink q{.git}\nE", "perl"),
    ],
)
def test_what_a_compound_command_is_given_reaches_each_command_in_it(
    line: str, reader: str
) -> None:
    """Attacker round 192: a heredoc or here-string on a group, subshell, condition or loop
    reached none of the commands inside, so a shell or python3 there ran it unread."""
    parsed = parse_command(line)
    fed = {c.name: c.stdin_texts for c in parsed.simple_commands}
    assert fed[reader] and fed[reader][0].strip() in ("import os", "unlink q{.git}")


def test_a_shell_in_a_group_given_a_heredoc_has_its_commands_judged() -> None:
    parsed = parse_command("{ bash; } <<'EOF'\nrm -rf .git\nEOF")
    assert ("rm", "-rf", ".git") in [c.argv for c in parsed.simple_commands]
    # The grammar reads no here-string on a group: not parsed, so asked about.
    assert not parse_command("{ perl; } <<< 'unlink q{.git}'").parsed


def test_what_a_function_of_the_line_is_given_reaches_the_commands_in_it() -> None:
    """Its commands are listed where it is defined (round 192: `f() { python3 -; }; f <<'EOF'`
    ran the heredoc unread): a call given input makes them read a stream, through the
    functions they call too, and a fork bomb's `:|:` reads one and stays parsed."""
    parsed = parse_command("f() { python3 -; }; f <<'EOF'\nimport os\nEOF")
    assert parsed.parsed, parsed.parse_error
    assert {c.name: c.stdin_stream for c in parsed.simple_commands}["python3"]
    chained = parse_command("f() { g; }; g() { bash; }; echo x | f").simple_commands
    assert {c.name: c.stdin_stream for c in chained}["bash"]
    called = parse_command("f() { bash; }; f").simple_commands
    assert not any(c.stdin_stream for c in called)
    assert parse_command(":(){ :|:& };:").parsed


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        # Bytes of UTF-8 read as the characters they make (round 192: the fullwidth `ｓ`).
        ("python3 -c $'\\xef\\xbd\\x93'", ["python3", "-c", "\uff53"]),
        ("python3 -c $'\\357\\275\\223'", ["python3", "-c", "\uff53"]),
        # bash 5.2's braced hex: any digits, modulo 256, the brace may stay open.
        ("rm -rf $'\\x{2e}git'", ["rm", "-rf", ".git"]),
        ("echo $'\\x{173}' $'\\x{2e'", ["echo", "s", "."]),
        # bash ends the value at its first NUL byte.
        ("rm -rf $'.git\\0x'", ["rm", "-rf", ".git"]),
        ("echo $'a\\x00b'c $'\\x{}x'", ["echo", "ac", ""]),
    ],
)
def test_ansi_c_quotes_are_read_as_the_bytes_bash_makes(line: str, argv: list[str]) -> None:
    assert list(parse_command(line).simple_commands[0].argv) == argv


@pytest.mark.parametrize(
    ("line", "reader"),
    [
        ("bash < <(echo 'rm -rf .git')", "bash"),
        ("python3 0< <(echo 'import os')", "python3"),
        ("{ bash; } < <(echo 'rm -rf .git')", "bash"),
        ("while read -r l; do bash; done < <(ls)", "bash"),
        ("bash <&3", "bash"),
        ("bash < /dev/fd/3", "bash"),
        ("bash < /proc/self/fd/3", "bash"),
        ('bash < "$F"', "bash"),
    ],
)
def test_input_redirected_from_a_stream_is_said_to_be_one(line: str, reader: str) -> None:
    """Attacker round 193: `bash < <(echo ...)` read its commands from a process substitution
    that no rule saw (a later pipeline stage's input was the only stream the policy knew)."""
    commands = {c.name: c for c in parse_command(line).simple_commands}
    assert commands[reader].stdin_stream


@pytest.mark.parametrize("line", ["bash < x.sh", "cat < a.txt", "bash 3> >(cat)", "bash <&0"])
def test_a_file_or_another_descriptor_is_no_stream_on_the_input(line: str) -> None:
    assert not parse_command(line).simple_commands[0].stdin_stream


@pytest.mark.parametrize(
    "line",
    [
        "exec < <(echo 'rm -rf .git'); bash",
    ],
)
def test_a_stream_given_to_the_rest_of_the_line_is_not_parsed(line: str) -> None:
    assert not parse_command(line).parsed


@pytest.mark.parametrize(
    "line",
    [
        "echo $'a\\\\' ; id; rm -rf .git #'",
        "x=$'a\\\\'; id; rm -rf .git #'",
        "echo ${x:-$'a\\\\'} ; id #'}",
    ],
)
def test_an_ansi_c_string_the_grammar_runs_past_its_end_is_not_parsed(line: str) -> None:
    """Attacker round 193: the grammar read `$'a\\\\'` on to the next quote, so the commands
    after it were one word of an echo."""
    assert not parse_command(line).parsed


def test_an_ansi_c_string_with_an_escaped_quote_or_backslash_is_read() -> None:
    parsed = parse_command("echo $'it\\'s' $'a\\\\'")
    assert parsed.parsed, parsed.parse_error
    assert parsed.simple_commands[0].argv == ("echo", "it's", "a\\")


@pytest.mark.parametrize(
    ("body", "value"),
    [
        # bash takes `\c\\` as control-backslash with both backslashes (round 193: read as one,
        # the other made `\x00` of what followed and cut the value there).
        ("\\c\\\\x00; id", "\x1cx00; id"),
        ("\\c\\x41", "\x1cx41"),
        ("\\ca\\c?", "\x01\x7f"),
    ],
)
def test_ansi_c_control_escapes_take_what_bash_takes(body: str, value: str) -> None:
    assert decode_ansi_c(body) == value


@pytest.mark.parametrize(
    ("line", "reader"),
    [
        ("< <(echo 'rm -rf .git') bash", "bash"),
        ("<&3 bash", "bash"),
        ('bash < "/dev/"fd/3', "bash"),
        ("bash < //dev/./fd/3", "bash"),
        ("bash s 3< <(echo 'rm -rf .git')", "bash"),
        ("coproc { bash; }; echo 'rm -rf .git' >&60", "bash"),
        # Round 198: what an output process substitution runs reads what is written to it.
        ("echo 'rm -rf .git' > >(bash)", "bash"),
        ("exec > >(bash); echo 'rm -rf .git'", "bash"),
    ],
)
def test_streams_given_however_written_are_said_to_be_streams(line: str, reader: str) -> None:
    """Attacker round 193: a redirection before the command, a descriptor's path spelt
    otherwise, a stream on another descriptor (a link to /dev/fd/3), a coprocess."""
    commands = {c.name: c for c in parse_command(line).simple_commands}
    assert commands[reader].stdin_stream


@pytest.mark.parametrize(
    "line",
    [
        "command exec <&3; bash",
        "exec -- <&3; bash",
        "exec -a x < <(echo rm); bash",
        "exec <<< 'rm -rf .git'; bash",
        "f() { bash; } < <(echo 'rm -rf .git'); f",
        "command_not_found_handle() { bash; }; echo 'rm -rf .git' | nosuch",
        "f() { bash -c \"$2\"; }; echo 'rm -rf .git' | mapfile -C f -c 1",
        "shopt -s expand_aliases; alias b=bash; echo 'rm -rf .git' | b",
    ],
)
def test_input_the_parse_cannot_attribute_leaves_the_line_unparsed(line: str) -> None:
    assert not parse_command(line).parsed


def test_exec_redirecting_only_output_stays_parsed() -> None:
    assert parse_command("exec 2>/dev/null; ls").parsed


@pytest.mark.parametrize(
    "line", ["bash -rcfile f <<< 'rm -rf .git'", "bash -init-file f <<< 'rm -rf .git'"]
)
def test_bash_long_options_after_one_dash_are_read_as_bash_reads_them(line: str) -> None:
    """Attacker round 194: `-rcfile f` was read as `-r -c ...` with f for the command string,
    and the here-string bash runs went unparsed."""
    argvs = [c.argv for c in parse_command(line).simple_commands]
    assert ("rm", "-rf", ".git") in argvs, argvs
